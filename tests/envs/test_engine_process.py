"""The engine child process: its start-up has a budget of its own, apart from each call's."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ap_gym.envs.engine_process import EngineProcess, die_with_parent
from ap_gym.errors import EnvInfrastructureError
from tests.helpers import process_alive


class SlowToBuild:
    """An engine whose construction takes longer than one call may (a cold machine's imports)."""

    def __init__(self) -> None:
        time.sleep(2.5)

    def echo(self, text: str) -> str:
        return text

    def hang(self) -> None:
        time.sleep(60)


class NeverBuilt:
    def __init__(self) -> None:
        time.sleep(60)


class CannotBeBuilt:
    def __init__(self) -> None:
        raise RuntimeError("the game data is missing: run make install")


def test_a_childs_start_up_does_not_count_against_its_first_call():
    """Once the first call's deadline also covered spawning the child and building the
    engine, so the first game of every new child failed under a tight ``timeout_s`` on a
    loaded machine (seen in a fresh-clone CI run: ALFWorld could not start its first game)."""
    engine = EngineProcess(SlowToBuild, name="Slow", timeout_s=1.5)
    try:
        engine.new_game()
        assert engine.call("echo", "hello") == "hello"
        # the call's own watchdog still holds
        with pytest.raises(EnvInfrastructureError, match="did not answer hang within 1.5 s"):
            engine.call("hang")
        assert engine.pid is None
    finally:
        engine.close(kill=True)


def test_a_child_that_is_never_ready_is_killed_at_its_start_budget():
    engine = EngineProcess(NeverBuilt, name="Stuck", timeout_s=1, start_timeout_s=2)
    with pytest.raises(EnvInfrastructureError, match="not ready within 2 s"):
        engine.new_game()
    assert engine.pid is None


class Echo:
    def echo(self, text: str) -> str:
        return text


def test_an_engine_started_in_a_short_lived_thread_outlives_the_thread():
    """Issue 42 item 3: the parent-death signal follows the thread that forked the child, so
    an engine made (or restarted) in a thread that then ended was killed with it, and the
    next step said 'no game started'."""
    import threading

    engine = EngineProcess(Echo, name="Echo", timeout_s=30)
    try:
        thread = threading.Thread(target=engine.new_game)
        thread.start()
        thread.join()
        time.sleep(0.5)  # the thread is gone; a child tied to it would be dead by now
        pid = engine.pid
        assert pid is not None and process_alive(pid)
        assert engine.call("echo", "still here") == "still here"
    finally:
        engine.close(kill=True)


def test_an_engine_that_cannot_be_built_says_why():
    """Before, the parent saw only 'died during <call> (exit code 1)'; the reason was in a
    traceback on the child's stderr."""
    engine = EngineProcess(CannotBeBuilt, name="Broken", timeout_s=5)
    with pytest.raises(EnvInfrastructureError, match="could not be built: RuntimeError: the game data is missing"):
        engine.new_game()
    assert engine.pid is None


def late_child() -> None:
    """A child whose start-up outlasts its parent: spawn's imports and unpickling took
    seconds on a loaded CI machine, and the driver was killed meanwhile."""
    time.sleep(1.5)
    die_with_parent()
    time.sleep(60)


def test_a_child_orphaned_while_it_starts_exits_at_once():
    """The parent-death signal covers only a death after it was asked for: a worker whose
    driver was killed during its start went on loading its model as an orphan (CI failed
    'worker processes outlived their driver')."""
    script = ("import multiprocessing as mp, os; from tests.envs.test_engine_process import late_child; "
              "p = mp.get_context('spawn').Process(target=late_child); p.start(); "
              "print(p.pid, flush=True); os._exit(0)")
    root = Path(__file__).resolve().parents[2]
    starter = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               text=True, cwd=root)
    pid = int(starter.stdout.readline())  # the child holds the pipe too: read its pid, never to the end
    starter.wait(30)
    starter.stdout.close()
    deadline = time.time() + 20
    while time.time() < deadline and process_alive(pid):
        time.sleep(0.2)
    orphaned = process_alive(pid)
    if orphaned:
        os.kill(pid, 9)
    assert not orphaned, "a child orphaned during its start-up lived on"


def test_an_env_left_open_at_exit_prints_no_traceback(tmp_path):
    """The garbage collector's last call at interpreter exit (module globals already gone)
    printed 'Exception ignored in EngineProcess.__del__' with a traceback."""
    import subprocess
    import sys

    code = ("import gymnasium as gym, ap_gym\n"
            "env = gym.make('ap_gym/TextWorld-v0', split='test')\n"
            "env.reset(options={'task_id': env.unwrapped.task_ids('test')[0]})\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                          env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]


class Sleeper:
    """An engine whose one method takes a known time, to see it apart from the boundary's."""

    def nap(self, seconds: float) -> str:
        time.sleep(seconds)
        return "rested"

    def fail(self) -> None:
        raise ValueError("no")


def test_timings_say_how_much_of_a_call_was_the_engine_and_how_much_the_boundary():
    """Issue 52 item 3 asks where a wrapped step's time goes: each answer carries the engine's
    own seconds, the caller adds its wait, and a ping times the boundary alone."""
    engine = EngineProcess(Sleeper, name="Sleeper")
    try:
        assert engine.timings() == {}
        round_trip = engine.ping()
        assert round_trip > 0 and engine.timings() == {}  # a ping touches no engine and counts as no call
        for _ in range(3):
            assert engine.call("nap", 0.05) == "rested"
        nap = engine.timings()["nap"]
        assert nap.calls == 3
        assert 0.15 <= nap.engine_s <= nap.waited_s  # the engine's sleep is inside, the wait covers it
        assert nap.boundary_s == pytest.approx(nap.waited_s - nap.engine_s)
        with pytest.raises(EnvInfrastructureError, match="failed in fail"):
            engine.call("fail")
        assert engine.timings()["fail"].calls == 1 and engine.timings()["nap"].calls == 3  # kept across children
        with pytest.raises(ValueError, match="ping"):
            engine.call("")
    finally:
        engine.close(kill=True)


def test_an_env_with_an_engine_process_reports_where_its_steps_went():
    import gymnasium as gym

    import ap_gym  # noqa: F401  (registration)

    env = gym.make("ap_gym/TextWorld-v0", split="test", max_episode_steps=10)
    try:
        assert env.unwrapped.engine_timings() == {}
        env.reset(options={"task_id": env.unwrapped.task_ids("test")[0]})
        env.step("look")
        env.step("inventory")
        step = env.unwrapped.engine_timings()["step"]
        assert step.calls == 2 and 0 < step.engine_s <= step.waited_s
        assert env.unwrapped.engine_round_trip_s() > 0
    finally:
        env.close()
