"""No process outlives its owner: a run killed with SIGKILL while its worker processes
generate games (and hold engines) leaves nothing behind whose parent is gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
import yaml

from tests.helpers import TINY_AGENT, config


def _alive(session: int) -> list[str]:
    """The processes of ``session`` still running (the killed run's whole tree: with its
    root gone, any of them is an orphan)."""
    out = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if os.getsid(p.pid) == session:
                out.append(" ".join(p.info["cmdline"] or [])[:120])
        except (ProcessLookupError, psutil.Error):
            continue
    return out


def _wait_gone(session: int, seconds: float) -> list[str]:
    deadline = time.monotonic() + seconds
    while _alive(session) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = _alive(session)
    if left:  # clean up before failing, so one failure does not leak into later tests
        os.killpg(session, signal.SIGKILL)
    return left


@pytest.mark.slow
def test_a_finished_or_killed_run_with_two_workers_leaves_no_orphans(tmp_path):
    data = config(tmp_path, benchmarks=["textworld"], workers=2, iterations=1, train_per_iter=1, heldout=2,
                  policies=[{"name": "no_memory", "options": {"agent": TINY_AGENT["agent"]}}])
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(data))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "AP_GYM_CACHE": str(tmp_path / "cache")}  # games made on the spot
    # a run that ends by itself (as make demo's does): its workers' game helpers end with it
    done = subprocess.Popen([sys.executable, "-m", "ap_gym.cli", "run", str(tmp_path / "cfg.yaml"), "--name", "done"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    assert done.wait() == 0  # it ends by itself: no wall-clock bound (a busy machine is only slower)
    left = _wait_gone(done.pid, 15)
    assert not left, f"processes outlived the finished run: {left}"
    # a run killed while its workers generate games
    (tmp_path / "cache").rename(tmp_path / "cache-used")
    proc = subprocess.Popen([sys.executable, "-m", "ap_gym.cli", "run", str(tmp_path / "cfg.yaml")], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    session = proc.pid
    while proc.poll() is None:  # until the workers (and their helpers) are up, however long that takes here
        try:
            children = psutil.Process(proc.pid).children(recursive=True)
        except psutil.Error:
            break
        if len(children) >= 3:
            break
        time.sleep(0.5)
    assert proc.poll() is None, "the run ended before it could be killed"
    time.sleep(2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    left = _wait_gone(session, 30)
    assert not left, f"processes outlived the killed run: {left}"
