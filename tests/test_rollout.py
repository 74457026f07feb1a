from __future__ import annotations

import gymnasium as gym

import ap_gym
from ap_gym.errors import BackboneError
from ap_gym.policies import BasePolicy, RandomPolicy
from ap_gym.types import Episode, Termination, Usage
from tests.helpers import Counter


class Scripted(BasePolicy):
    def __init__(self, actions, fail_at=None):
        super().__init__()
        self.actions, self.fail_at, self.ended = list(actions), fail_at, []

    def act(self, observation, info):
        if self.fail_at is not None and len(self._steps) == self.fail_at:
            raise BackboneError("server gone")
        self.meter.record("acting", 10, 2)
        self.record_step(prompt=f"P{len(self._steps)}", response="R")
        return self.actions.pop(0)

    def end(self, episode):
        self.ended.append(episode)
        return Usage({"reflection": 1}, {"reflection": 5}, {"reflection": 1})


def test_run_episode_builds_a_complete_episode():
    env = gym.wrappers.TimeLimit(Counter(), max_episode_steps=50)
    policy = Scripted(["add", "look", "add", "add"])
    ep = ap_gym.run_episode(env, policy, task_id="c/1", seed=3)
    assert ep.success and ep.termination is Termination.WON and ep.num_steps == 4
    assert [s.action for s in ep.steps] == ["add", "look", "add", "add"]
    assert [s.trace.prompt for s in ep.steps] == ["P0", "P1", "P2", "P3"]
    assert ep.usage.calls_for("acting") == 4 and ep.usage.calls_for("reflection") == 1
    assert ep.usage.prompt_tokens["acting"] == 40
    assert policy.ended[0].usage.calls_for("reflection") == 0  # end sees the episode itself
    assert Episode.from_dict(ep.to_dict()) == ep


def test_step_limit_truncates_and_fails():
    env = gym.wrappers.TimeLimit(Counter(), max_episode_steps=3)
    ep = ap_gym.run_episode(env, Scripted(["look"] * 5), task_id="c/1")
    assert ep.termination is Termination.STEP_LIMIT and not ep.success and ep.num_steps == 3
    ep = ap_gym.run_episode(Counter(), Scripted(["look"] * 5), task_id="c/1", max_steps=2)
    assert ep.termination is Termination.STEP_LIMIT and ep.num_steps == 2


def test_backbone_failure_is_infrastructure_not_task_failure():
    ep = ap_gym.run_episode(Counter(), Scripted(["add"] * 5, fail_at=1), task_id="c/1")
    assert ep.termination is Termination.INFRA and ep.infrastructure_failure
    assert "server gone" in ep.error and ep.num_steps == 1


def test_random_policy_is_reproducible():
    a = ap_gym.run_episode(Counter(), RandomPolicy(seed=1), task_id="c/1", max_steps=20)
    b = ap_gym.run_episode(Counter(), RandomPolicy(seed=1), task_id="c/1", max_steps=20)
    assert [s.action for s in a.steps] == [s.action for s in b.steps]


def test_random_policy_episodes_do_not_depend_on_what_ran_before():
    fresh = ap_gym.run_episode(Counter(), RandomPolicy(seed=1), task_id="c/2", max_steps=20)
    busy = RandomPolicy(seed=1)
    for task in ("c/1", "c/3", "c/1"):
        ap_gym.run_episode(Counter(), busy, task_id=task, max_steps=20)
    again = ap_gym.run_episode(Counter(), busy, task_id="c/2", max_steps=20)
    assert [s.action for s in again.steps] == [s.action for s in fresh.steps]
    other = ap_gym.run_episode(Counter(), RandomPolicy(seed=2), task_id="c/2", max_steps=20)
    assert [s.action for s in other.steps] != [s.action for s in fresh.steps]
