"""Statistics the report and the viewer share: intervals and setting-level tests.

* :func:`wilson`: the 95 % Wilson interval of a success rate (honest at 0/n and n/n).
* :class:`Estimate` with :func:`proportion` (Wilson), :func:`difference` (Newcombe's
  hybrid score interval of a difference of two proportions) and :func:`mantel_haenszel`
  (the Mantel-Haenszel risk difference over strata, a stratified Newcombe interval): the
  audit's estimates, each with its 95 % interval, inside [-1, 1] and never of zero width
  (an interval that cannot be had is said to be "not estimable").
* :func:`mean_std`: a mean and a sample standard deviation (over seeds).
* :func:`paired_stats`: setting-level statistics, labelled exploratory as in the paper.
  Per baseline: the paired differences (method - baseline, in points) over settings;
  their mean, the count of positive differences, a 95 % t-interval, a paired t-test and a
  Wilcoxon signed-rank test (scipy), with Holm's correction applied within each test
  family (all t-tests together, all Wilcoxon tests together).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["Estimate", "PairedStats", "allows", "difference", "holm", "mantel_haenszel", "mean_std", "paired_stats",
           "proportion", "wilson"]


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float] | None:
    """The Wilson interval of ``successes`` out of ``n`` (``None`` when ``n`` is 0)."""
    if n <= 0:
        return None
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its 95 % interval (NaN throughout when there is no data)."""

    value: float
    low: float
    high: float

    def covers(self, truth: float) -> bool:
        return self.low <= truth <= self.high

    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0

    @property
    def estimable(self) -> bool:
        """Whether the interval says anything: a value, and an interval of some width (a
        zero-width one comes from zero variance, not from certainty)."""
        return not math.isnan(self.value) and not math.isnan(self.low) and self.high > self.low

    def __str__(self) -> str:
        if math.isnan(self.value):
            return "n/a"
        if not self.estimable:
            return f"{self.value:.2f} (interval not estimable)"
        return f"{self.value:.2f} [{self.low:.2f}, {self.high:.2f}]"


NO_DATA = Estimate(math.nan, math.nan, math.nan)


def allows(estimate: Estimate, effect: str) -> str:
    """What an interval allows, in a sentence: whether it holds 0, and the effects it rules out."""
    if not estimate.estimable:
        return "not measured (no episodes)"
    if estimate.excludes_zero():
        return f"excludes 0: {effect} is {'positive' if estimate.value > 0 else 'negative'}"
    return (f"holds 0: no {effect} shown; one below {estimate.low:+.2f} or above {estimate.high:+.2f} is "
            "excluded at 95 %")


def proportion(k: int, n: int) -> Estimate:
    """``k / n`` with its Wilson interval."""
    interval = wilson(k, n)
    return NO_DATA if interval is None else Estimate(k / n, *interval)


def difference(k1: int, n1: int, k0: int, n0: int) -> Estimate:
    """``k1/n1 - k0/n0`` with Newcombe's hybrid score interval (his method 10: it keeps its
    coverage near the boundaries and with small counts, where the Wald interval does not)."""
    w1, w0 = wilson(k1, n1), wilson(k0, n0)
    if w1 is None or w0 is None:
        return NO_DATA
    p1, p0 = k1 / n1, k0 / n0
    d = p1 - p0
    low = d - math.sqrt((p1 - w1[0]) ** 2 + (w0[1] - p0) ** 2)
    high = d + math.sqrt((w1[1] - p1) ** 2 + (p0 - w0[0]) ** 2)
    return Estimate(d, low, high)


def mantel_haenszel(strata: Sequence[tuple[int, int, int, int]], z: float = 1.96) -> Estimate:
    """The Mantel-Haenszel risk difference over strata ``(a, n1, b, n0)`` (``a`` events among
    ``n1`` exposed, ``b`` among ``n0`` unexposed), with a stratified Newcombe interval: each
    arm's MH-weighted rate gets a Wilson interval at its effective size (``1 / sum(w^2/n)``
    with the normalised weights), and the two combine as in :func:`difference`. So the
    interval keeps its width at zero events (Sato's variance is 0 there: a ``[0.00, 0.00]``
    that claimed certainty) and stays inside [-1, 1]. A stratum without both exposed and
    unexposed units carries no weight; with none left there is no estimate."""
    kept = [(a, n1, b, n0) for a, n1, b, n0 in strata if n1 > 0 and n0 > 0]
    weights = [n1 * n0 / (n1 + n0) for _, n1, _, n0 in kept]
    total = sum(weights)
    if total == 0:
        return NO_DATA
    w = [x / total for x in weights]
    p1 = sum(wi * a / n1 for wi, (a, n1, _, _) in zip(w, kept, strict=True))
    p0 = sum(wi * b / n0 for wi, (_, _, b, n0) in zip(w, kept, strict=True))
    n1_eff = 1.0 / sum(wi * wi / n1 for wi, (_, n1, _, _) in zip(w, kept, strict=True))
    n0_eff = 1.0 / sum(wi * wi / n0 for wi, (_, _, _, n0) in zip(w, kept, strict=True))
    l1, u1 = _wilson_rate(p1, n1_eff, z)
    l0, u0 = _wilson_rate(p0, n0_eff, z)
    d = p1 - p0
    return Estimate(d, d - math.sqrt((p1 - l1) ** 2 + (u0 - p0) ** 2), d + math.sqrt((u1 - p1) ** 2 + (p0 - l0) ** 2))


def _wilson_rate(p: float, n: float, z: float = 1.96) -> tuple[float, float]:
    """The Wilson interval of a rate ``p`` observed over (an effective) ``n``."""
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(max(0.0, p * (1 - p)) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0.0 for one value; NaN for none)."""
    if not values:
        return math.nan, math.nan
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


@dataclass(frozen=True)
class PairedStats:
    baseline: str
    n: int
    mean_diff: float
    positive: int
    ci_low: float
    ci_high: float
    t_p: float
    wilcoxon_p: float
    t_p_holm: float = math.nan
    wilcoxon_p_holm: float = math.nan


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (NaN stays NaN and is not counted)."""
    idx = [i for i, p in enumerate(pvalues) if not math.isnan(p)]
    m = len(idx)
    order = sorted(idx, key=lambda i: pvalues[i])
    out = [math.nan] * len(pvalues)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


def paired_stats(method: Mapping[str, float], baselines: Mapping[str, Mapping[str, float]]) -> list[PairedStats]:
    """``method`` and each baseline map setting -> success (0-1); differences in points."""
    from scipy import stats

    rows = []
    for name, base in baselines.items():
        common = sorted(set(method) & set(base))
        diffs = [100.0 * (method[s] - base[s]) for s in common]
        n = len(diffs)
        mean = sum(diffs) / n if n else math.nan
        if n >= 2:
            sd = stats.tstd(diffs)
            half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n) if sd > 0 else 0.0
            t_p = float(stats.ttest_rel([method[s] for s in common], [base[s] for s in common]).pvalue) if sd > 0 else math.nan
            w_p = float(stats.wilcoxon(diffs).pvalue) if any(d != 0 for d in diffs) else math.nan
            low, high = mean - half, mean + half
        else:
            low = high = t_p = w_p = math.nan
        rows.append(PairedStats(name, n, mean, sum(d > 0 for d in diffs), low, high, t_p, w_p))
    t_adj = holm([r.t_p for r in rows])
    w_adj = holm([r.wilcoxon_p for r in rows])
    return [PairedStats(**{**r.__dict__, "t_p_holm": t, "wilcoxon_p_holm": w}) for r, t, w in zip(rows, t_adj, w_adj, strict=True)]
