"""Batched lanes and the Ray executor give the local executor's episodes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ap_gym.protocol import RunConfig, load_episodes, run

from .test_protocol import config, eval_results, kill_resume_and_compare

ray = pytest.importorskip("ray")

CHOOSE = {"agent": {"action_mode": "choose", "history_window": 4}, "memory": {"synthesis": {"max_new_tokens": 6}}}


def by_seed(run_dir: Path) -> dict:
    return {(x["policy"], x["seed"], x["iteration"], x["task_id"]): ([s["action"] for s in x["steps"]], x["success"])
            for x in load_episodes(run_dir) if x["phase"] == "eval"}


def _ap_config(tmp_path: Path, **kw) -> dict:
    return config(tmp_path, policies=[{"name": "anti_persistence", "options": CHOOSE}], **kw)


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    """A local Ray instance started by the test (``ray start --head``), stopped after."""
    ray_bin = str(Path(sys.executable).parent / "ray")
    tmp = tmp_path_factory.mktemp("ray")
    port = 6390 + os.getpid() % 500
    # loopback only, and no auth token: a throwaway single-machine cluster
    os.environ["RAY_AUTH_MODE"] = "disabled"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"}
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


def test_lanes_batch_model_calls_and_keep_the_episodes(tmp_path):
    import gymnasium as gym

    import ap_gym  # noqa: F401
    from ap_gym.backbones import make_backbone
    from ap_gym.backbones.batching import BatchingBackbone
    from ap_gym.policies import make_policy
    from ap_gym.rollout import run_episode, run_episodes

    backbone = make_backbone("tiny")
    tasks = gym.make("ap_gym/TextWorld-v0", split="test").unwrapped.task_ids("test")[:4]
    env = gym.make("ap_gym/TextWorld-v0", split="test", max_episode_steps=6)
    alone = [run_episode(env, make_policy("no_memory", backbone), task_id=t) for t in tasks]
    batcher = BatchingBackbone(backbone, lanes=3)
    envs = [gym.make("ap_gym/TextWorld-v0", split="test", max_episode_steps=6) for _ in range(3)]
    policies = [make_policy("no_memory", batcher.lane(i)) for i in range(3)]
    together = run_episodes(envs, policies, tasks, on_lane_done=lambda _: batcher.retire())
    assert [[s.action for s in e.steps] for e in together] == [[s.action for s in e.steps] for e in alone]
    assert [e.usage.llm_calls for e in together] == [e.usage.llm_calls for e in alone]
    assert batcher.stats["calls"] == sum(e.usage.llm_calls for e in alone)
    assert batcher.stats["batches"] < batcher.stats["calls"]  # calls really were grouped
    for e in [env, *envs]:
        e.close()


def test_lanes_in_the_protocol_give_the_sequential_results(tmp_path):
    one = run(RunConfig.from_dict(_ap_config(tmp_path / "a")), progress=False)
    lanes = run(RunConfig.from_dict(_ap_config(tmp_path / "b", lanes=3)), progress=False)
    assert eval_results(one) == eval_results(lanes) and len(eval_results(one)) == 6


def test_ray_executor_gives_the_local_results(tmp_path, ray_cluster):
    local = run(RunConfig.from_dict(_ap_config(tmp_path / "local")), progress=False)
    on_ray = run(RunConfig.from_dict(_ap_config(tmp_path / "ray", executor="ray", ray_address=ray_cluster,
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


def test_unknown_executor_is_refused(tmp_path):
    with pytest.raises(ValueError, match="executor"):
        RunConfig.from_dict(_ap_config(tmp_path, executor="dask"))


@pytest.mark.slow
def test_a_killed_ray_run_resumes_like_a_local_one(tmp_path, ray_cluster):
    data = _ap_config(tmp_path / "killed", executor="ray", ray_address=ray_cluster, workers=2, heldout=8)
    # actors finish in bursts: kill once iteration 1's evaluation has begun but not ended
    kill_resume_and_compare(tmp_path, data, lambda ls: 1 <= sum(x["phase"] == "eval" and x["iteration"] == 1 for x in ls) < 8,
                            clean_overrides={"executor": "local", "workers": 1})
