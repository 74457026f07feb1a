"""The training path plays through the evaluation stepper and prompt: the prompt a model is
trained on equals, token for token, the prompt ``ap-gym run`` evaluates it with on the same
state, and an infrastructure failure is recorded as ``run_episode`` records it."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest

from ap_gym.backbones.base import Completion, GenerationConfig
from ap_gym.backbones.hf import TransformersBackbone, tiny_llama
from ap_gym.envs import StartResult, StepResult, TextEnv
from ap_gym.errors import EnvInfrastructureError
from ap_gym.protocol import RunConfig
from ap_gym.protocol.setting import Resources, build_policy
from ap_gym.rollout import run_episode
from ap_gym.training.tokens import play_tokens, require_valid
from ap_gym.types import Termination
from tests.helpers import register_dial

register_dial()
#: options that make the prompt builder's rules matter: a short window, a cut, a short list
AGENT = {"history_window": 2, "max_observation_chars": 40, "max_admissible_listed": 4}


class Replay:
    """The training rollout's replies, replayed to the evaluation policy (a fake inside a test
    whose subject is the prompt): it keeps the token ids of every prompt it is given."""

    def __init__(self, backbone: TransformersBackbone, replies: list[str]) -> None:
        self.backbone, self.replies, self.identity = backbone, list(replies), "replay"
        self.prompts: list[tuple[int, ...]] = []

    def generate(self, messages, config=GenerationConfig()):
        ids, _ = self.backbone.encode_prompt(messages, min(config.max_new_tokens, self.backbone.max_context // 2))
        self.prompts.append(tuple(ids))
        return Completion(self.replies.pop(0), len(ids), 1, 0.0)

    def generate_batch(self, batch, config=GenerationConfig()):
        return [self.generate(m, config) for m in batch]

    def score(self, messages, candidates, reduction="sum"):
        raise AssertionError("the evaluation policy generates, as the training one did")

    def describe(self):
        return {"identity": self.identity}


def test_the_training_prompt_is_the_evaluation_prompt_token_for_token(tmp_path):
    model, tokenizer = tiny_llama(seed=2)
    backbone = TransformersBackbone(model, tokenizer=tokenizer)
    env = gym.make("test_vector/Dial-v0", split="train")
    generation = GenerationConfig(max_new_tokens=6, temperature=1.0)
    played = play_tokens(backbone, env, task_id="dial/3", seed=5, generation=generation, max_turns=4,
                         max_completion_tokens=10_000, agent=AGENT, sample_seed=11)
    assert len(played.turns) >= 2, "the episode ended at once: nothing to compare after the first turn"
    replies = [backbone.tokenizer.decode(t.completion_ids, skip_special_tokens=True) for t in played.turns]

    # the evaluation policy, built as `ap-gym run` builds it, on the same task and seed
    config = RunConfig.from_dict({"name": "t", "benchmarks": ["shop"], "backbone": "tiny", "out": str(tmp_path),
                                  "policies": [{"name": "no_memory", "options": {
                                      "agent": {**AGENT, "action_mode": "generate", "generation": generation.to_dict()}}}]})
    replay = Replay(backbone, replies)
    policy = build_policy(config.policies[0], config, Path(tmp_path) / "m.sqlite", 0, Resources(), backbone=replay)
    episode = run_episode(env, policy.eval(), task_id="dial/3", seed=5, max_steps=len(played.turns))
    assert [s.action for s in episode.steps] == [t.action for t in played.turns]
    assert replay.prompts == [t.prompt_ids for t in played.turns]
    env.close()


class Breaks(TextEnv):
    """Its engine dies at the second step."""

    benchmark = "breaks"

    def _task_ids(self, split):
        return ["breaks/0"]

    def task_family(self, task_id):
        return "breaks"

    def _start(self, task_id, options):
        self.steps = 0
        return StartResult("A room.", "Wait.", score=0.0, max_score=1.0, admissible_commands=["wait"])

    def _advance(self, action):
        self.steps += 1
        if self.steps == 2:
            raise EnvInfrastructureError("the engine died")
        return StepResult("Still a room.", 0.0, admissible_commands=["wait"])


if "test_tokens/Breaks-v0" not in gym.registry:
    gym.register("test_tokens/Breaks-v0", entry_point=Breaks, max_episode_steps=5)


def test_an_infrastructure_failure_in_a_training_rollout_is_recorded_as_run_episode_records_it():
    model, tokenizer = tiny_llama(seed=2)
    backbone = TransformersBackbone(model, tokenizer=tokenizer)
    env = gym.make("test_tokens/Breaks-v0")
    played = play_tokens(backbone, env, task_id="breaks/0", seed=0, max_turns=4)
    assert played.infrastructure_failure and played.episode is not None
    assert played.episode.termination is Termination.INFRA and "the engine died" in played.episode.error
    assert played.reward == 0.0 and not played.success
    with pytest.raises(Exception, match="the engine died"):
        require_valid(played)
    env.close()


def test_the_completion_budget_holds_from_the_first_reply():
    """max_completion_tokens=10 used to give a 24-token completion."""
    model, tokenizer = tiny_llama(seed=2)
    backbone = TransformersBackbone(model, tokenizer=tokenizer)
    env = gym.make("test_vector/Dial-v0", split="train")
    played = play_tokens(backbone, env, task_id="dial/1", seed=0, max_turns=5, max_completion_tokens=10,
                         generation=GenerationConfig(max_new_tokens=24, temperature=1.0))
    assert 0 < len(played.completion_ids) <= 10 and len(played.env_mask) == len(played.completion_ids)
    env.close()


def test_play_tokens_refuses_an_env_that_is_not_a_text_env():
    """It gave a bare AssertionError from inside CartPole's step."""
    import gymnasium as gym
    import pytest

    from ap_gym.backbones.hf import TransformersBackbone, tiny_llama
    from ap_gym.training import play_tokens

    model, tokenizer = tiny_llama()
    env = gym.make("CartPole-v1")
    with pytest.raises(TypeError, match="text env"):
        play_tokens(TransformersBackbone(model, tokenizer=tokenizer), env, max_turns=2)
    env.close()
