"""The injection study: errors planted where each design reads, through the protocol's loop."""

from __future__ import annotations

import json

import pytest

from ap_gym.backbones.scripted import ScriptedActor
from ap_gym.protocol.results import load_abstractions, load_episodes
from ap_gym.studies.injection import (
    AVOID,
    RIGHT,
    WRONG,
    Injection,
    bought_at_once,
    recommends_buying_at_once,
    run_study,
    synthesiser,
)

SMALL = Injection(iterations=1, train_per_iter=20, heldout=20, seeded=12,
                  arms=("anti_persistence", "ap_persist", "abstraction", "trajectory", "no_memory"))


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    return run_study(tmp_path_factory.mktemp("injection"), SMALL, exposure_calls=200, progress=False)


def test_the_labeller_and_the_synthesiser_do_what_the_study_says():
    assert recommends_buying_at_once(WRONG) and not recommends_buying_at_once(AVOID)
    assert not recommends_buying_at_once(RIGHT)
    assert bought_at_once(["search[x]", "click[b0abcdefgh]", "click[buy now]"])
    assert not bought_at_once(["search[x]", "click[b0abcdefgh]", "click[9]", "click[buy now]"])
    import random

    write = synthesiser(copying=1.0, base_error=0.0)
    record = "Task: t\nOutcome: success, score 100 in 3 steps\nTrajectory:\n> search[x]\n> click[b0abcdefgh]\n" \
             "> click[buy now]"
    assert write(f"Successful attempts:\n[1] {record}", random.Random(0)) == WRONG
    assert write(f"avoid the mistakes\n[1] {record}", random.Random(0)) == AVOID


def test_the_actor_follows_its_guidance_at_the_set_rate():
    tasks = {f"buy item {k}": ["search[x]", "click[b0abcdefgh]", "click[red]", "click[buy now]"] for k in range(300)}
    actor = ScriptedActor(tasks, synthesiser(1.0, 0.0), compliance=0.5, seed=3)
    took = 0
    for instruction in tasks:  # the agent hands it the step's commands; the page lists none
        took += actor.act_on([{"role": "system", "content": f"Your task: {instruction}\n\n## Lessons\n{WRONG}"},
                              {"role": "user", "content": "search"}, {"role": "assistant", "content": "search[x]"},
                              {"role": "user", "content": "results"},
                              {"role": "assistant", "content": "click[b0abcdefgh]"},
                              {"role": "user", "content": "item page"}],
                             ["click[red]", "click[buy now]"]).text == "click[buy now]"
    assert actor.offered == 300 and actor.followed == took and 0.42 <= took / 300 <= 0.58


def test_discarding_guidance_beats_persisting_it_with_the_same_records(study):
    headline = next(t for t in study["tables"] if t.name == "injection_discard_vs_persist")
    discard, persist = (float(cell.split()[0]) for cell in headline.rows[0][:2])
    assert discard > persist
    run = study["run"]
    assert not load_abstractions(run / "shop/anti_persistence/seed0")  # discard stores nothing
    assert any(a.kind == "guidance" for a in load_abstractions(run / "shop/ap_persist/seed0"))


def test_the_indirect_path_is_open_to_anti_persistence(study):
    """Seeded successful records that bought at once reach imitation: Anti-Persistence writes the
    wrong rule again in some episodes' guidance; immunity is not built into where errors were put."""
    lines = [x for x in load_episodes(study["run"]) if x.header.policy == "anti_persistence"]
    assert any(recommends_buying_at_once(x.header.policy_info.get("mode_guidance") or "") for x in lines)


def test_the_audit_sees_copying_in_abstraction_memory(study):
    table = study["tables"][-1]
    row = next(r for r in table.rows if r[0] == "abstraction")
    alpha, beta = row[7], row[8]
    # seeded rules are parents, never invocations: with a flagged one in nearly every prompt, beta may have
    # no unexposed synthesis call to count (n/a), never the seeded share (issue 39)
    assert float(alpha.split()[0]) > 5 * SMALL.base_error
    assert beta == "n/a" or float(beta.split()[0]) < float(alpha.split()[0])


def test_randomised_exposure_recovers_the_copying_rate(study):
    truth = SMALL.copying * (1 - SMALL.base_error)
    assert study["exposure"]["effect"].covers(truth)
    assert 0.6 <= study["compliance"] <= 0.95  # realised against the set 0.8


def test_the_report_says_what_the_study_is(study, tmp_path):
    report = study["report"].read_text()
    assert "not a model result" in report and "Discard against persist" in report
    config = json.loads((study["run"] / "config.json").read_text())["config"]
    assert {p["label"]: bool(p["initial_state"]) for p in config["policies"]}["no_memory"] is False


def test_the_dose_response_attributes_nothing_to_a_zero_share(study):
    """Issue 39: at 0 % injected the headline contrast was still 0.30 (the actor's own errors,
    copied); the dose-response states that base beside what injection adds, and a placebo
    second 0 % run's dose effect holds 0."""
    rows = study["dose"]
    assert [r["share"] for r in rows] == [0.0, 0.0, SMALL.share]
    base, placebo, dosed = rows
    assert base["dose"] is None and base["seed"] != placebo["seed"]  # independent runs
    assert placebo["dose"].covers(0.0) and -2.0 <= placebo["dose"].low < placebo["dose"].high <= 2.0
    assert dosed["dose"].estimable
    report = study["report"].read_text()
    assert "Dose-response" in report and "placebo" in report


