from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from ap_gym.protocol import RunConfig, load_episodes, run, training_sample

TINY_AGENT = {"agent": {"action_mode": "generate", "generation": {"max_new_tokens": 3}},
              "memory": {"synthesis": {"max_new_tokens": 6}}}


def config(tmp_path: Path, **kw) -> dict:
    base = {
        "name": "t", "benchmarks": ["textworld"], "backbone": "tiny", "out": str(tmp_path),
        "policies": [{"name": "no_memory", "options": {"agent": TINY_AGENT["agent"]}},
                     {"name": "anti_persistence", "options": TINY_AGENT},
                     {"name": "abstraction", "options": TINY_AGENT}],
        "seeds": [0], "iterations": 2, "train_per_iter": 3, "heldout": 3, "max_steps": 3, "workers": 1,
    }
    base.update(kw)
    return base


def eval_results(run_dir: Path) -> dict:
    return {(x["policy"], x["iteration"], x["task_id"]): ([s["action"] for s in x["steps"]], x["success"], x["policy_info"].get("mode"))
            for x in load_episodes(run_dir) if x["phase"] == "eval"}


def test_training_sample_is_fixed_by_seed_and_iteration():
    ids = [f"t{i}" for i in range(100)]
    assert training_sample(ids, 5, 0, 1) == training_sample(ids, 5, 0, 1)
    assert training_sample(ids, 5, 0, 1) != training_sample(ids, 5, 0, 2)
    assert len(set(training_sample(ids, 50, 3, 0))) == 50
    assert len(training_sample(ids[:3], 7, 0, 0)) == 7


def test_heldout_subset_spreads_over_the_split():
    from ap_gym.protocol import heldout_subset

    ids = [f"a{i}" for i in range(5)] + [f"b{i}" for i in range(5)]
    assert heldout_subset(ids, 2) == ["a0", "b0"] and heldout_subset(ids, None) == ids == heldout_subset(ids, 99)


def test_run_writes_results_and_refuses_a_changed_config(tmp_path):
    cfg = RunConfig.from_dict(config(tmp_path))
    run_dir = run(cfg, progress=False)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert set(summary["final"]) == {f"textworld/{p}/seed0" for p in ("no_memory", "anti_persistence", "abstraction")}
    lines = load_episodes(run_dir)
    evals = [x for x in lines if x["phase"] == "eval"]
    assert len(evals) == 3 * 2 * 3
    assert not [x for x in lines if x["phase"] == "train" and x["policy"] == "no_memory"]  # stateless: skipped
    assert len([x for x in lines if x["phase"] == "train" and x["policy"] == "anti_persistence"]) == 6
    for it in (0, 1):
        assert (run_dir / "textworld/anti_persistence/seed0/snapshots" / f"iter{it}" / "memory.sqlite").exists()
    meta = json.loads((run_dir / "config.json").read_text())
    assert meta["backbone"]["identity"] == "tiny-llama(seed=0)" and meta["config"]["iterations"] == 2
    assert "acting_system" in json.loads((run_dir / "prompts.json").read_text())
    assert all(x["steps"][0]["prompt"] for x in evals if x["policy"] != "random")
    # a second identical command does nothing new; a changed config is refused
    run(cfg, progress=False)
    assert len(load_episodes(run_dir)) == len(lines)
    with pytest.raises(ValueError, match="different config"):
        run(RunConfig.from_dict(config(tmp_path, iterations=3)), progress=False)


def test_workers_give_the_same_episodes(tmp_path):
    one = run(RunConfig.from_dict(config(tmp_path / "a", policies=config(tmp_path)["policies"][1:2])), progress=False)
    two = run(RunConfig.from_dict(config(tmp_path / "b", policies=config(tmp_path)["policies"][1:2], workers=2)), progress=False)
    assert eval_results(one) == eval_results(two) and len(eval_results(one)) == 6


def _kill_when(path: Path, proc: subprocess.Popen, predicate, timeout: float = 240) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if path.exists():
            lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip().endswith("}")]
            if predicate(lines):
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
                return
        if proc.poll() is not None:
            raise AssertionError("the run finished before it could be killed")
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("timed out waiting for the kill point")


def kill_resume_and_compare(tmp_path: Path, data: dict, kill_at, clean_overrides: dict | None = None) -> None:
    """Run ``data`` (out: tmp_path/killed) with the CLI, SIGKILL it when ``kill_at(lines)``,
    run it again, and check it ends as a clean in-process run does."""
    cfg_file = tmp_path / "cfg.yaml"
    cfg_file.write_text(yaml.safe_dump(data))
    cmd = [sys.executable, "-m", "ap_gym.cli", "run", str(cfg_file)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _kill_when(tmp_path / "killed/t/textworld/anti_persistence/seed0/episodes.jsonl", proc, kill_at)
    assert not (tmp_path / "killed/t/summary.json").exists()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    resumed = json.loads((tmp_path / "killed/t/summary.json").read_text())
    clean = run(RunConfig.from_dict({**data, **(clean_overrides or {}), "out": str(tmp_path / "clean")}),
                progress=False)
    assert resumed == json.loads((clean / "summary.json").read_text())
    assert eval_results(tmp_path / "killed/t") == eval_results(clean)


@pytest.mark.slow
@pytest.mark.parametrize("phase", ["eval", "train"])
def test_a_killed_run_resumes_to_the_same_summary(tmp_path, phase):
    data = config(tmp_path / "killed", policies=config(tmp_path)["policies"][1:2], iterations=2)
    if phase == "eval":  # in the middle of iteration 1's held-out evaluation
        kill_resume_and_compare(tmp_path, data, lambda ls: sum(x["phase"] == "eval" and x["iteration"] == 1 for x in ls) == 1)
    else:  # in the middle of iteration 1's training
        kill_resume_and_compare(tmp_path, data, lambda ls: sum(x["phase"] == "train" and x["iteration"] == 1 for x in ls) == 2)
