from __future__ import annotations

import math

import pytest
from scipy import stats

from ap_gym.memory.store import Abstraction
from ap_gym.report.audit import GrammarLabeller, audit
from ap_gym.report.stats import holm, paired_stats


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


def test_grammar_labeller():
    label = GrammarLabeller("scienceworld")
    assert label('Always "grab the thermometer" first.')
    assert not label('Use "pick up thermometer" then "focus on water".')
    assert not label("Heat the water slowly.")  # nothing quoted: not flagged (not "correct")
    assert GrammarLabeller("textworld")("Type `teleport to kitchen`.")


def _abs(aid, text, parents):
    return Abstraction(aid, text, "rule", 0, True, 0, 0, 0.5, {}, [], parents)


def test_audit_on_a_hand_built_store():
    flagged_texts = {1, 3, 4, 6}
    store = [
        _abs(1, "bad", []),          # flagged root
        _abs(2, "good", []),         # unflagged root
        _abs(3, "bad", [1]),         # exposed, flagged
        _abs(4, "bad", [1, 2]),      # exposed, flagged
        _abs(5, "good", [3]),        # exposed, not flagged
        _abs(6, "bad", [2]),         # unexposed, flagged
        _abs(7, "good", [2, 5]),     # unexposed (parents not flagged), not flagged
    ]
    row = audit("s", store, lambda text: text == "bad", rejected=3)
    assert row.flagged == len(flagged_texts) == 4
    assert (row.with_flagged_parent, row.flagged_given_flagged_parent) == (3, 2)
    assert (row.without_flagged_parent, row.flagged_given_no_flagged_parent) == (4, 2)
    assert row.rate_exposed == pytest.approx(2 / 3) and row.rate_unexposed == pytest.approx(0.5)
    assert row.gap == pytest.approx(2 / 3 - 0.5)
    assert row.q == pytest.approx(3 / 7) and row.alpha == pytest.approx(2 / 3) and row.eta == pytest.approx(0.7)
