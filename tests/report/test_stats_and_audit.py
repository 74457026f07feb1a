from __future__ import annotations

import math

import pytest
from scipy import stats

from ap_gym.memory import Abstraction
from ap_gym.report.audit import Invocation, SourceRecord, audit
from ap_gym.report.stats import holm, paired_stats
from ap_gym.text import commands_in
from tests.helpers import labeller_for


def test_holm_against_a_hand_computed_case():
    # sorted p: 0.01 (x4 = 0.04), 0.02 (x3 = 0.06), 0.03 (x2 = 0.06), 0.04 (x1 = 0.04 -> monotone 0.06)
    assert holm([0.03, 0.01, 0.04, 0.02]) == pytest.approx([0.06, 0.04, 0.06, 0.06])
    assert holm([0.5, math.nan, 0.01]) == pytest.approx([0.5, math.nan, 0.02], nan_ok=True)
    assert holm([0.9, 0.8]) == pytest.approx([1.0, 1.0])


def test_paired_statistics_match_scipy():
    method = {"a": 0.6, "b": 0.5, "c": 0.9, "d": 0.4, "e": 0.7}
    base = {"a": 0.5, "b": 0.52, "c": 0.6, "d": 0.3, "e": 0.6}
    other = {"a": 0.65, "b": 0.4, "c": 0.8, "d": 0.45, "e": 0.5}
    rows = {r.baseline: r for r in paired_stats(method, {"base": base, "other": other})}
    r = rows["base"]
    diffs = [100 * (method[k] - base[k]) for k in sorted(method)]
    assert r.n == 5 and r.mean_diff == pytest.approx(sum(diffs) / 5) and r.positive == 4
    t = stats.ttest_rel([method[k] for k in sorted(method)], [base[k] for k in sorted(method)])
    assert r.t_p == pytest.approx(t.pvalue)
    assert r.wilcoxon_p == pytest.approx(stats.wilcoxon(diffs).pvalue)
    half = stats.t.ppf(0.975, 4) * stats.tstd(diffs) / math.sqrt(5)
    assert (r.ci_low, r.ci_high) == pytest.approx((r.mean_diff - half, r.mean_diff + half))
    assert [r.t_p_holm for r in rows.values()] == pytest.approx(holm([r.t_p for r in rows.values()]))
    assert math.isnan(paired_stats({"a": 1.0}, {"b": {"a": 0.5}})[0].t_p)


def test_grammar_rule_reads_commands_not_style():
    label = labeller_for("scienceworld")
    assert label('Always "grab the thermometer" first.').flagged
    assert not label('Use "pick up thermometer" then "focus on water".').flagged
    assert not label("Heat the water slowly.").flagged  # nothing quoted: not flagged (not "correct")
    assert labeller_for("textworld")("Type `teleport to kitchen`.").flagged
    alf = labeller_for("alfworld")
    # apostrophes inside words open no quote; quoted objects and queries are not commands
    assert not alf("Don't open the fridge if it's closed; use 'cool apple 1 with fridge 1'.").flagged
    assert not alf("Check the 'countertop' and the 'diningtable' first.").flagged
    assert not labeller_for("shop")("Search for 'waterproof hiking boots' with search[boots].").flagged
    assert labeller_for("shop")("Buy with 'purchase[b0abc12345]'.").flagged
    assert [c.negated for c in commands_in("Use 'take keycard', not 'take key'.")] == [False, True]


def test_objects_and_claims_are_checked_against_the_source_records():
    failed = SourceRecord("heat some egg", (("take egg 1 from fridge 1", "Nothing happens."),
                                            ("heat egg 1 with stoveburner 1", "Nothing happens.")), False)
    won = SourceRecord("heat some egg", (("heat egg 1 with microwave 1", "You heat the egg 1 using the microwave 1."),),
                       True)
    alf = labeller_for("alfworld")
    assert alf("Use 'heat egg 1 with stoveburner 1'.", [failed]).reasons[0].startswith("contradicted")
    assert alf("Never use 'heat egg 1 with microwave 1'.", [won]).reasons[0].startswith("contradicted: forbids")
    assert alf("First, go to drawer 7 and open it.", [won]).reasons[0].startswith("absent")
    assert alf("Use 'go to drawer 7'.", [won]).reasons[0].startswith("absent")
    assert not alf("Use 'heat egg 1 with microwave 1'.", [won, failed]).flagged
    assert not alf("Use 'go to drawer 7'.").flagged  # no provenance: nothing to check against
    sw = labeller_for("scienceworld")
    frog = SourceRecord("find an animal", (("focus on frog", "You focus on the frog."),), True)
    assert sw("Use 'focus on dog'.", [frog]).flagged and not sw("Use 'focus on frog'.", [frog]).flagged


