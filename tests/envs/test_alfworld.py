from __future__ import annotations

import collections
import json

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import ap_gym
from ap_gym.envs.alfworld import HELDOUT_COUNTS, TRAIN_COUNTS, ALFWorldEnv, alfworld_suite
from ap_gym.envs.alfworld_gen import TASK_TYPES, ensure_alfworld_game
from ap_gym.policies import WalkthroughPolicy
from ap_gym.wrappers import PutToMove, put_to_move


def test_suite_shape_and_unseen_scenes():
    suite = alfworld_suite()
    assert len(suite["train"]) == 180 and len(suite["test"]) == 134
    assert collections.Counter(g.task_type for g in suite["test"]) == HELDOUT_COUNTS
    assert collections.Counter(g.task_type for g in suite["train"]) == TRAIN_COUNTS
    assert not {g.scene for g in suite["train"]} & {g.scene for g in suite["test"]}
    assert {g.task_type for g in suite["train"]} == {g.task_type for g in suite["test"]} == set(TASK_TYPES)
    assert alfworld_suite() == suite


def test_held_out_games_have_no_twins():
    """No two held-out games share a scene and a goal (twins differ only by where objects lie
    and would count one task twice); training games keep the goals their seeds draw."""
    suite = alfworld_suite()
    keys = [(g.scene, g.task_type, g.goal) for g in suite["test"]]
    assert all(g.goal is not None for g in suite["test"]) and len(set(keys)) == len(keys)
    assert all(g.goal is None for g in suite["train"])
    assert suite["train"][0].task_id == "pick_and_place_simple/FloorPlan4/s20000"  # the audit's labelled set uses it


@pytest.mark.parametrize(
    ("action", "expected"),
    [("put mug 1 in/on coffeemachine 1", "move mug 1 to coffeemachine 1"),
     ("put apple 2 in fridge 1", "move apple 2 to fridge 1"), ("Put egg 1 on countertop 3", "move egg 1 to countertop 3"),
     ("move mug 1 to sinkbasin 1", "move mug 1 to sinkbasin 1"), ("go to desk 1", "go to desk 1")],
)
def test_put_is_rewritten_to_move(action, expected):
    assert put_to_move(action) == expected


@pytest.fixture(scope="module")
def alf_env():
    env = gym.make("ap_gym/ALFWorld-v0", split="test")
    yield env
    env.close()


def one_per_type(env):
    ids = env.unwrapped.task_ids("test")
    return [next(t for t in ids if t.startswith(tt)) for tt in TASK_TYPES]


def test_expert_wins_one_game_of_each_type_and_old_syntax_works(alf_env):
    specs = {g.task_id: g for g in alfworld_suite()["test"]}
    for task_id in one_per_type(alf_env):
        ep = ap_gym.run_episode(alf_env, WalkthroughPolicy(), task_id=task_id)
        assert ep.success and ep.task_family == task_id.split("/")[0], task_id
        assert ep.instruction and ep.num_steps <= 50
        assert specs[task_id].goal[0].lower() in ep.instruction.replace(" ", "")  # the game asks its goal
    # the same plan with ALFWorld's old 'put X in/on Y' wins too
    task_id = one_per_type(alf_env)[0]
    obs, info = alf_env.reset(options={"task_id": task_id, "walkthrough": True})
    plan = [a.replace("move ", "put ", 1).replace(" to ", " in/on ", 1) if a.startswith("move ") else a
            for a in info["walkthrough"]]
    assert any(a.startswith("put ") for a in plan)
    for action in plan:
        obs, reward, term, trunc, info = alf_env.step(action)
    assert term and info["success"]


def test_check_env_and_contract(alf_env):
    check_env(alf_env.unwrapped, skip_render_check=True)
    obs, info = alf_env.reset(options={"task_id": one_per_type(alf_env)[2]})
    assert info["task_family"] == "look_at_obj_in_light" and "go to" in " ".join(info["admissible_commands"])
    obs, reward, term, trunc, info = alf_env.step("fly to the moon")
    assert obs == "Nothing happens." and not term and not info["success"]
    wrapped = PutToMove(gym.make("ap_gym/TextWorld-v0", split="test"))
    assert wrapped.action("put key in box") == "move key to box"
    wrapped.close()


def test_damaged_cache_is_regenerated(tmp_path, monkeypatch):
    monkeypatch.setenv("AP_GYM_CACHE", str(tmp_path))
    spec = alfworld_suite()["test"][0]
    game = ensure_alfworld_game(spec)
    plan = json.loads((game.parent / "walkthrough.json").read_text())
    (game.parent / "walkthrough.json").unlink()  # as if killed mid-write
    again = ensure_alfworld_game(spec)
    assert json.loads((again.parent / "walkthrough.json").read_text()) == plan


def test_official_data_layout_is_used_when_present(tmp_path):
    src = ensure_alfworld_game(alfworld_suite()["test"][0]).parent
    for split in ("train", "valid_unseen"):
        d = tmp_path / "json_2.1.1" / split / "pick_and_place_simple-Mug-None-Desk-301" / "trial_T1"
        d.mkdir(parents=True)
        for name in ("game.tw-pddl", "traj_data.json"):
            (d / name).write_text((src / name).read_text())
    env = ALFWorldEnv(split="test", data=tmp_path)
    (task,) = env.task_ids("test")
    assert task == "pick_and_place_simple-Mug-None-Desk-301/trial_T1" and env.task_family(task) == "pick_and_place_simple"
    ep = ap_gym.run_episode(env, WalkthroughPolicy(), task_id=task)  # plan from the planner
    assert ep.success


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def test_engine_runs_in_its_own_process_and_is_recycled():
    """The engine's native leak (~1.4 MB per reset) ends with its process: recycling every
    3 resets starts a new engine, and this process does not grow with the resets."""
    env = ALFWorldEnv(split="test", recycle_every=3)
    task = env.task_ids("test")[0]
    try:
        env.reset(options={"task_id": task})
        first, before = env._engine.pid, rss_mb("self")
        assert first is not None and first != __import__("os").getpid()
        pids = set()
        for _ in range(6):
            env.reset(options={"task_id": task})
            env.step("look")
            pids.add(env._engine.pid)
        assert env._engine.started == 3 and len(pids | {first}) == 3  # resets 1-3, 4-6, 7
        assert rss_mb("self") - before < 20
    finally:
        env.close()
    assert env._engine.pid is None


def test_a_crashed_or_hung_engine_is_an_infrastructure_error_and_reset_recovers():
    import os
    import signal

    from ap_gym.errors import EnvInfrastructureError

    # loading a game has 3 x the call budget: on a loaded machine that must not be seconds
    env = ALFWorldEnv(split="test", engine_timeout_s=300)
    task = env.task_ids("test")[0]
    try:
        env.reset(options={"task_id": task})
        os.kill(env._engine.pid, signal.SIGKILL)  # a native crash
        with pytest.raises(EnvInfrastructureError, match="died.*reset"):
            env.step("look")
        with pytest.raises(Exception, match="reset"):
            env.step("look")  # the episode is gone, not silently continued
        env.reset(options={"task_id": task})
        os.kill(env._engine.pid, signal.SIGSTOP)  # a hang: the call's watchdog, made short for this call
        env._engine.timeout_s = 3
        with pytest.raises(EnvInfrastructureError, match="within 3 s"):
            env.step("look")
        env._engine.timeout_s = 300
        obs, info = env.reset(options={"task_id": task})
        assert "Your task is to" in obs
        assert env.step("look")[0]
    finally:
        env.close()
