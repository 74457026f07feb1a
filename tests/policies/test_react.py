from __future__ import annotations

import gymnasium as gym
import pytest

import ap_gym
from ap_gym.backbones import Completion, GenerationConfig, OpenAIBackbone, Scores
from ap_gym.backbones.server import BackboneServer
from ap_gym.policies import AgentConfig, NoMemory
from ap_gym.policies.react import normalise_action
from ap_gym.types import Termination
from tests.helpers import Counter


@pytest.mark.parametrize(
    ("raw", "admissible", "expected"),
    [
        ("> go north\nthen look", None, ("go north", False)),
        ("Action: Take Apple.", ["take apple", "look"], ("take apple", False)),
        ("  1. open the door  ", ["open door", "look"], ("open door", False)),
        ("", ["look"], ("look", True)),
        ("   \n  \n", None, ("look", True)),
        ("x" * 10_000, None, ("x" * 200, False)),
        ("grab teh apple", ["take apple", "go north"], ("take apple", False)),
        ("dance wildly", ["take apple", "go north"], ("dance wildly", True)),
    ],
)
def test_normalise_action(raw, admissible, expected):
    assert normalise_action(raw, admissible) == expected


class Scripted:
    """A backbone that answers from a script (the subject here is the agent)."""

    identity = "scripted"

    def __init__(self, answers):
        self.answers = list(answers)
        self.seen = []

    def generate(self, messages, config=GenerationConfig()):
        self.seen.append(messages)
        return Completion(self.answers.pop(0), 11, 3, 0.0)

    def generate_batch(self, batch, config=GenerationConfig()):
        return [self.generate(m, config) for m in batch]

    def score(self, messages, candidates, reduction="sum"):
        self.seen.append(messages)
        return Scores(tuple(1.0 if c == "add" else 0.0 for c in candidates), 7, len(candidates))

    def describe(self):
        return {"kind": "scripted"}


def test_malformed_output_never_crashes_and_is_counted():
    backbone = Scripted(["", "Action: add", "\u2603\u2603", "> add", "add please", "add", "add"])
    agent = NoMemory(backbone, AgentConfig(action_mode="generate")).eval()
    ep = ap_gym.run_episode(Counter(), agent, task_id="c/1", max_steps=10)
    assert ep.success and ep.parse_failures >= 1
    assert ep.steps[0].action == "look" and ep.steps[0].trace.parse_failure
    assert ep.usage.calls_for("acting") == ep.num_steps and ep.usage.prompt_tokens["acting"] == 11 * ep.num_steps


def test_prompt_and_response_are_in_the_episode():
    backbone = Scripted([])
    agent = NoMemory(backbone, AgentConfig(action_mode="choose")).eval()
    ep = ap_gym.run_episode(Counter(), agent, task_id="c/1")
    assert ep.success and ep.num_steps == 3
    assert ep.usage.prompt_tokens["acting"] == 3 * (7 + 2)  # the scores' own token counts
    for step in ep.steps:
        assert "Count to three." in step.trace.prompt and "Admissible commands: add, quit" in step.trace.prompt
        assert step.trace.response.startswith("chose 'add'")
    assert "[assistant]\nadd" in ep.steps[2].trace.prompt  # history is in the prompt
    assert ep.steps[2].trace.prompt.count("Admissible commands") == 1  # listed only for the current turn


def test_history_window_drops_oldest_half_at_once():
    backbone = Scripted(["look"] * 30)
    agent = NoMemory(backbone, AgentConfig(action_mode="generate", history_window=4))
    ap_gym.run_episode(gym.wrappers.TimeLimit(Counter(), 12), agent, task_id="c/1")
    sizes = [len(m) for m in backbone.seen]
    assert max(sizes) <= 2 + 2 * 4 and sizes[-1] < max(sizes)


def test_agent_runs_on_tiny_backbone_both_modes(tiny_backbone):
    for mode in ("choose", "generate"):
        ep = ap_gym.run_episode(Counter(), NoMemory(tiny_backbone, AgentConfig(action_mode=mode)).eval(),
                                task_id="c/1", max_steps=5)
        assert ep.num_steps >= 1 and ep.usage.calls_for("acting") == ep.num_steps
        assert ep.termination in (Termination.WON, Termination.LOST, Termination.STEP_LIMIT)


