"""GRPO through TRL's GRPOTrainer: the rollout route trains (tiny model, CPU), and the
environment route's object is what TRL asks for."""

from __future__ import annotations

import inspect
import math

import gymnasium as gym
import pytest
import torch

pytest.importorskip("trl")

from ap_gym.backbones.hf import TransformersBackbone, tiny_llama  # noqa: E402
from ap_gym.envs import StartResult, StepResult, TextEnv  # noqa: E402
from ap_gym.errors import EnvInfrastructureError  # noqa: E402
from ap_gym.training.trl import EnvTools, TRLRollout, env_reward  # noqa: E402
from tests.helpers import register_dial  # noqa: E402

register_dial()


class Words(TextEnv):
    """One reply, scored by how many words it has (up to 6): random replies of a random
    model score differently, so a GRPO group has advantages to learn from."""

    benchmark = "words"

    def _task_ids(self, split):
        return ["words/0", "words/1"]

    def task_family(self, task_id):
        return "words"

    def _start(self, task_id, options):
        return StartResult("Say something long.", "Reply with many words.", score=0.0, max_score=6.0)

    def _advance(self, action):
        return StepResult("Done.", float(min(len(action.split()), 6)), won=len(action.split()) >= 6,
                          lost=len(action.split()) < 6)


if "test_trl/Words-v0" not in gym.registry:
    gym.register("test_trl/Words-v0", entry_point=Words, max_episode_steps=3)


def _trainer(tmp_path, rollout, rows, steps=3):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    model, tokenizer = tiny_llama(seed=3)
    model.train()
    tokenizer.padding_side = "left"
    args = GRPOConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, num_generations=2,
                      max_steps=steps, learning_rate=5e-3, logging_steps=1, report_to="none", use_cpu=True,
                      save_strategy="no", max_completion_length=256, beta=0.0, seed=0, bf16=False,
                      dataloader_num_workers=0)
    return GRPOTrainer(model=model, reward_funcs=[env_reward], args=args, train_dataset=Dataset.from_list(rows),
                       processing_class=tokenizer, rollout_func=rollout)


@pytest.mark.slow
def test_grpo_trainer_trains_through_the_rollout_route(tmp_path, monkeypatch):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    rollout = TRLRollout("test_trl/Words-v0", max_turns=1, max_completion_tokens=200, split="train")
    rows = rollout.dataset("train", seeds=(0, 1))
    assert rows[0]["prompt"].startswith("[task words/0 seed 0]")
    trainer = _trainer(tmp_path, rollout, rows)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert trainer.state.global_step == 3 and len(losses) >= 3
    assert all(math.isfinite(x) for x in losses)
    changed = sum(not torch.equal(a, b.detach()) for a, b in zip(before, trainer.model.parameters(), strict=True))
    assert changed > 0, "no weight changed"
    assert rollout.last and all(len(e.completion_ids) == len(e.env_mask) == len(e.logprobs) for e in rollout.last)
    rollout.close()


def test_a_group_shares_its_start_and_the_logprobs_are_the_models(tmp_path):
    model, tokenizer = tiny_llama(seed=1)
    rollout = TRLRollout("test_vector/Dial-v0", max_turns=3, split="train")

    class Trainer:  # what the rollout reads of a trainer: its model and tokenizer
        pass

    trainer = Trainer()
    trainer.model, trainer.processing_class = model, tokenizer
    prompts = [r["prompt"] for r in rollout.dataset("train", seeds=(7,))[:2] for _ in range(2)]
    out = rollout(prompts, trainer)
    assert out["prompt_ids"][0] == out["prompt_ids"][1] and out["prompt_ids"][0] != out["prompt_ids"][2]
    backbone = TransformersBackbone(model, tokenizer=tokenizer)
    for p, c, lp, mask in zip(out["prompt_ids"], out["completion_ids"], out["logprobs"], out["env_mask"], strict=True):
        again = backbone.sequence_logprobs([p], [c])[0].detach()
        chosen = torch.tensor(mask, dtype=torch.bool)
        assert torch.allclose(again[chosen], torch.tensor(lp)[chosen], atol=1e-5)
        assert all(x == 0.0 for x, m in zip(lp, mask, strict=True) if not m)
    with pytest.raises(ValueError, match="names no task"):
        rollout(["hello"], trainer)


