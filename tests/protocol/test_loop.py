from __future__ import annotations

import json
from pathlib import Path

import pytest

from ap_gym.protocol import RunConfig, heldout_subset, load_episodes, run, training_sample
from tests.helpers import clean_run, config, kill_resume_and_compare


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
    evals = [x for x in lines if x.header.phase == "eval"]
    assert len(evals) == 3 * 2 * 3
    assert not [x for x in lines if x.header.phase == "train" and x.header.policy == "no_memory"]  # stateless: skipped
    assert len([x for x in lines if x.header.phase == "train" and x.header.policy == "anti_persistence"]) == 6
    for it in (0, 1):
        assert (run_dir / "textworld/anti_persistence/seed0/snapshots" / f"iter{it}" / "memory.sqlite").exists()
    meta = json.loads((run_dir / "config.json").read_text())
    assert meta["backbone"]["identity"] == "tiny-llama(seed=0)" and meta["config"]["iterations"] == 2
    assert "acting_system" in json.loads((run_dir / "prompts.json").read_text())
    assert all(x.steps[0].trace.prompt for x in evals if x.header.policy != "random")
    # a second identical command does nothing new; a changed config is refused
    run(cfg, progress=False)
    assert len(load_episodes(run_dir)) == len(lines)
    with pytest.raises(ValueError, match="different config"):
        run(RunConfig.from_dict(config(tmp_path, iterations=3)), progress=False)
    # a damaged config.json is named as damaged (not "a different config"), and nothing is lost
    saved = (run_dir / "config.json").read_text()
    for damage in ("{not json", "[1, 2]", '{"config": "x"}'):
        (run_dir / "config.json").write_text(damage)
        with pytest.raises(ValueError, match="is damaged"):
            run(cfg, progress=False)
    assert len(load_episodes(run_dir)) == len(lines)
    (run_dir / "config.json").write_text(saved)


def _killable(out: Path) -> dict:
    # Six held-out and training tasks leave room for the kill to land mid-phase.
    return config(out, policies=config(out)["policies"][1:2], iterations=2, heldout=6, train_per_iter=6)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    """The killed runs' config run once without a kill: both resumes must end as it did."""
    return clean_run(tmp_path_factory.mktemp("clean"), _killable(tmp_path_factory.mktemp("unused")))


@pytest.mark.slow
@pytest.mark.parametrize("phase", ["eval", "train"])
def test_a_killed_run_resumes_to_the_same_summary(tmp_path, phase, uninterrupted):
    # Killed at the first poll that sees the point (not "exactly when"): episodes of the tiny
    # model take milliseconds, and a poll that missed the one moment let the run finish.
    data = _killable(tmp_path / "killed")
    if phase == "eval":  # in the middle of iteration 1's held-out evaluation
        at = lambda ls: sum(x.header.phase == "eval" and x.header.iteration == 1 for x in ls) >= 1  # noqa: E731
    else:  # in the middle of iteration 1's training
        at = lambda ls: sum(x.header.phase == "train" and x.header.iteration == 1 for x in ls) >= 2  # noqa: E731
    kill_resume_and_compare(tmp_path, data, at, clean=uninterrupted)


def test_several_backbones_give_results_and_a_report_per_backbone(tmp_path):
    from ap_gym.cli import main

    data = config(tmp_path, policies=[{"name": "no_memory", "options": {"agent": {"action_mode": "react"}}}],
                  iterations=1, heldout=2, max_steps=2, backbones={"small": "tiny", "other": "tiny"})
    run_dir = run(RunConfig.from_dict(data), progress=False)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert set(summary["final"]) == {"textworld/small/no_memory/seed0", "textworld/other/no_memory/seed0"}
    assert (run_dir / "textworld/small/no_memory/seed0/episodes.jsonl").exists()
    meta = json.loads((run_dir / "config.json").read_text())
    assert set(meta["backbones"]) == {"small", "other"}
    lines = load_episodes(run_dir)
    assert {x.header.backbone for x in lines} == {"small", "other"}
    assert all(x.header.policy_info["action_mode"] == "react" and all(s.trace.response for s in x.steps) for x in lines)
    assert main(["report", str(run_dir)]) == 0
    final = (run_dir / "report" / "final_success.csv").read_text()
    assert "textworld @ small" in final and "textworld @ other" in final