class Forever(Counter):
    def _advance(self, action):
        return super()._advance("wait")


def test_killing_the_server_mid_episode_is_an_infrastructure_failure(tiny_backbone):
    server = BackboneServer(tiny_backbone, port=0).start()
    client = OpenAIBackbone(server.url, retries=1, backoff_s=0.01)

    class StopsServer(NoMemory):
        def act(self, observation, info):
            if len(self._steps) == 2:
                server.stop()
            return super().act(observation, info)

    agent = StopsServer(client, AgentConfig(action_mode="generate")).eval()
    ep = ap_gym.run_episode(Forever(), agent, task_id="c/1", max_steps=10)
    assert ep.termination is Termination.INFRA and "Unreachable" in ep.error and ep.num_steps == 2
    # the run goes on: the next episode simply runs (here against a restarted server)
    server2 = BackboneServer(tiny_backbone, port=0).start()
    try:
        agent.backbone = OpenAIBackbone(server2.url)
        ep2 = ap_gym.run_episode(Counter(), agent, task_id="c/2", max_steps=3)
        assert ep2.termination is not Termination.INFRA
    finally:
        server2.stop()


@pytest.mark.parametrize(
    ("raw", "admissible", "expected"),
    [
        ("Thought: I should count.\nAction: add", ["add", "quit"], ("I should count.", "add", False)),
        ("Thought: first\nmore thinking\nAction: > Add.\nObservation: ...", ["add"], ("first more thinking", "add", False)),
        ("thought: hmm\naction: dance", ["add", "quit"], ("hmm", "dance", True)),
        ("I will add now\nadd", ["add"], ("I will add now", "add", True)),
        ("", ["add"], ("", "look", True)),
    ],
)
def test_parse_react(raw, admissible, expected):
    from ap_gym.policies.react import parse_react

    assert parse_react(raw, admissible) == expected


def test_react_mode_keeps_the_reasoning_and_shows_it_to_later_turns():
    backbone = Scripted(["Thought: the counter is at 0.\nAction: add", "Thought: again\nAction: add",
                         "no format here\nadd"])
    agent = NoMemory(backbone, AgentConfig(action_mode="react")).eval()
    ep = ap_gym.run_episode(Counter(), agent, task_id="c/1", max_steps=3)
    assert ep.success and [s.action for s in ep.steps] == ["add", "add", "add"]
    assert [s.trace.reasoning for s in ep.steps] == ["the counter is at 0.", "again", "no format here"]
    assert [s.trace.parse_failure for s in ep.steps] == [False, False, True] and ep.parse_failures == 1
    assert "Thought: <one sentence" in ep.steps[0].trace.prompt  # the format, from prompts/acting_react.txt
    assert "[assistant]\nThought: the counter is at 0.\nAction: add" in ep.steps[1].trace.prompt
    assert ep.policy_info["action_mode"] == "react"


def test_the_run_seed_reaches_sampling_and_greedy_ignores_it(tiny_backbone):
    """With temperature > 0 the run's seed decides the samples (same seed, same episode;
    another seed, another episode); greedy decoding gives one episode whatever the seed."""

    def actions(seed, temperature):
        agent = {"action_mode": "generate", "generation": {"max_new_tokens": 4, "temperature": temperature}}
        policy = NoMemory(tiny_backbone, agent, seed=seed)
        ep = ap_gym.run_episode(Counter(), policy, task_id="c/1", max_steps=4)
        return [s.action for s in ep.steps]

    assert actions(0, 1.5) == actions(0, 1.5)
    assert len({tuple(actions(s, 1.5)) for s in range(4)}) > 1
    assert len({tuple(actions(s, 0.0)) for s in range(4)}) == 1
    config = GenerationConfig(temperature=1.0)
    assert config.seeded(0, "t", 1).seed != config.seeded(1, "t", 1).seed
    assert config.seeded(0, "t", 1) == config.seeded(0, "t", 1) and GenerationConfig().seeded(0, "t").seed is None
