from __future__ import annotations

import gymnasium as gym

from ap_gym.types import Termination
from ap_gym.wrappers import RecordEpisode
from tests.helpers import Counter


def test_record_episode_builds_the_episode_in_a_users_own_loop():
    env = RecordEpisode(gym.wrappers.TimeLimit(Counter(), max_episode_steps=50))
    obs, info = env.reset(seed=5, options={"task_id": "c/2"})
    assert env.num_steps == 0 and env.start_info["task_id"] == "c/2"
    for action in ("look", "add", "add", "add"):
        env.step(action)
    episode = env.episode
    assert episode is not None and episode.success and episode.termination is Termination.WON
    assert [s.action for s in episode.steps] == ["look", "add", "add", "add"] and env.num_steps == 4
    assert episode.seed == 5 and episode.instruction == "Count to three." and episode.score == 3.0


def test_truncation_is_a_step_limit_failure():
    env = RecordEpisode(gym.wrappers.TimeLimit(Counter(), max_episode_steps=2))
    env.reset(options={"task_id": "c/1"})
    env.step("look")
    env.step("look")
    assert env.episode.termination is Termination.STEP_LIMIT and not env.episode.success