def test_backbone_labels_from_the_cli_merge_into_the_config(tmp_path):
    import yaml

    from ap_gym.cli import build_parser

    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({**config(tmp_path), "backbones": {"a": "tiny"}, "serving": {"retries": 1}}))
    args = build_parser().parse_args(["run", str(cfg), "--backbone", "b=http://h:8000/v1", "--deadline", "9"])
    from ap_gym.cli import _backbone_overrides

    merged = RunConfig.from_file(cfg, serving={"deadline_s": args.deadline}, **_backbone_overrides(args.backbone))
    assert merged.backbones == {"a": "tiny", "b": "http://h:8000/v1"}
    assert (merged.serving.deadline_s, merged.serving.retries) == (9.0, 1)


def test_a_policy_without_a_model_runs_once_and_carries_no_backbone_label(tmp_path):
    """In a run of two backbones, random once ran (and was reported) once per backbone, under
    each backbone's name, though no model touched it."""
    import csv

    from ap_gym.report import write_report
    from tests.helpers import TINY_AGENT

    data = config(tmp_path, benchmarks=["shop"], backbones={"a": "tiny", "b": "tiny:seed=1"}, iterations=1,
                  train_per_iter=1, heldout=2, policies=[{"name": "random"},
                                                         {"name": "no_memory", "options": {"agent": TINY_AGENT["agent"]}}])
    run_dir = run(RunConfig.from_dict(data), progress=False)
    dirs = sorted(p.parent.relative_to(run_dir).as_posix() for p in run_dir.rglob("episodes.jsonl"))
    assert dirs == ["shop/a/no_memory/seed0", "shop/b/no_memory/seed0", "shop/random/seed0"]
    out = write_report([run_dir], out=tmp_path / "report")
    with open(out / "final_success.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["method"] == "random"]
    assert sorted(r["setting"] for r in rows) == ["shop @ a", "shop @ b"]  # its one result, in each column
    assert rows[0]["success_mean"] == rows[1]["success_mean"]


def test_the_registrations_step_limit_holds_unless_the_config_sets_one(tmp_path):
    """Issue 41: ap-gym run replaced an env's registered max_episode_steps with the config's
    max_steps (50), so a 4-step env ran 50-step episodes; now the registration's holds
    unless max_steps is given, and benchmark.json says which ran."""
    import gymnasium as gym

    from ap_gym.envs import StartResult, StepResult, TextEnv

    class Endless(TextEnv):
        benchmark = "endless"

        def _task_ids(self, split):
            return ["endless/0"]

        def task_family(self, task_id):
            return "endless"

        def _start(self, task_id, options):
            return StartResult("A corridor.", "Walk.", score=0.0, max_score=1.0, admissible_commands=["walk"])

        def _advance(self, action):
            return StepResult("More corridor.", 0.0, admissible_commands=["walk"])

    if "test_loop/Endless-v0" not in gym.registry:
        gym.register("test_loop/Endless-v0", entry_point=Endless, max_episode_steps=4)
    for max_steps, steps, source in ((None, 4, "registration"), (2, 2, "config")):
        data = {"name": f"limit{max_steps}", "out": str(tmp_path), "benchmarks": ["test_loop/Endless-v0"],
                "policies": [{"name": "random"}], "iterations": 1, "train_per_iter": 0, "heldout": 1,
                "max_steps": max_steps}
        run_dir = run(RunConfig.from_dict(data), progress=False)
        (line,) = load_episodes(run_dir)
        assert line.header.num_steps == steps and line.header.termination == "step_limit"
        meta = json.loads(next(run_dir.rglob("benchmark.json")).read_text())
        assert (meta["max_steps"], meta["max_steps_from"]) == (steps, source)


def test_a_run_on_a_checkpoint_refuses_to_resume_on_other_weights(tmp_path):
    """A backbone given as a model directory is its weights, not its path: a run whose
    directory was retrained since it started is refused, unless told to go on (and says so)."""
    import json

    from ap_gym.backbones.checkpoint import weights_checksum
    from ap_gym.backbones.hf import TransformersBackbone, tiny_llama
    from ap_gym.protocol import RunConfig, run
    from ap_gym.protocol.config import ConfigError

    model_dir = tmp_path / "model"
    model, tokenizer = tiny_llama(seed=0)
    TransformersBackbone(model, tokenizer=tokenizer).save(model_dir)
    data = config(tmp_path / "runs", backbone=str(model_dir), policies=[{"name": "no_memory",
                                                                          "options": {"agent": {"history_window": 2}}}],
                  iterations=1, train_per_iter=0, heldout=1, max_steps=2)
    out = run(RunConfig.from_dict(data), progress=False)
    recorded = json.loads((out / "config.json").read_text())["weights"]
    assert recorded == {str(model_dir): weights_checksum(model_dir)}
    run(RunConfig.from_dict(data), progress=False)  # the same weights: resumes (nothing left to do)
    retrained, tokenizer = tiny_llama(seed=1)  # the same path, retrained
    TransformersBackbone(retrained, tokenizer=tokenizer).save(model_dir)
    with pytest.raises(ConfigError, match="other weights"):
        run(RunConfig.from_dict(data), progress=False)
    run(RunConfig.from_dict(data), progress=False, other_weights=True)
    meta = json.loads((out / "config.json").read_text())
    assert meta["weights"] == recorded and meta["weights_changed"] == {str(model_dir): weights_checksum(model_dir)}


def test_a_second_writer_of_a_run_is_refused_naming_the_first(tmp_path):
    """Two `ap-gym run` of one run at once wrote 63 episode lines for 40 tasks: the second is
    refused while the first holds the run's OS lock (a killed writer releases it)."""
    import os

    from ap_gym.paths import exclusive_lock
    from ap_gym.protocol.config import ConfigError

    data = config(tmp_path, policies=[{"name": "random"}], iterations=1, train_per_iter=0, heldout=1, max_steps=2)
    lock = tmp_path / ".t.lock"
    with exclusive_lock(lock, "run"), pytest.raises(ConfigError, match=f"pid {os.getpid()}"):
        run(RunConfig.from_dict(data), progress=False)
    assert not (tmp_path / "t").exists()  # refused before anything was written
    run(RunConfig.from_dict(data), progress=False)  # the lock released: it runs


def test_a_stop_while_the_memory_reopens_its_database_stays_a_stop(tmp_path, monkeypatch):
    """Ctrl-C while a memory switched databases (closed the training one, not yet opened the
    next) left its database closed; closing the policy on the way out then raised sqlite3's
    "Cannot operate on a closed database", so the CLI ended with that traceback and exit
    status 1 instead of its resume message and 130. The stop must come out as the stop."""
    from ap_gym.memory.memory import Memory

    real, calls = Memory._open, []

    def _open(self, readonly):
        calls.append(readonly)
        if len(calls) == 3:  # opens: the memory, clear_state, then the switch to evaluation (training db closed)
            raise KeyboardInterrupt
        real(self, readonly)

    monkeypatch.setattr(Memory, "_open", _open)
    data = config(tmp_path, policies=[{"name": "anti_persistence", "options": config(tmp_path)["policies"][1]["options"]}],
                  iterations=1, train_per_iter=1, heldout=1)
    with pytest.raises(KeyboardInterrupt) as stopped:
        run(RunConfig.from_dict(data), progress=False)
    assert len(calls) == 3 and not getattr(stopped.value, "__notes__", None)


def test_closing_calls_every_closer_and_a_stop_keeps_its_reason():
    from ap_gym.protocol.loop import _close_all

    closed: list[str] = []

    def fails() -> None:
        closed.append("fails")
        raise RuntimeError("half open")

    stop = KeyboardInterrupt()
    _close_all([fails, lambda: closed.append("next")], stopped=stop)  # nothing raised: the caller raises stop
    assert closed == ["fails", "next"] and "RuntimeError: half open" in stop.__notes__[0]
    with pytest.raises(RuntimeError, match="half open"):  # no stop: the failure is the news, after every closer
        _close_all([fails, lambda: closed.append("after")])
    assert closed[-1] == "after"
