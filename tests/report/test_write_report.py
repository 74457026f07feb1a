from __future__ import annotations

import csv
import json
import re

import pytest

from ap_gym.cli import main
from ap_gym.protocol import RunConfig, run
from ap_gym.protocol.results import load_headers
from ap_gym.report import write_report
from tests.helpers import TINY_AGENT, config, synthetic_run


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


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_report_writes_every_table_and_a_png(tiny_run):
    out = write_report([tiny_run])
    text = (out / "report.md").read_text()
    for heading in ("Table 1: final held-out success", "Table 1b: final held-out success", "Denominators",
                    "Table 6: LLM calls, trajectory length and score", "Success per task family",
                    "anti_persistence mode usage per setting", "Table 2: discard versus persist",
                    "Setting-level statistics (exploratory)", "Error-reproduction audit"):
        assert f"## {heading}" in text, heading
    # the stand-in says so under Table 1 (both rates) and the denominators; the embedder is named
    assert text.count("**shop**: Shop, ap-gym's self-contained stand-in for WebShop") >= 3
    assert "Embedder: t: all-MiniLM-L6-v2" in text
    # the Holm family is the paper's comparisons; no_memory and the persist ablation are outside it
    assert [r["baseline"] for r in rows(out / "stats.csv")] == ["abstraction"]
    assert {r["baseline"] for r in rows(out / "stats_other.csv")} == {"no_memory", "ap_persist"}
    for table in ("final_success", "final_success_all", "llm_calls", "per_family", "modes", "discard_vs_persist",
                  "stats", "audit"):
        assert len(rows(out / f"{table}.csv")) >= 1, table
    for name in ("curves.png", "success_vs_cost.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert {r["setting"].split("/")[1] for r in rows(out / "audit.csv")} == {"abstraction", "ap_persist"}
    audit = rows(out / "audit.csv")  # numbers, a cell each (it held the text intervals: issue 50)
    assert {"q", "q_lo", "q_hi", "randomised_gap", "randomised_gap_lo"} <= set(audit[0])
    assert all(float(r["invocations"]) >= 0 and not r["q"].startswith("[") for r in audit)
    final = {(r["method"], r["setting"]): r for r in rows(out / "final_success.csv")}
    cell = final[("anti_persistence", "shop @ tiny-llama(seed=0)")]
    assert 0 <= float(cell["success_mean"]) <= 100 and float(cell["success_std"]) >= 0 and cell["seeds"] == "2"
    calls = rows(out / "llm_calls.csv")
    assert all(float(r["llm_calls_mean"]) >= 0 and r["score_mean"] for r in calls)  # numbers, a score column
    # the cost in tokens beside the calls (issue 43: AP's calls read whole records)
    assert all(float(r["tokens_mean"]) > 0 for r in calls if float(r["llm_calls_mean"]) > 0)
    modes = rows(out / "modes.csv")
    assert {r["setting"] for r in modes} == {"shop @ tiny-llama(seed=0)"} and {r["phase"] for r in modes} == {
        "train", "eval"}
    assert "†" not in text.split("## Table 1:")[1].split("##")[0]  # the tiny run's agents generate


def test_two_runs_sharing_a_label_are_never_merged(tmp_path):
    """A 90 % run and a 30 % run of one label were once reported as one 60 % cell."""
    a = synthetic_run(tmp_path, "a", {"anti_persistence": [True] * 9 + [False]})
    b = synthetic_run(tmp_path, "b", {"anti_persistence": [True] * 3 + [False] * 7})
    out = write_report([a, b], out=tmp_path / "report")
    final = {r["method"]: float(r["success_mean"]) for r in rows(out / "final_success.csv")}
    assert final == {"anti_persistence [a]": 90.0, "anti_persistence [b]": 30.0}
    assert "60.0" not in (out / "report.md").read_text().split("## Table 1:")[1].split("##")[0]


def test_table_2_pairs_discard_and_persist_from_one_run_only(tmp_path):
    """Discard from one run beside persist from another compares runs, not the fate of the
    same guidance: no Table 2 then; with both arms in one run, that run's pair."""
    persist = {"ap_persist": {"persist_guidance": True}}
    a = synthetic_run(tmp_path, "a", {"anti_persistence": [True] * 8 + [False] * 2})
    b = synthetic_run(tmp_path, "b", {"ap_persist": [True] * 2 + [False] * 8}, options=persist)
    out = write_report([a, b], out=tmp_path / "apart")
    assert not (out / "discard_vs_persist.csv").exists()
    assert "## Table 2" not in (out / "report.md").read_text()
    c = synthetic_run(tmp_path, "c", {"anti_persistence": [True] * 6 + [False] * 4,
                                      "ap_persist": [True] * 3 + [False] * 7}, options=persist)
    out = write_report([a, c], out=tmp_path / "together")
    text = (out / "report.md").read_text()
    assert "One run (c)" in text
    table = rows(out / "discard_vs_persist.csv")
    assert [(r["discard_mean"], r["persist_mean"]) for r in table] == [("60.0", "30.0")]


def test_a_setting_whose_memory_cannot_be_read_is_named_not_dropped(tiny_run, tmp_path):
    """The audit once skipped such a setting without a word (``except Exception: continue``),
    so a damaged store looked like a method that stored nothing."""
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(tiny_run, run_dir, ignore=shutil.ignore_patterns("report", "r2"))
    damaged = run_dir / "shop" / "abstraction" / "seed0" / "memory.sqlite"
    assert damaged.exists()
    damaged.write_bytes(b"\0" * damaged.stat().st_size)
    out = write_report([run_dir], out=tmp_path / "report")
    text = (out / "report.md").read_text()
    assert "Settings whose memory could not be read (not audited)" in text
    assert "- shop/abstraction/seed0: " in text
    audited = {r["setting"] for r in rows(out / "audit.csv")}
    assert "shop/abstraction/seed1" in audited and "shop/abstraction/seed0" not in audited


def test_cli_report_and_run_table(tiny_run, capsys):
    assert main(["report", str(tiny_run), "--out", str(tiny_run / "r2")]) == 0
    assert (tiny_run / "r2" / "report.md").exists()
    summary = json.loads((tiny_run / "summary.json").read_text())
    assert len(summary["final"]) == 4 * 2


class Overflowing:
    """A scripted backbone whose context overflows on long prompts, as a server's 400 would say."""

    identity = "overflowing"

    def __init__(self, limit: int) -> None:
        self.limit = limit

    def generate(self, messages, config=None):
        from ap_gym.backbones.base import Completion
        from ap_gym.errors import PromptRejected

        if sum(len(m["content"]) for m in messages) > self.limit:
            raise PromptRejected("This model's maximum context length is exceeded (HTTP 400)")
        return Completion("search[shoes]", 1, 1, 0.0)

    def generate_batch(self, batch, config=None):
        return [self.generate(m, config) for m in batch]

    def score(self, messages, candidates, reduction="sum"):
        raise NotImplementedError

    def describe(self):
        return {"identity": self.identity}


def test_a_context_overflow_is_the_methods_failure_not_an_exclusion(tmp_path):
    from ap_gym.protocol.loop import Runner

    data = config(tmp_path, benchmarks=["shop"], backbone="overflowing", iterations=1, train_per_iter=0, heldout=4,
                  max_steps=4, policies=[{"name": "no_memory", "options": {"agent": {"action_mode": "generate"}}}])
    runner = Runner(RunConfig.from_dict(data))
    runner.resources.provide("overflowing", Overflowing(limit=1200))  # the first steps fit, later ones do not
    run_dir = runner.run(progress=False)
    out = write_report([run_dir], out=tmp_path / "report")
    (denominators,) = rows(out / "denominators.csv")
    assert denominators["prompts_rejected"] == "4" and denominators["infrastructure_failures"] == "0"
    assert float(denominators["success_rate"]) == 0.0  # in the rate, as failures
    lines = [h for h in load_headers(run_dir) if h.policy == "no_memory"]
    assert {h.termination for h in lines} == {"prompt_rejected"} and all(h.num_steps >= 1 for h in lines)


@pytest.mark.slow
def test_the_demo_run_shows_its_range_and_says_what_it_shows(tmp_path):
    """make demo's first part (benchmarks/smoke.yaml, the tiny backbone here): the floors run
    beside the designs and the report opens with what the run shows and what it cannot."""
    from pathlib import Path

    smoke = Path(__file__).resolve().parents[2] / "benchmarks" / "smoke.yaml"
    cfg = RunConfig.from_file(smoke, backbone="tiny", out=str(tmp_path), iterations=1, workers=1)
    out = write_report([run(cfg, progress=False)])
    text = (out / "report.md").read_text()
    assert text.index("**What this run shows.**") < text.index("## Table 1")
    final = {r["method"]: float(r["success_mean"]) for r in rows(out / "final_success.csv")}
    assert set(final) == {"random", "walkthrough", "no_memory", "trajectory", "abstraction", "anti_persistence"}
    assert final["walkthrough"] == 100.0  # the ceiling of these tasks


def test_the_report_can_label_with_a_judge_and_names_its_labeller(tiny_run, tmp_path):
    assert main(["report", str(tiny_run), "--out", str(tmp_path / "judged"), "--judge", "tiny:seed=2"]) == 0
    text = (tmp_path / "judged" / "report.md").read_text()
    # the rules (with the grounded checks where a setting recorded its worlds) or the judge
    assert re.search(r"EnvironmentLabeller( or GroundedLabeller \([^)]*\))? or JudgeLabeller\(tiny-llama\(seed=2\)\)", text)
    assert "not measured here" in text  # a judge's precision is not claimed
    rules = (tiny_run / "report" / "report.md").read_text() if (tiny_run / "report" / "report.md").exists() else \
        (write_report([tiny_run], out=tmp_path / "rules") / "report.md").read_text()
    assert "Labeller: EnvironmentLabeller" in rules and "was measured once on 99 abstractions" in rules
    assert "Cannot see (no engine facts)" in rules  # what the card says the labeller is blind to


def test_training_worlds_are_recorded_and_the_audit_checks_claims_against_them(tiny_run, tmp_path):
    from ap_gym.protocol.results import load_headers, load_worlds

    setting = tiny_run / "shop" / "abstraction" / "seed0"
    worlds = load_worlds(setting)
    trained = {h.task_id for h in load_headers(tiny_run) if h.phase == "train" and h.setting.startswith("shop/abstraction/seed0")}
    assert trained and set(worlds) == trained  # each training task's facts, once
    facts = next(iter(worlds.values()))
    assert facts.plan and facts.plan[-1] == "click[buy now]" and facts.engine == "the Shop's catalogue"
    assert not (tiny_run / "shop" / "no_memory" / "seed0" / "worlds.jsonl").exists()  # no memory: nothing to audit
    text = (write_report([tiny_run], out=tmp_path / "r") / "report.md").read_text()
    assert "GroundedLabeller (shop: checks order, overgeneralised against" in text


def test_no_printed_interval_of_the_audit_leaves_its_range_or_has_zero_width(tiny_run, tmp_path):
    """A tiny run's audit is all edge cases (few invocations, often no exposure or no flag):
    every '[lo, hi]' printed in its table is inside [-1, 1] and has width, and the CSV's
    numeric bounds agree."""
    import math
    import re

    out = write_report([tiny_run], out=tmp_path / "edges")
    audit = (out / "report.md").read_text().split("## Error-reproduction audit")[1].split("\n## ")[0]
    pairs = re.findall(r"\[(-?\d+\.\d+), (-?\d+\.\d+)\]", audit)
    assert pairs, "the audit printed no interval: nothing was checked"
    for lo, hi in pairs:
        assert -1.0 <= float(lo) < float(hi) <= 1.0, (lo, hi)
    for row in rows(out / "audit.csv"):
        for key in [k for k in row if k.endswith("_lo")]:
            lo, hi = row[key], row[key[:-3] + "_hi"]
            if lo not in ("", "nan") and hi not in ("", "nan"):
                assert -1.0 <= float(lo) < float(hi) <= 1.0 and not math.isnan(float(lo)), (key, lo, hi)


def test_table_6_and_figure_3_give_the_mean_over_settings(tmp_path):
    run = synthetic_run(tmp_path, "two", {"anti_persistence": [True] * 6 + [False] * 4, "trajectory": [True] * 2 + [False] * 8},
                        benchmark=("shop", "textworld"), seeds=(0, 1))
    out = write_report([run], out=tmp_path / "r")
    table = rows(out / "llm_calls.csv")
    means = [r for r in table if r["setting"] == "mean over settings"]
    assert sorted(r["method"] for r in means) == ["anti_persistence", "trajectory"]
    assert float(next(r for r in means if r["method"] == "anti_persistence")["score_mean"]) == 60.0
    assert "mean over settings (2)" in (out / "report.md").read_text()
    assert (out / "success_vs_cost.png").stat().st_size > 0


def test_the_mode_table_says_when_the_chosen_mode_synthesised_nothing(tmp_path):
    """Issue 43: 'strategic 50 %' was printed when every one of those episodes skipped synthesis."""
    info = {"anti_persistence": {"mode": "strategic", "synthesis_skipped": True, "synthesis_calls": 0}}
    run = synthetic_run(tmp_path, "skipped", {"anti_persistence": [False] * 4}, policy_info=info)
    out = write_report([run], out=tmp_path / "r")
    shares = {r["mode"]: float(r["share"]) for r in rows(out / "modes.csv")}
    assert shares["strategic"] == 1.0 and shares["(synthesis skipped)"] == 1.0
    assert "chosen, synthesis skipped" in (out / "report.md").read_text()


def test_a_report_of_an_unfinished_run_says_so_first_and_one_seed_is_not_a_spread(tiny_run, tmp_path):
    import shutil

    copy = tmp_path / "t"
    shutil.copytree(tiny_run, copy, ignore=shutil.ignore_patterns(".view", "report"))
    (copy / "summary.json").unlink()  # killed before its end
    text = (write_report([copy]) / "report.md").read_text()
    assert text.split("\n", 2)[2].startswith("**This run is not finished"), text[:300]
    one_seed = run(RunConfig.from_dict(config(tmp_path / "one", policies=[{"name": "random"}], benchmarks=["shop"],
                                              iterations=1, train_per_iter=0, heldout=2)), progress=False)
    table1 = (write_report([one_seed]) / "report.md").read_text().split("## Table 1:")[1].split("\n## ")[0]
    assert "(1 seed)" in table1 and "± 0.0" not in table1


def test_curves_png_shows_coinciding_methods_apart_with_intervals(tmp_path):
    """Issue 50: curves.png drew methods at one rate on top of each other (3 of 10 hidden), each
    with the same marker and a ±1 std band. Each method now has its own line style and marker,
    later ones thinner and nudged sideways, and every point its pooled 95 % interval."""
    from ap_gym.report.data import collect
    from ap_gym.report.plots import curves_figure

    same = [True] * 3 + [False] * 7
    run = synthetic_run(tmp_path, "flat", {m: list(same) for m in ("no_memory", "trajectory", "abstraction",
                                                                     "anti_persistence")}, seeds=(0, 1))
    fig = curves_figure(collect([run]))
    success = fig.axes[0]
    lines = [c for c in success.containers]  # one errorbar container per method
    assert len(lines) == 4
    styles = {(c.lines[0].get_linestyle(), c.lines[0].get_marker()) for c in lines}
    assert len(styles) == 4  # no two methods share a look, though their values coincide
    xs = {tuple(c.lines[0].get_xdata()) for c in lines}
    assert len(xs) == 4  # nudged apart on the iteration axis
    assert list(success.get_xticks()) == [0]  # ticks at the iterations, not at the nudges
    widths = [c.lines[0].get_linewidth() for c in lines]
    assert widths == sorted(widths, reverse=True)
    # each point's bar is the pooled 20 episodes' Wilson interval (6 of 20), in %
    from ap_gym.report.stats import wilson

    low, high = wilson(6, 20)
    segments = lines[0].lines[2][0].get_segments()
    assert len(segments) == 1
    (_, y0), (_, y1) = segments[0]
    assert abs(y0 - 100 * low) < 1e-6 and abs(y1 - 100 * high) < 1e-6
    import matplotlib.pyplot as plt

    plt.close(fig)