def test_env_tools_is_what_trl_asks_of_an_environment():
    from transformers.utils import get_json_schema

    env = EnvTools.factory("test_vector/Dial-v0", split="train")()
    public = [n for n, _ in inspect.getmembers(type(env), predicate=inspect.isfunction) if not n.startswith("_")]
    assert sorted(public) == ["act", "get_reward", "reset"]  # TRL offers every public method as a tool
    schema = get_json_schema(env.act)  # TRL renders the tool from the docstring and hints
    assert schema["function"]["name"] == "act" and "command" in schema["function"]["parameters"]["properties"]
    rows = EnvTools.dataset("test_vector/Dial-v0", seeds=(4,), tasks=["dial/2"], split="train")
    assert [(r["task_id"], r["seed"]) for r in rows] == [("dial/2", 4)]
    system, user = rows[0]["prompt"]
    assert system["role"] == "system" and "Your task:" in system["content"] and user == {"role": "user", "content": ""}
    first = env.reset(**rows[0])  # TRL passes the row's columns
    assert "the card says" in first and "Admissible commands: turn 0" in first
    code = first.split("says ")[1][0]
    assert "opens" in env.act(f"turn {code}") and env.get_reward() == 1.0
    assert "ended" in env.act("turn 1")
    with pytest.raises(ValueError, match="whole number"):
        env.reset(task_id="dial/2", seed="abc")


def test_the_packaged_models_template_has_no_tool_calls_so_the_rollout_route_is_the_one():
    from trl.chat_template_utils import supports_tool_calling

    _, tokenizer = tiny_llama()
    assert not supports_tool_calling(tokenizer)


class CountingTools(EnvTools):
    """EnvTools that remember each command TRL's tool loop sent (what this test checks)."""

    sent: list[str] = []

    def act(self, command: str) -> str:
        """Send one command to the text environment and read what happens.

        Args:
            command: the command, for example "go north" or "take key".

        Returns:
            What the environment answers, with the commands it accepts next.
        """
        CountingTools.sent.append(command)
        return super().act(command)


TOOL_CALL = '<tool_call>\n{"name": "act", "arguments": {"command": "turn 3"}}\n</tool_call>'


def _a_model_that_calls_act(rows, tools):
    """A tiny Llama over SmolLM2's byte-level tokenizer and TRL's Qwen2.5 tool-calling chat
    template, taught (a few hundred steps of cross-entropy) to answer every prompt with one
    ``act`` tool call: the random model never would, and the test is of the route, not of
    learning to call tools."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM
    from trl.chat_template_utils import qwen2_5_chat_template

    from ap_gym.backbones.loading import default_model_dir

    tokenizer = AutoTokenizer.from_pretrained(default_model_dir())
    tokenizer.chat_template = qwen2_5_chat_template
    tokenizer.padding_side = "left"
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=4096, tie_word_embeddings=False,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id))
    target = tokenizer(TOOL_CALL + "<|im_end|>", add_special_tokens=False)["input_ids"]
    prompts = []
    for row in rows:
        env = tools()
        messages = [*row["prompt"][:1], {"role": "user", "content": env.reset(**row)}]
        prompts.append(tokenizer.apply_chat_template(messages, tools=[env.act], add_generation_prompt=True,
                                                     tokenize=True, return_dict=False))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    wanted = torch.tensor(target)
    for step in range(400):  # the logits of the answer's positions only (the vocabulary is 49k)
        ids = torch.tensor([list(prompts[step % len(prompts)]) + target])
        logits = model(input_ids=ids, logits_to_keep=len(target) + 1).logits[0, :-1]
        loss = torch.nn.functional.cross_entropy(logits, wanted)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if float(loss.detach()) < 0.05:  # sampled at T = 0.3 below: every token its argmax, near surely
            break
    return model.eval(), tokenizer


@pytest.mark.slow
def test_grpo_trainer_calls_act_through_environment_factory(tmp_path, monkeypatch):
    """TRL's own tool loop: the model's tool call is parsed, ``act`` runs in the env, the
    reply goes back, and the reward is the env's."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    factory = CountingTools.factory("test_vector/Dial-v0", split="train")
    rows = CountingTools.dataset("test_vector/Dial-v0", seeds=(1, 2), tasks=["dial/3"], split="train")
    model, tokenizer = _a_model_that_calls_act(rows, factory)
    CountingTools.sent.clear()
    args = GRPOConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=2, num_generations=2,
                      max_steps=1, learning_rate=1e-4, report_to="none", use_cpu=True, save_strategy="no",
                      max_completion_length=96, max_tool_calling_iterations=1, beta=0.0, seed=0, bf16=False,
                      temperature=0.3, dataloader_num_workers=0, logging_steps=1)
    trainer = GRPOTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
                          environment_factory=factory)
    trainer.train()
    assert "turn 3" in CountingTools.sent, f"no act call reached the env: {CountingTools.sent}"
    assert trainer.state.global_step == 1


