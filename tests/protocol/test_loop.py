from __future__ import annotations

import json

import pytest

from ap_gym.protocol import RunConfig, heldout_subset, load_episodes, run, training_sample
from tests.helpers import config, eval_results, kill_resume_and_compare


def test_training_sample_is_fixed_by_seed_and_iteration():
    ids = [f"t{i}" for i in range(100)]
    assert training_sample(ids, 5, 0, 1) == training_sample(ids, 5, 0, 1)
    assert training_sample(ids, 5, 0, 1) != training_sample(ids, 5, 0, 2)
    assert len(set(training_sample(ids, 50, 3, 0))) == 50
    assert len(training_sample(ids[:3], 7, 0, 0)) == 7


def test_heldout_subset_spreads_over_the_split():
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


@pytest.mark.slow
@pytest.mark.parametrize("phase", ["eval", "train"])
def test_a_killed_run_resumes_to_the_same_summary(tmp_path, phase):
    data = config(tmp_path / "killed", policies=config(tmp_path)["policies"][1:2], iterations=2)
    if phase == "eval":  # in the middle of iteration 1's held-out evaluation
        kill_resume_and_compare(tmp_path, data, lambda ls: sum(x["phase"] == "eval" and x["iteration"] == 1 for x in ls) == 1)
    else:  # in the middle of iteration 1's training
        kill_resume_and_compare(tmp_path, data, lambda ls: sum(x["phase"] == "train" and x["iteration"] == 1 for x in ls) == 2)
