from __future__ import annotations

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import ap_gym
from ap_gym.envs.scienceworld import official_variations, scienceworld_split
from ap_gym.errors import EnvInfrastructureError, UnknownTaskError
from ap_gym.policies import WalkthroughPolicy


def test_split_is_the_papers():
    split = scienceworld_split()
    variations = official_variations()
    assert len(variations) == 30
    assert len(split["train"]) == 150 and len(split["test"]) == 60
    assert not set(split["train"]) & set(split["test"])
    for task, v in variations.items():
        train = [int(t.rpartition("/")[2]) for t in split["train"] if t.rpartition("/")[0] == task]
        test = [int(t.rpartition("/")[2]) for t in split["test"] if t.rpartition("/")[0] == task]
        assert len(train) == 5 and len(test) == 2
        assert set(test) <= set(v["test"])
        official_train = [i for i in train if i in v["train"]]
        assert len(official_train) == min(5, len(v["train"]))
        assert set(train) - set(official_train) <= set(v["dev"])
    assert scienceworld_split() == split  # fixed by its seed


def test_check_env(sw_env):
    check_env(sw_env.unwrapped, skip_render_check=True)


def test_contract_and_success_definition(sw_env):
    tid = sw_env.unwrapped.task_ids("test")[0]
    obs, info = sw_env.reset(options={"task_id": tid})
    assert info["task_id"] == tid and info["task_family"] == tid.rpartition("/")[0]
    assert "Your task is to" in info["instruction"]
    assert info["max_score"] == 100.0 and "admissible_commands" not in info
    obs, reward, term, trunc, info = sw_env.step("fly to the moon")
    assert isinstance(obs, str) and not term and not trunc and info["success"] is False
    obs, info = sw_env.reset(options={"task_id": tid, "admissible_commands": True})
    assert "look around" in info["admissible_commands"]


def test_admissible_commands_are_the_engines_valid_actions(sw_env):
    """One JSON round trip gives exactly the list the engine's Java list gives, element by element."""
    tid = sw_env.unwrapped.task_ids("test")[1]
    obs, info = sw_env.reset(options={"task_id": tid, "admissible_commands": True})
    server = sw_env.unwrapped._engine.server
    for action in ("look around", "open door", "go to hallway"):
        assert info["admissible_commands"] == sorted(str(a) for a in server.getValidActionObjectCombinations())
        obs, reward, term, trunc, info = sw_env.step(action)
    sw_env.reset(options={"task_id": tid, "admissible_commands": False})


def test_bad_input(sw_env):
    with pytest.raises(UnknownTaskError, match="unknown task id"):
        sw_env.reset(options={"task_id": "boil/99999"})
    sw_env.reset(options={"task_id": sw_env.unwrapped.task_ids("test")[0]})
    with pytest.raises(TypeError, match="actions are text"):
        sw_env.step(None)


def test_killed_jvm_is_an_infrastructure_failure_and_reset_recovers():
    env = gym.make("ap_gym/ScienceWorld-v0", split="test")
    try:
        tid = env.unwrapped.task_ids("test")[0]
        env.reset(options={"task_id": tid})
        env.unwrapped._engine._gateway.java_process.kill()
        env.unwrapped._engine._gateway.java_process.wait()
        with pytest.raises(EnvInfrastructureError, match="reset"):
            env.step("look around")
        obs, info = env.reset(options={"task_id": tid})
        assert info["task_id"] == tid and obs
        env.unwrapped._engine._gateway.java_process.kill()
        env.unwrapped._engine._gateway.java_process.wait()
        ep = ap_gym.run_episode(env, WalkthroughPolicy(), task_id=tid)
        # The reset itself starts a fresh JVM, so this episode completes normally.
        assert ep.termination is not ap_gym.Termination.INFRA
    finally:
        env.close()