def test_the_rollout_samples_with_the_trainers_settings(tmp_path):
    from types import SimpleNamespace

    model, tokenizer = tiny_llama(seed=1)
    rollout = TRLRollout("test_vector/Dial-v0", max_turns=3, split="train")
    trainer = SimpleNamespace(model=model, processing_class=tokenizer,
                              args=SimpleNamespace(temperature=0.7, top_p=0.9, max_completion_length=40))
    generation, budget = rollout.settings(trainer)
    assert (generation.temperature, generation.top_p, budget) == (0.7, 0.9, 40)
    out = rollout([rollout.dataset("train", seeds=(7,))[0]["prompt"]], trainer)
    assert len(out["completion_ids"][0]) <= 40  # the trainer's completion budget holds for the episode
    trainer.args = SimpleNamespace()  # a trainer that says nothing: TRL's defaults
    generation, budget = rollout.settings(trainer)
    assert (generation.temperature, generation.top_p, budget) == (1.0, 1.0, 512)
    rollout.close()


class Fragile(TextEnv):
    """Its engine dies at the second step of task f/0 (f/1 never dies)."""

    benchmark = "fragile"

    def _task_ids(self, split):
        return ["f/0", "f/1"]

    def task_family(self, task_id):
        return "f"

    def _start(self, task_id, options):
        self.task, self.n = task_id, 0
        return StartResult("step 0", "Say go twice.", score=0.0, max_score=2.0, admissible_commands=["go", "look"])

    def _advance(self, action):
        self.n += 1
        if self.task == "f/0" and self.n == 2:
            raise EnvInfrastructureError("the engine died")
        return StepResult(f"step {self.n}", float(self.n), won=self.n >= 2, admissible_commands=["go", "look"])


def _tool_loop(env, commands):
    """What TRL's ``_tool_call_loop`` does with a tool call: a raised exception becomes the
    tool's result ``{"error": ...}`` and the loop goes on; then ``get_reward``, ``None`` as NaN."""
    results = []
    for command in commands:
        try:
            results.append(env.act(command))
        except Exception as e:  # TRL's own handling
            results.append({"error": str(e)})
    reward = env.get_reward()
    return results, float("nan") if reward is None else reward


def test_an_engine_that_dies_mid_episode_leaves_the_tool_rollout_unscored_never_zero(caplog):
    """EnvTools stepped the env itself: after the engine died at step 2 the next act answered
    as if nothing happened and get_reward() returned 0.0. Now it plays through the stepper: an
    infrastructure failure, every later act an error, and no reward (TRL drops a NaN)."""
    if "test_training/Fragile-v0" not in gym.registry:
        gym.register("test_training/Fragile-v0", entry_point=Fragile, max_episode_steps=5)
    env = EnvTools.factory("test_training/Fragile-v0")()
    assert "step 0" in env.reset(task_id="f/0", seed=0)
    results, reward = _tool_loop(env, ["go", "go", "go"])
    assert "step 1" in results[0]
    assert isinstance(results[1], dict) and "died" in results[1]["error"]
    assert isinstance(results[2], dict) and "not be scored" in results[2]["error"]
    assert math.isnan(reward) and "infrastructure" in caplog.text
    # the next rollout of the same instance starts afresh and is scored by the stepper's record
    env.reset(task_id="f/1", seed=0)
    results, reward = _tool_loop(env, ["go", "go"])
    assert "ended" in results[1] and reward == 1.0
    # a rollout the model left before the end keeps the score it reached
    env.reset(task_id="f/1", seed=0)
    assert _tool_loop(env, ["go"])[1] == 0.5