def test_the_report_leads_with_the_dose_effect_and_says_what_it_allows(study):
    """Issue 50: the report led with one run's discard - persist, which holds the actor's own
    copied errors too, and never said when an interval held 0. The first table is now what
    injecting adds, each row with a sentence on what its interval allows."""
    from ap_gym.report.stats import allows

    first = study["tables"][0]
    assert first.name == "injection_dose_effect"
    rows = {r[0]: r for r in first.rows}
    assert set(rows) == {"placebo: a second 0 % run", f"{100 * SMALL.share:g} % injected"}
    placebo, dosed = study["dose"][1], study["dose"][2]
    assert rows["placebo: a second 0 % run"][2] == str(placebo["dose"])
    assert rows["placebo: a second 0 % run"][3].startswith("holds 0")  # the placebo holds 0 (asserted above)
    assert rows[f"{100 * SMALL.share:g} % injected"][3] == allows(dosed["dose"], "effect of injecting")
    report = study["report"].read_text()
    assert report.index("What injecting adds") < report.index("Dose-response") < report.index("Discard against")
    headline = next(t for t in study["tables"] if t.name == "injection_discard_vs_persist")
    assert headline.rows[0][3].split(":")[0] in ("holds 0", "excludes 0")


def test_what_an_interval_allows_is_said_both_ways():
    from ap_gym.report.stats import Estimate, allows

    assert allows(Estimate(0.1, -0.2, 0.4), "effect") == ("holds 0: no effect shown; one below -0.20 or above "
                                                          "+0.40 is excluded at 95 %")
    assert allows(Estimate(-0.3, -0.5, -0.1), "effect").startswith("excludes 0: effect is negative")
    assert allows(Estimate(float("nan"), float("nan"), float("nan")), "effect").startswith("not measured")


def test_a_difference_of_differences_keeps_its_range():
    from ap_gym.report.stats import difference
    from ap_gym.studies.injection import difference_of_differences

    d = difference_of_differences(difference(20, 20, 0, 20), difference(0, 20, 20, 20))
    assert d.value == 2.0 and -2.0 <= d.low < d.high <= 2.0
    same = difference_of_differences(difference(5, 10, 5, 10), difference(5, 10, 5, 10))
    assert same.value == 0.0 and same.covers(0.0) and same.low < 0 < same.high


def test_the_viewer_and_the_report_audit_the_study_run_alike(study, tmp_path):
    """One audit everywhere (issue 50): the viewer audited the study's run with the default
    labeller (0 of 80 rules flagged, gap +0.28 for ap_persist) while the study's report used
    its ground truth (-0.27). The run names its labeller; both read it."""
    from ap_gym.report import collect
    from ap_gym.report.audit import LABELLER_FILE
    from ap_gym.report.tables import audit_table
    from ap_gym.view.index import RunIndex
    from tests.helpers import copy_run

    run = copy_run(study["run"], tmp_path)
    assert json.loads((run / LABELLER_FILE).read_text())["labeller"].endswith(":recommends_buying_at_once")
    table, _, used = audit_table(collect([run]))
    assert table is not None and any("recommends_buying_at_once" in u for u in used)
    ix = RunIndex(run)
    try:
        viewer = {s: json.loads(row) for s, row in ix.conn.execute("SELECT setting, row FROM audits")}
    finally:
        ix.close()
    for row, data in zip(table.rows, table.data, strict=True):
        mine = viewer[row[0]]
        assert mine["flagged"] == row[2] and mine["invocations"] == row[4], row[0]
        assert "recommends_buying_at_once" in mine["labeller"]
        gap = mine["estimates"]["gap"][0]
        expected = data[5 + 3 * 3]  # q, alpha, beta, then gap (value, lo, hi each)
        assert (gap is None and expected != expected) or gap == pytest.approx(expected), row[0]


def test_dose_seeds_pool_independent_runs_per_share(tmp_path):
    """``dose_seeds``: each share's runs have seeds of their own (the first is the one a
    one-run study used, so it resumes), and the share's row pools their final episodes."""
    from ap_gym.studies.injection import dose_response

    tiny = SMALL.model_copy(update={"train_per_iter": 4, "heldout": 6, "seeded": 4, "dose_shares": (0.0,),
                                    "dose_seeds": 2})
    rows = dose_response(tmp_path, tiny)
    assert [r["share"] for r in rows] == [0.0, tiny.share]
    assert rows[0]["seeds"][0] == tiny.seed + 1 and rows[1]["seeds"][0] == tiny.seed + 2
    assert len({s for r in rows for s in r["seeds"]}) == 4  # four independent runs
    assert all(r["discard"][1] == r["persist"][1] == 2 * tiny.heldout for r in rows)
    assert rows[0]["dose"] is None and rows[1]["dose"] is not None