def test_infrastructure_failure_mid_episode_is_recorded(sw_env):
    class Killer(WalkthroughPolicy):
        def act(self, observation, info):
            if len(self._steps) == 2:
                sw_env.unwrapped._engine._gateway.java_process.kill()
                sw_env.unwrapped._engine._gateway.java_process.wait()
            return super().act(observation, info)

    ep = ap_gym.run_episode(sw_env, Killer(), task_id=sw_env.unwrapped.task_ids("test")[0])
    assert ep.termination is ap_gym.Termination.INFRA and not ep.success
    assert "JVM" in ep.error and ep.num_steps == 2


@pytest.mark.slow
def test_walkthrough_wins_every_held_out_task(sw_env):
    results = {}
    for tid in sw_env.unwrapped.task_ids("test"):
        ep = ap_gym.run_episode(sw_env, WalkthroughPolicy(), task_id=tid)
        results[tid] = (ep.success, ep.score)
    lost = {k: v for k, v in results.items() if not v[0]}
    assert not lost, lost
    assert len(results) == 60


def test_a_hung_jvm_is_killed_by_the_watchdog_and_reset_recovers():
    import os
    import signal

    env = gym.make("ap_gym/ScienceWorld-v0", split="test", engine_timeout_s=300)  # loads: any machine's time
    try:
        task = env.unwrapped.task_ids("test")[0]
        env.reset(options={"task_id": task})
        os.kill(env.unwrapped._engine._gateway.java_process.pid, signal.SIGSTOP)  # hung, not dead
        env.unwrapped.engine_timeout_s = 4  # the watchdog, made short for this call
        with pytest.raises(EnvInfrastructureError, match="stopped answering"):
            env.step("look around")
        env.unwrapped.engine_timeout_s = 300
        obs, info = env.reset(options={"task_id": task})  # a new JVM
        assert info["task_id"] == task and obs
    finally:
        env.close()


def test_closing_an_env_whose_jvm_is_stopped_returns():
    """close() must not wait on a JVM that will never answer, and must not leave it
    behind stopped."""
    import os
    import signal
    import threading

    env = gym.make("ap_gym/ScienceWorld-v0", split="test", engine_timeout_s=60)
    env.reset(options={"task_id": env.unwrapped.task_ids("test")[0]})
    process = env.unwrapped._engine._gateway.java_process
    os.kill(process.pid, signal.SIGSTOP)
    try:
        closer = threading.Thread(target=env.close, daemon=True)
        closer.start()
        closer.join(300)  # a hang guard, not a duration under test
        assert not closer.is_alive(), "env.close() hung on a stopped JVM"
        assert process.poll() is not None  # and the JVM is gone, not left stopped
    finally:
        if process.poll() is None:
            process.kill()


def test_the_jvm_is_recycled_after_its_reset_budget():
    env = gym.make("ap_gym/ScienceWorld-v0", split="test", recycle_every=2)
    try:
        task = env.unwrapped.task_ids("test")[0]
        pids = []
        for _ in range(3):
            env.reset(options={"task_id": task})
            pids.append(env.unwrapped._engine._gateway.java_process.pid)
        assert pids[0] == pids[1] != pids[2]
    finally:
        env.close()


def test_the_jvm_runs_with_a_heap_limit(sw_env):
    sw_env.reset(seed=0)
    command = sw_env.unwrapped._engine._gateway.java_process.args
    assert any(str(a).startswith("-Xmx") for a in command), command


def test_a_jvm_that_never_starts_is_killed_at_the_launch_deadline(tmp_path, monkeypatch):
    """The launch is under a deadline too: a JVM that never says its port is killed."""

    from ap_gym.envs.scienceworld import _launch_gateway
    from ap_gym.errors import EnvInfrastructureError

    java = tmp_path / "bin" / "java"
    java.parent.mkdir()
    java.write_text("#!/bin/sh\nsleep 60\n")
    java.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(EnvInfrastructureError, match="did not start within 1 s"):
        _launch_gateway(classpath="x.jar", timeout_s=1.0)
