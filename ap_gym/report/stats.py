"""Statistics the report and the viewer share: intervals and setting-level tests.

* :func:`wilson`: the 95 % Wilson interval of a success rate (honest at 0/n and n/n).
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

__all__ = ["PairedStats", "holm", "mean_std", "paired_stats", "wilson"]


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float] | None:
    """The Wilson interval of ``successes`` out of ``n`` (``None`` when ``n`` is 0)."""
    if n <= 0:
        return None
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
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
