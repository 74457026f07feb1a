"""The local executor: worker processes and batched lanes give the sequential episodes;
worker processes die with their driver."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from ap_gym.protocol import RunConfig, run
from tests.helpers import ap_config, config, eval_results, process_alive


def test_workers_give_the_same_episodes(tmp_path):
    one = run(RunConfig.from_dict(config(tmp_path / "a", policies=config(tmp_path)["policies"][1:2])), progress=False)
    two = run(RunConfig.from_dict(config(tmp_path / "b", policies=config(tmp_path)["policies"][1:2], workers=2)), progress=False)
    assert eval_results(one) == eval_results(two) and len(eval_results(one)) == 6


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
    one = run(RunConfig.from_dict(ap_config(tmp_path / "a")), progress=False)
    lanes = run(RunConfig.from_dict(ap_config(tmp_path / "b", lanes=3)), progress=False)
    assert eval_results(one) == eval_results(lanes) and len(eval_results(one)) == 6


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline") as f:
            return f.read()
    except FileNotFoundError:
        return ""


@pytest.mark.slow
def test_worker_processes_die_with_a_killed_driver(tmp_path):
    data = config(tmp_path / "out", policies=[{"name": "no_memory", "options": {"agent": {"action_mode": "choose"}}}],
                  workers=2, heldout=6, max_steps=30, iterations=3)
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(data))
    proc = subprocess.Popen([sys.executable, "-m", "ap_gym.cli", "run", str(cfg)],
                            env={**os.environ, "HF_HUB_OFFLINE": "1"}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    workers: list[int] = []
    while proc.poll() is None and len(workers) < 2:  # no wall-clock bound on the start: the run ends by itself
        workers = [p for p in _children(proc.pid) if _cmdline(p).endswith("ap-gym-worker\0")]
        time.sleep(0.2)
    assert len(workers) >= 2, "the run never started its worker processes"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.time() + 20
    while time.time() < deadline and any(process_alive(p) for p in workers):
        time.sleep(0.2)
    assert not any(process_alive(p) for p in workers), "worker processes outlived their driver"


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_and_sigint_stop_cleanly_and_say_how_to_resume(tmp_path, sig):
    """Both signals stop the driver and its workers with the same message; the resumed run
    ends as a clean one (compared for SIGTERM; SIGKILL's resume is compared in test_loop)."""
    from tests.helpers import kill_resume_and_compare, stop_run

    data = ap_config(tmp_path / "killed", workers=2, heldout=6)
    at = lambda ls: sum(x.header.phase == "eval" for x in ls) >= 1  # noqa: E731
    if sig == signal.SIGTERM:
        proc = kill_resume_and_compare(tmp_path, data, at, sig=sig, clean_overrides={"workers": 1})
    else:
        proc, _ = stop_run(tmp_path, data, at, sig=sig)
    err = proc.stderr.read()
    assert proc.returncode == 130 and "run the same command again to resume" in err and "Traceback" not in err, \
        f"exit status {proc.returncode}; the run's stderr ended:\n{err[-4000:]}"
    if sig == signal.SIGINT:  # stopped, not finished: the viewer must not call it live (issue 43)
        from ap_gym.protocol.results import run_state

        assert run_state(tmp_path / "killed" / "t")[0] == "stopped"


@pytest.mark.slow
def test_workers_generate_games_and_start_engines_from_an_empty_cache(tmp_path, monkeypatch):
    """A worker process starts processes of its own: game generation's helper (an empty
    cache, as on a fresh machine) and ALFWorld's engine process. Daemonic workers could not
    ("daemonic processes are not allowed to have children"): make demo failed on a fresh cache."""
    monkeypatch.setenv("AP_GYM_CACHE", str(tmp_path / "cache"))
    data = config(tmp_path / "out", benchmarks=["textworld", "alfworld"], policies=["walkthrough"],
                  iterations=1, train_per_iter=0, heldout=2, workers=2, max_steps=50)
    run_dir = run(RunConfig.from_dict(data), progress=False)
    results = eval_results(run_dir)
    assert len(results) == 4 and all(success for _, success, _ in results.values())
    assert any((tmp_path / "cache").rglob("game.z8")) and any((tmp_path / "cache").rglob("game.tw-pddl"))
