from __future__ import annotations

import json

import pytest

from ap_gym.cli import main
from ap_gym.protocol import RunConfig, run
from ap_gym.report import write_report
from tests.helpers import TINY_AGENT, config


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    policies = [
        {"name": "no_memory", "options": {"agent": TINY_AGENT["agent"]}},
        {"name": "abstraction", "options": TINY_AGENT},
        {"name": "anti_persistence", "options": TINY_AGENT},
        {"name": "anti_persistence", "label": "ap_persist", "options": {**TINY_AGENT, "persist_guidance": True}},
    ]
    return run(RunConfig.from_dict(config(tmp, policies=policies, benchmarks=["shop"], seeds=[0, 1],
                                          train_per_iter=4, heldout=4)), progress=False)


def test_report_writes_every_table_and_a_png(tiny_run):
    out = write_report([tiny_run])
    text = (out / "report.md").read_text()
    for heading in ("Table 1: final held-out success", "Denominators", "LLM calls and trajectory length",
                    "Success per task family", "anti_persistence mode usage", "Table 2: discard versus persist",
                    "Setting-level statistics (exploratory)", "Error-reproduction audit"):
        assert f"## {heading}" in text
    # the stand-in says so under every table
    assert text.count("**shop**: Shop, ap-gym's self-contained stand-in for WebShop") >= 6
    # the Holm family is the paper's comparisons; no_memory and the persist ablation are outside it
    assert [r.split(",")[0] for r in (out / "stats.csv").read_text().splitlines()[1:]] == ["abstraction"]
    assert {r.split(",")[0] for r in (out / "stats_other.csv").read_text().splitlines()[1:]} == {"no_memory", "ap_persist"}
    for table in ("final_success", "llm_calls", "per_family", "modes", "discard_vs_persist", "stats", "audit"):
        assert (out / f"{table}.csv").read_text().count("\n") >= 2
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    audit_rows = (out / "audit.csv").read_text().splitlines()[1:]
    assert {r.split(",")[0].split("/")[1] for r in audit_rows} == {"abstraction", "ap_persist"}  # AP stores none
    final = (out / "final_success.csv").read_text()
    assert "shop @ tiny-llama(seed=0)" in final and "anti_persistence" in final


def test_a_setting_whose_memory_cannot_be_read_is_named_not_dropped(tiny_run, tmp_path):
    """The audit once skipped such a setting without a word (``except Exception: continue``),
    so a damaged store looked like a method that stored nothing."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(tiny_run, run, ignore=shutil.ignore_patterns("report", "r2"))
    damaged = run / "shop" / "abstraction" / "seed0" / "memory.sqlite"
    assert damaged.exists()
    damaged.write_bytes(b"\0" * damaged.stat().st_size)
    out = write_report([run], out=tmp_path / "report")
    text = (out / "report.md").read_text()
    assert "Settings whose memory could not be read (not audited)" in text
    assert "- shop/abstraction/seed0: " in text
    audited = {r.split(",")[0] for r in (out / "audit.csv").read_text().splitlines()[1:]}
    assert "shop/abstraction/seed1" in audited and "shop/abstraction/seed0" not in audited


def test_cli_report_and_run_table(tiny_run, capsys):
    assert main(["report", str(tiny_run), "--out", str(tiny_run / "r2")]) == 0
    assert (tiny_run / "r2" / "report.md").exists()
    summary = json.loads((tiny_run / "summary.json").read_text())
    assert len(summary["final"]) == 4 * 2


@pytest.mark.slow
def test_the_demo_run_shows_its_range_and_says_what_it_shows(tmp_path):
    """make demo's first part (benchmarks/smoke.yaml, the tiny backbone here): the floors run
    beside the designs and the report opens with what the run shows and what it cannot."""
    from pathlib import Path

    smoke = Path(__file__).resolve().parents[2] / "benchmarks" / "smoke.yaml"
    config = RunConfig.from_file(smoke, backbone="tiny", out=str(tmp_path), iterations=1, workers=1)
    out = write_report([run(config, progress=False)])
    text = (out / "report.md").read_text()
    assert text.index("**What this run shows.**") < text.index("## Table 1")
    rows = {r.split(",")[0]: r.split(",")[1] for r in (out / "final_success.csv").read_text().splitlines()[1:]}
    assert set(rows) == {"random", "walkthrough", "no_memory", "trajectory", "abstraction", "anti_persistence"}
    assert rows["walkthrough"].startswith("100.0")  # the ceiling of these tasks
