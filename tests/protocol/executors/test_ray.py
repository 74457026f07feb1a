"""The Ray executor gives the local executor's episodes, and a killed Ray run resumes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ap_gym.protocol import RunConfig, load_episodes, run
from tests.helpers import CHOOSE, ap_config, config, eval_results, kill_resume_and_compare

ray = pytest.importorskip("ray")


def by_seed(run_dir: Path) -> dict:
    return {(x.header.policy, x.header.seed, x.header.iteration, x.header.task_id): ([s.action for s in x.steps], x.header.success)
            for x in load_episodes(run_dir) if x.header.phase == "eval"}


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    """A local Ray instance started by the test (``ray start --head``), stopped after."""
    ray_bin = str(Path(sys.executable).parent / "ray")
    tmp = tmp_path_factory.mktemp("ray")
    port = 6390 + os.getpid() % 500
    # loopback only, and no auth token: a throwaway single-machine cluster
    os.environ["RAY_AUTH_MODE"] = "disabled"
    # workers at this process's priority, as the README tells a cluster's owner to start it: at Ray's
    # default niceness 15 the two runs below took 1443 s and 1655 s under a 4-process CPU hog (51 %
    # of the suite's time); the warning for such a cluster is checked on its own, below
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0", "RAY_worker_niceness": "0"}
    subprocess.run([ray_bin, "start", "--head", "--num-cpus=2", f"--port={port}", "--include-dashboard=false",
                    "--node-ip-address=127.0.0.1",
                    f"--temp-dir={tmp}", "--disable-usage-stats"], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    address = f"127.0.0.1:{port}"
    try:
        yield address
    finally:
        if ray.is_initialized():
            ray.shutdown()
        subprocess.run([ray_bin, "stop", "--force"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=120)


@pytest.mark.slow
def test_a_local_instance_runs_its_workers_at_the_drivers_niceness():
    """Ray starts workers at niceness 15: under a 4-process CPU hog they got ~6% of a core and
    the suite's two Ray tests took 1443 s and 1655 s. A driver at niceness 3 gets workers at 3
    (not Ray's 15, nor 0: a user who lowered the run's priority keeps it lowered)."""
    script = ("import os, types; os.nice(3)\n"
              "from ap_gym.protocol.executors.ray import init_ray\n"
              "def niceness():\n    return os.nice(0)\n"
              "ray = init_ray(types.SimpleNamespace(ray_address=None))\n"
              "print(os.nice(0), ray.get(ray.remote(niceness).remote()), 'RAY_worker_niceness' in os.environ)\n"
              "ray.shutdown()\n")
    env = {k: v for k, v in os.environ.items() if k != "RAY_worker_niceness"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                         env={**env, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"},
                         cwd=Path(__file__).resolve().parents[3])
    assert out.returncode == 0, out.stderr[-2000:]
    driver = str(min(os.nice(0) + 3, 19))  # os.nice is relative: 3 above the suite's own (nice 5 gives 8)
    assert out.stdout.split()[-3:] == [driver, driver, "False"]  # and the variable is not left behind


def test_a_cluster_whose_workers_run_at_a_lower_priority_is_named(caplog):
    """A cluster started with Ray's defaults runs its workers at niceness 15 (the driver's plus
    15, capped at 19): the driver says so, and what to start the cluster with. (The suite's own
    cluster runs at its priority, so this asks a stand-in for the worker's niceness.)"""
    from types import SimpleNamespace

    from ap_gym.protocol.executors.ray import _check_niceness

    theirs = min(os.nice(0) + 15, 19)
    stand_in = SimpleNamespace(remote=lambda **_: lambda fn: SimpleNamespace(remote=lambda: theirs),
                               get=lambda ref: ref)
    with caplog.at_level("WARNING", logger="ap_gym.protocol.executors.ray"):
        assert _check_niceness(stand_in) == theirs
    if theirs > os.nice(0):
        assert "RAY_worker_niceness=0" in caplog.text and f"niceness {theirs}" in caplog.text
    caplog.clear()
    at_ours = SimpleNamespace(remote=lambda **_: lambda fn: SimpleNamespace(remote=lambda: os.nice(0)),
                              get=lambda ref: ref)
    with caplog.at_level("WARNING", logger="ap_gym.protocol.executors.ray"):
        _check_niceness(at_ours)
    assert "RAY_worker_niceness" not in caplog.text  # a cluster at the driver's priority: nothing to say


def test_ray_executor_gives_the_local_results(tmp_path, ray_cluster):
    local = run(RunConfig.from_dict(ap_config(tmp_path / "local")), progress=False)
    on_ray = run(RunConfig.from_dict(ap_config(tmp_path / "ray", executor="ray", ray_address=ray_cluster,
                                                workers=2)), progress=False)
    assert eval_results(local) == eval_results(on_ray)
    assert json.loads((local / "summary.json").read_text()) == \
        json.loads((on_ray / "summary.json").read_text())
    # a grid: settings fan out as Ray tasks
    grid = {"policies": [{"name": "no_memory", "options": {"agent": CHOOSE["agent"]}},
                         {"name": "anti_persistence", "options": CHOOSE}], "iterations": 1}
    local = run(RunConfig.from_dict(config(tmp_path / "grid_local", **grid)), progress=False)
    on_ray = run(RunConfig.from_dict(config(tmp_path / "grid_ray", executor="ray", ray_address=ray_cluster,
                                            workers=2, **grid)), progress=False)
    assert by_seed(local) == by_seed(on_ray) and len(by_seed(local)) == 2 * 3


@pytest.mark.slow
def test_a_killed_ray_run_resumes_like_a_local_one(tmp_path, ray_cluster):
    data = ap_config(tmp_path / "killed", executor="ray", ray_address=ray_cluster, workers=2, heldout=8)
    # actors finish in bursts: kill once iteration 1's evaluation has begun but not ended
    kill_resume_and_compare(tmp_path, data, lambda ls: 1 <= sum(x.header.phase == "eval" and x.header.iteration == 1 for x in ls) < 8,
                            clean_overrides={"executor": "local", "workers": 1})