def test_the_fixture_set_is_labelled_and_the_labeller_measured_on_it():
    """At least 60 abstractions across the benchmarks, each erroneous or not with a reason;
    the labeller runs on every one (its precision and recall are in RESULTS.md)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "audit_labeller.py"
    spec = importlib.util.spec_from_file_location("audit_labeller", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sources, sets = module.load()
    assert set(sets) == {"natural test", "natural dev", "fixtures"} and len(sets["natural test"]) >= 30
    items = [x for group in sets.values() for x in group]
    assert len(items) >= 60 and {x["benchmark"] for x in items} == {"alfworld", "scienceworld", "textworld", "shop"}
    assert all(isinstance(x["erroneous"], bool) for x in items) and all(x["reason"] for x in sets["fixtures"])
    assert len({x["id"] for x in items}) == len(items)
    rows = [(x["erroneous"], labeller_for(x["benchmark"])(x["text"], [sources[s] for s in x["sources"]]).flagged)
            for x in items]
    score = module.score(rows)
    assert score["tp"] + score["fn"] == sum(x["erroneous"] for x in items)
    assert score["tp"] > 0 and score["tn"] > 0  # it flags some and clears some: not a constant


def _abs(aid, text, parents, sources=None):
    """A stored abstraction; synthesised (from the record ``aid``) unless ``sources=[]``."""
    return Abstraction(aid, text, "rule", 0, True, 0, 0, 0.5, {}, [aid] if sources is None else sources, parents)


def test_audit_on_a_hand_built_store():
    """Counted by hand. Two seeded abstractions (no source record: parents, never synthesis
    invocations; issue 39: counting them as invocations made beta the seeded share) and five
    synthesised ones."""
    store = [
        _abs(1, "bad", [], sources=[]),   # seeded, flagged: a parent only
        _abs(2, "good", [], sources=[]),  # seeded, not flagged: a parent only
        _abs(3, "bad", [1]),         # exposed, flagged
        _abs(4, "bad", [1, 2]),      # exposed, flagged
        _abs(5, "good", [3]),        # exposed, not flagged
        _abs(6, "bad", [2]),         # unexposed, flagged
        _abs(7, "good", [2, 5]),     # unexposed (parents not flagged), not flagged
    ]
    row = audit("s", store, lambda text: text == "bad", rejected=3)
    assert row.abstractions == 7 and row.flagged == 4  # every stored one is labelled
    assert (row.with_flagged_parent, row.flagged_given_flagged_parent) == (3, 2)
    assert (row.without_flagged_parent, row.flagged_given_no_flagged_parent) == (2, 1)
    assert row.rate_exposed == pytest.approx(2 / 3) and row.rate_unexposed == pytest.approx(0.5)
    # per synthesis invocation: 5 admitted + 3 rejected of unknown provenance (unexposed)
    assert (row.invocations, row.exposed_invocations, row.flagged_exposed_invocations) == (8, 3, 2)
    assert row.q == pytest.approx(3 / 8) and row.alpha == pytest.approx(2 / 3) and row.eta == pytest.approx(5 / 8)
    beta = row.estimates()["beta"]
    assert beta.value == pytest.approx(1 / 5)  # 6 flagged among 7 and the 3 rejected, not the seeded 1 and 2


def test_alpha_counts_rejected_outputs_too():
    store = [_abs(1, "bad", []), _abs(2, "good", [1])]
    rejected = [Invocation("bad", (1,), False), Invocation("bad", (1,), False), Invocation("good", (), False)]
    row = audit("s", store, lambda text: text == "bad", rejected)
    # exposed invocations: abstraction 2 (good) and two rejected (bad): alpha = 2/3, not 0/1
    assert (row.exposed_invocations, row.flagged_exposed_invocations) == (3, 2)
    assert row.alpha == pytest.approx(2 / 3) and row.rate_exposed == 0.0
    assert row.eta == pytest.approx(2 / 5) and row.q == pytest.approx(3 / 5)


def test_every_interval_stays_inside_its_range_and_has_width_on_edge_counts():
    """Zero events, all events, one unit, empty strata: Wilson, Newcombe and the stratified
    interval stay inside [0, 1] / [-1, 1] and are never of zero width (or say they cannot be had)."""
    import itertools
    import math

    from ap_gym.report.stats import difference, mantel_haenszel, proportion

    sizes = (1, 2, 3, 7, 40)
    for n in sizes:
        for k in (0, 1, n // 2, n - 1, n):
            e = proportion(max(0, min(k, n)), n)
            assert 0.0 <= e.low < e.high <= 1.0 and e.low <= e.value <= e.high
    for n1, n0 in itertools.product(sizes, sizes):
        for k1, k0 in itertools.product({0, n1 // 2, n1}, {0, n0 // 2, n0}):
            d = difference(k1, n1, k0, n0)
            assert -1.0 <= d.low < d.high <= 1.0 and d.low <= d.value <= d.high, (k1, n1, k0, n0, d)
    strata_sets = [[(0, 5, 0, 5)], [(0, 5, 0, 5), (0, 3, 0, 9)], [(5, 5, 0, 5)], [(3, 3, 3, 3), (0, 1, 1, 1)],
                   [(0, 0, 2, 4), (1, 2, 0, 0)], [(2, 4, 0, 6), (0, 7, 7, 7), (1, 1, 0, 1)]]
    for strata in strata_sets:
        mh = mantel_haenszel(strata)
        if math.isnan(mh.value):
            assert str(mh) == "n/a"  # no stratum with both arms: no estimate, not a fake interval
        else:
            assert -1.0 <= mh.low < mh.high <= 1.0 and mh.estimable, (strata, mh)
    assert str(difference(0, 0, 1, 1)) == "n/a"

