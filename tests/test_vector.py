"""Vector envs: async equals sync (Text observations through shared memory), group
rollouts, normalised rewards."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import ap_gym
from ap_gym.envs.text_space import SharedTexts, TextSpace
from ap_gym.wrappers import NormalisedReward
from tests.helpers import register_dial

register_dial()


def test_text_space_round_trips_through_shared_memory():
    from gymnasium.vector.utils import (
        create_shared_memory,
        read_from_shared_memory,
        write_to_shared_memory,
    )

    space = TextSpace(max_length=50, min_length=0, charset="abc \n")
    buffer = create_shared_memory(space, n=3)
    view = read_from_shared_memory(space, buffer, n=3)
    assert isinstance(view, SharedTexts)
    write_to_shared_memory(space, 1, "ab c\n", buffer)
    write_to_shared_memory(space, 2, "c" * 50, buffer)
    assert tuple(view) == ("", "ab c\n", "c" * 50)  # a live view: written after it was read
    write_to_shared_memory(space, 1, "a", buffer)
    assert view[1] == "a" and view[-1] == "c" * 50
    import copy

    assert copy.deepcopy(view) == ("", "a", "c" * 50) and isinstance(copy.deepcopy(view), tuple)
    with pytest.raises(ValueError, match="outside the space's charset"):
        write_to_shared_memory(space, 0, "abz", buffer)


@pytest.mark.parametrize("env_id", ["test_vector/Dial-v0"])
def test_async_gives_the_same_observations_as_sync(env_id):
    runs = {}
    for mode in ("sync", "async"):
        envs = gym.make_vec(env_id, 4, vectorization_mode=mode)
        try:
            obs, _ = envs.reset(seed=[3, 4, 5, 6])
            trace = [tuple(obs)]
            for _ in range(3):
                obs, rewards, *_ = envs.step(("turn 1",) * 4)
                trace.append(tuple(obs) + tuple(float(r) for r in rewards))
            runs[mode] = trace
        finally:
            envs.close()
    assert runs["async"] == runs["sync"]
    assert all("the card says" in o for o in runs["async"][0])


@pytest.mark.slow
def test_textworld_async_equals_sync():
    runs = {}
    for mode in ("sync", "async"):
        envs = gym.make_vec("ap_gym/TextWorld-v0", 4, vectorization_mode=mode)
        try:
            obs, _ = envs.reset(seed=[0, 1, 2, 3])
            first = tuple(obs)
            obs, *_ = envs.step(("look",) * 4)
            runs[mode] = (first, tuple(obs))
        finally:
            envs.close()
    assert runs["async"] == runs["sync"]
    assert not any(set(o) <= {"0"} for o in runs["async"][0])


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_group_starts_identically_and_moves_together(mode):
    envs = ap_gym.make_vec("test_vector/Dial-v0", 6, group_size=3, vectorization_mode=mode, split="train")
    try:
        obs, info = envs.reset(seed=10)
        assert obs[0] == obs[1] == obs[2] and obs[3] == obs[4] == obs[5]
        assert list(info["group"]) == [0, 0, 0, 1, 1, 1] and info["active"].all()
        code = int(obs[0].split("says ")[1][0])
        wrong = f"turn {(code + 1) % 10}"
        actions = (f"turn {code}", wrong, wrong) + ("turn 0",) * 3  # member 0 wins at once
        obs, rewards, terms, truncs, info = envs.step(actions)
        assert terms[0] and rewards[0] == 4.0
        finished = terms | truncs
        for _ in range(6):
            if finished[:3].all():
                break
            before = list(obs)
            obs, rewards, terms, truncs, info = envs.step(actions)
            for i in np.flatnonzero(finished[:3]):  # held: not stepped, no reward, marked inactive
                assert not info["active"][i] and obs[i] == before[i] and rewards[i] == 0.0
            finished |= terms | truncs
        assert finished[:3].all()
        obs, rewards, terms, truncs, info = envs.step(("turn 0",) * 6)  # the group moves on, together
        assert info["active"][:3].all() and obs[0] == obs[1] == obs[2] and (rewards[:3] == 0).all()
        assert not (terms[:3] | truncs[:3]).any()
        assert info["group_episode"][0] >= 2  # a new group episode: the next seed (and task)
    finally:
        envs.close()


def test_groups_follow_a_task_list():
    envs = ap_gym.make_vec("test_vector/Dial-v0", 4, group_size=2, tasks=["dial/2", "dial/0"], split="train")
    try:
        obs, info = envs.reset(seed=0)
        assert [o.split(":")[0] for o in obs] == ["dial/2", "dial/2", "dial/0", "dial/0"]
        assert list(info["task_id"]) == ["dial/2", "dial/2", "dial/0", "dial/0"]
    finally:
        envs.close()


def test_group_size_must_divide_num_envs():
    with pytest.raises(ValueError, match="multiple of group_size"):
        ap_gym.make_vec("test_vector/Dial-v0", 5, group_size=2)


def test_normalised_reward_sums_to_one_on_a_win():
    env = NormalisedReward(gym.make("test_vector/Dial-v0", split="train"))
    obs, info = env.reset(seed=1)
    code = int(obs.split("says ")[1][0])
    _, reward, terminated, _, info = env.step(f"turn {code}")
    assert terminated and reward == 1.0 and info["raw_reward"] == 4.0


def test_vector_rewards_can_be_normalised():
    envs = ap_gym.make_vec("test_vector/Dial-v0", 2, normalised_reward=True, split="train")
    try:
        obs, _ = envs.reset(seed=[1, 1])
        code = int(obs[0].split("says ")[1][0])
        _, rewards, *_ = envs.step((f"turn {code}", "turn x"))
        assert np.allclose(rewards, [1.0, 0.0])
    finally:
        envs.close()


class Faulty(ap_gym.TextEnv):
    """Its engine raises at the second step of task faulty/1 (task faulty/0 never fails)."""

    benchmark = "faulty"

    def _task_ids(self, split):
        return ["faulty/0", "faulty/1"]

    def task_family(self, task_id):
        return "faulty"

    def _start(self, task_id, options):
        self.steps, self.breaks = 0, task_id == "faulty/1"
        return ap_gym.StartResult(f"{task_id}: a room.", "Wait.", score=0.0, max_score=1.0)

    def _advance(self, action):
        self.steps += 1
        if self.breaks and self.steps == 2:
            raise ap_gym.EnvInfrastructureError("the engine died")
        return ap_gym.StepResult("Still a room.", 0.0)


if "test_vector/Faulty-v0" not in gym.registry:
    gym.register("test_vector/Faulty-v0", entry_point=Faulty, max_episode_steps=10)


def test_an_async_sub_env_that_fails_is_an_infrastructure_error_and_reset_recovers():
    """Issue 42 item 6: async vector envs passed raw BrokenPipeError/EOFError through, and
    after one sub-env's engine raised, reset() gave AttributeError: 'NoneType' object has
    no attribute 'send' (sync recovered)."""
    import os
    import signal

    envs = ap_gym.make_vec("test_vector/Faulty-v0", 2, vectorization_mode="async")
    try:
        envs.reset(seed=0, options={"task_id": "faulty/1"})
        envs.step(("wait", "wait"))
        with pytest.raises(ap_gym.EnvInfrastructureError, match="the engine died"):
            envs.step(("wait", "wait"))
        obs, _ = envs.reset(seed=0, options={"task_id": "faulty/0"})  # a fresh vector env
        assert list(obs) == ["faulty/0: a room."] * 2
        os.kill(envs.unwrapped.processes[0].pid, signal.SIGKILL)  # a worker process dies
        with pytest.raises(ap_gym.EnvInfrastructureError, match="reset starts it anew"):
            envs.step(("wait", "wait"))
        obs, _ = envs.reset(seed=1, options={"task_id": "faulty/0"})
        assert list(obs) == ["faulty/0: a room."] * 2
        with pytest.raises(ValueError):  # the caller's own error breaks nothing and stays what it is
            envs.step(("wait",))
        envs.step(("wait", "wait"))
    finally:
        envs.close()


def test_group_episode_statistics_count_each_members_own_steps():
    """Gymnasium's RecordEpisodeStatistics would count held steps (3/3/3 here); members that
    end at steps 1, 2 and 3 must report lengths 1, 2 and 3, in both group episodes."""
    from ap_gym.wrappers import GroupEpisodeStatistics

    envs = GroupEpisodeStatistics(ap_gym.make_vec("test_vector/Dial-v0", 3, group_size=3, tasks=["dial/3"],
                                                  split="train"))
    try:
        obs, info = envs.reset(seed=4)
        assert info["group_reset"].all()
        seen = []
        for order in ((1, 2, 3), (3, 1, 2)):
            code = int(obs[0].split("says ")[1][0])
            wrong = f"turn {(code + 1) % 10}"
            lengths, returns = {}, {}
            for t in range(1, 4):
                actions = tuple(f"turn {code}" if order[i] == t else wrong for i in range(3))
                obs, rewards, terms, truncs, info = envs.step(actions)
                for i in np.flatnonzero(info.get("_episode", np.zeros(3, dtype=bool))):
                    lengths[i], returns[i] = int(info["episode"]["l"][i]), float(info["episode"]["r"][i])
                for i in range(3):
                    if order[i] < t:  # held: the task's keys only, nothing of the step that ended
                        assert info["held"][i] and not info["active"][i] and rewards[i] == 0.0
            seen.append((lengths, returns))
            obs, rewards, terms, truncs, info = envs.step(("turn 0",) * 3)  # the group's reset step
            assert info["group_reset"].all() and "episode" not in info and not rewards.any()
        assert seen[0] == ({0: 1, 1: 2, 2: 3}, {0: 4.0, 1: 4.0, 2: 4.0})
        assert seen[1] == ({0: 3, 1: 1, 2: 2}, {0: 4.0, 1: 4.0, 2: 4.0})
        assert envs.metadata["autoreset_mode"] == "group"
    finally:
        envs.close()


def test_group_episode_statistics_refuse_an_ordinary_vector_env():
    from ap_gym.wrappers import GroupEpisodeStatistics

    envs = gym.make_vec("test_vector/Dial-v0", 2)
    try:
        with pytest.raises(ValueError, match="RecordEpisodeStatistics"):
            GroupEpisodeStatistics(envs)
    finally:
        envs.close()


def test_a_closed_env_is_not_played_again_and_a_huge_vector_env_is_refused_at_once():
    """A sync vector env could be stepped after close() (its engines started again, unseen);
    make_vec(n=10**7) was still building after 90 s."""
    import gymnasium as gym
    import pytest

    import ap_gym

    envs = ap_gym.make_vec("ap_gym/Shop-v0", 2, vectorization_mode="sync", split="train")
    envs.reset(seed=0)
    envs.close()
    with pytest.raises(gym.error.ClosedEnvironmentError):
        envs.step(["search[shoes]", "search[shoes]"])
    with pytest.raises(ValueError, match="at most 1024"):
        ap_gym.make_vec("ap_gym/Shop-v0", 10**7)
