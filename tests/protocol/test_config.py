"""Run configs are validated whole, before anything is written, with errors that name the key."""

from __future__ import annotations

import json

import pytest

from ap_gym.protocol import ConfigError, RunConfig, run
from tests.helpers import config


@pytest.mark.parametrize(("change", "message"), [
    ({"policies": [{"name": "trajectory", "optons": {}}]}, r"policies\.0\.optons.*unknown key"),
    ({"iterations": -1}, r"'iterations'.*greater than or equal to 1"),
    ({"heldout": 0}, r"'heldout'.*greater than or equal to 1"),
    ({"retries": -1}, r"'retries'.*greater than or equal to 0"),
    ({"benchmarks": "textworld"}, r"'benchmarks'.*tuple"),
    ({"seeds": 0}, r"'seeds'.*tuple"),
    ({"seeds": []}, r"'seeds'.*at least 1"),
    ({"iterations": "two"}, r"'iterations'.*integer"),
    ({"executor": "dask"}, r"'executor'.*'local' or 'ray'"),
    ({"benchmarks": ["nethack"]}, r"unknown benchmark 'nethack'"),
    ({"policies": ["telepathy"]}, r"unknown policy 'telepathy'.*register_policy"),
    ({"policies": [{"name": "trajectory", "label": "a/b"}]}, r"policy label 'a/b'"),
    ({"policies": [{"name": "trajectory", "label": ".."}]}, r"policy label '\.\.'"),
    ({"name": "../elsewhere"}, r"run name '\.\./elsewhere'"),
    ({"name": "/tmp/abs"}, r"run name '/tmp/abs'"),
    ({"policies": ["trajectory", "trajectory"]}, r"labels must be unique"),
    ({"benchmarks": ["textworld", "ap_gym/TextWorld-v0"]}, r"same benchmark twice"),
    ({"imports": ["no_such_module_here"]}, r"cannot import 'no_such_module_here'"),
    ({"surprise": 1}, r"'surprise'.*unknown key"),
])
def test_bad_configs_are_refused_with_the_key_named(tmp_path, change, message):
    with pytest.raises(ConfigError, match=message):
        RunConfig.from_dict({**config(tmp_path), **change})


def test_an_empty_or_malformed_file_is_refused(tmp_path):
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    with pytest.raises(ConfigError, match="is empty"):
        RunConfig.from_file(empty)
    listed = tmp_path / "list.yaml"
    listed.write_text("- textworld\n")
    with pytest.raises(ConfigError, match="mapping"):
        RunConfig.from_file(listed)


def test_names_and_env_ids_resolve_to_short_names(tmp_path):
    cfg = RunConfig.from_dict(config(tmp_path, benchmarks=["ap_gym/Shop-v0", "TextWorld"]))
    assert cfg.benchmark_ids() == {"shop": "ap_gym/Shop-v0", "textworld": "ap_gym/TextWorld-v0"}
    assert [p.label for p in cfg.policies] == ["no_memory", "anti_persistence", "abstraction"]


def test_a_moved_run_resumes_and_a_different_one_is_refused(tmp_path):
    data = config(tmp_path / "a", policies=[{"name": "random"}], iterations=1, heldout=1)
    run_dir = run(RunConfig.from_dict(data), progress=False)
    moved = tmp_path / "b"
    run_dir.parent.rename(moved)
    before = (moved / "t" / "summary.json").read_text()
    run(RunConfig.from_dict({**data, "out": str(moved), "workers": 2}), progress=False)  # where and how: not what
    assert (moved / "t" / "summary.json").read_text() == before
    with pytest.raises(ConfigError, match="different config"):
        run(RunConfig.from_dict({**data, "out": str(moved), "max_steps": 4}), progress=False)
    assert json.loads((moved / "t" / "config.json").read_text())["config"]["max_steps"] == 3


def test_arms_reordered_still_resume_and_an_arm_changed_does_not(tmp_path):
    data = config(tmp_path, policies=[{"name": "random"}, {"name": "walkthrough"}], iterations=1, heldout=1)
    run_dir = run(RunConfig.from_dict(data), progress=False)
    before = (run_dir / "summary.json").read_text()
    # the order of the arms says which runs first, not what the run computes
    run(RunConfig.from_dict({**data, "policies": [{"name": "walkthrough"}, {"name": "random"}]}), progress=False)
    assert (run_dir / "summary.json").read_text() == before
    with pytest.raises(ConfigError, match="different config"):
        run(RunConfig.from_dict({**data, "policies": [{"name": "walkthrough"}, {"name": "random", "label": "r"}]}),
            progress=False)


@pytest.mark.parametrize(("options", "path", "valid"), [
    ({"agnet": {"action_mode": "react"}}, r"policies\.0\.options\.agnet", r"agent, memory"),
    ({"memory": {"budgt": 3}}, r"policies\.0\.options\.memory\.budgt", r"budget, record_tokens"),
    ({"agent": {"action_mode": "generat"}}, r"policies\.0\.options\.agent\.action_mode", r"'choose', 'generate'"),
    ({"bandit": {"lam": "a lot"}}, r"policies\.0\.options\.bandit\.lam", r"valid number"),
    ({"fixed_mode": "imitate"}, r"policies\.0\.options\.fixed_mode", r"'imitation'"),
    ({"agent": {"generation": {"max_new_tokens": 0}}}, r"agent\.generation\.max_new_tokens", r"greater than"),
])
def test_a_misspelled_option_at_any_depth_is_refused_before_anything_is_written(tmp_path, options, path, valid):
    data = config(tmp_path, policies=[{"name": "anti_persistence", "options": options}])
    with pytest.raises(ConfigError, match=f"{path}.*{valid}"):
        run(RunConfig.from_dict(data), progress=False)
    assert not (tmp_path / "t").exists()  # nothing written


def test_a_policy_needing_a_walkthrough_is_refused_with_an_env_that_has_none(tmp_path):
    """It used to crash after the first setting, with advice that did not fit."""
    import gymnasium as gym

    from tests.helpers import Counter

    if "tests/Counter-v0" not in gym.registry:
        gym.register("tests/Counter-v0", entry_point=Counter, max_episode_steps=10)
    with pytest.raises(ConfigError, match=r"'walkthrough' needs walkthrough, which tests/Counter-v0 \(Counter\)"):
        RunConfig.from_dict(config(tmp_path, benchmarks=["tests/Counter-v0"],
                                   policies=[{"name": "random"}, {"name": "walkthrough"}]))
    RunConfig.from_dict(config(tmp_path, benchmarks=["tests/Counter-v0"], policies=[{"name": "random"}]))


@pytest.mark.parametrize("value", [True, "0.5", "yes", 1.5, -0.1])
def test_randomise_exposure_is_a_probability_not_a_flag_or_text(tmp_path, value):
    """`randomise_exposure: true` was taken as 1.0 (every exposure withheld); '0.5' gave a TypeError."""
    from ap_gym.protocol.config import ConfigError, RunConfig

    with pytest.raises(ConfigError, match="randomise_exposure"):
        RunConfig.from_dict({"name": "x", "out": str(tmp_path), "audit": {"randomise_exposure": value}})
    assert RunConfig.from_dict({"name": "x", "out": str(tmp_path),
                                "audit": {"randomise_exposure": 1}}).audit.randomise_exposure == 1.0
