"""The report's figures: learning curves (held-out success, LLM calls and trajectory length
per iteration, the paper's Figure 9 among them) and success against cost per setting
(the paper's Figure 3). Each panel is one setting; a line or a point is a method, its
mean over seeds: the curves with the pooled episodes' 95 % interval at each point, the
success-against-cost points with ±1 std over seeds.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ap_gym.report.data import Results, Row
from ap_gym.report.stats import mean_std, wilson

__all__ = ["curves", "curves_figure", "success_vs_cost"]

@dataclass(frozen=True)
class _Series:
    """One row of the curves figure: its axis label, a point's value from its episodes, and
    each episode's own value when the point is a mean (``None``: a success rate, whose
    interval is Wilson's)."""

    label: str
    value: Callable[[list[Row]], float]
    per_episode: Callable[[Row], float] | None = None


_SERIES: tuple[_Series, ...] = (
    _Series("held-out success (%)", lambda xs: 100 * statistics.fmean(x.head.success for x in xs)),
    _Series("LLM calls per task", lambda xs: statistics.fmean(x.head.usage.llm_calls for x in xs),
            lambda x: float(x.head.usage.llm_calls)),
    _Series("steps per task", lambda xs: statistics.fmean(x.head.num_steps for x in xs),
            lambda x: float(x.head.num_steps)),
)


def _figure(rows: int, cols: int) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(rows, max(1, cols), figsize=(5.5 * max(1, cols), 3.4 * rows), squeeze=False)


def _by_seed(r: Results, setting: str, method: str) -> dict[int, dict[int, list[Row]]]:
    out: dict[int, dict[int, list[Row]]] = defaultdict(lambda: defaultdict(list))
    for x in r.evals:
        if x.setting == r.key(setting, method) and x.method == method and \
                not x.head.infrastructure_failure:
            out[x.head.seed][x.head.iteration].append(x)
    return out


#: A line style and marker per method, so methods whose curves coincide (several at 0 %) stay
#: visible: a dash of its own, the later drawn thinner on top and nudged sideways (issue 50).
_STYLES = [("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"), ((0, (8, 2, 2, 2)), "v"), ((0, (1, 3)), "P"),
           ((0, (12, 4)), "X"), ((0, (4, 1, 1, 1, 1, 1)), "*")]


def _interval(series: _Series, xs: list[Row]) -> tuple[float, float] | None:
    """The pooled episodes' 95 % interval of a curve's point: Wilson for success (in %), the
    normal one of the mean for LLM calls and steps (none from a single episode)."""
    import math

    if not xs:
        return None
    if series.per_episode is None:
        ci = wilson(sum(x.head.success for x in xs), len(xs))
        return None if ci is None else (100 * ci[0], 100 * ci[1])
    values = [series.per_episode(x) for x in xs]
    if len(values) < 2:
        return None
    m, half = statistics.fmean(values), 1.96 * statistics.stdev(values) / math.sqrt(len(values))
    return m - half, m + half


def curves_figure(r: Results) -> Any:
    """The figure :func:`curves` saves (a test reads its lines)."""
    import numpy as np
    from matplotlib.ticker import MaxNLocator

    fig, axes = _figure(len(_SERIES), len(r.settings))
    for col, s in enumerate(r.settings):
        iters: list[int] = []
        shown = [m for m in r.order if _by_seed(r, s, m)]
        for k, m in enumerate(shown):
            seeds = _by_seed(r, s, m)
            iters = sorted({i for d in seeds.values() for i in d})
            style, marker = _STYLES[k % len(_STYLES)]
            nudge = (k - (len(shown) - 1) / 2) * min(0.08, 0.4 / max(1, len(shown)))  # side by side, in iterations
            for row, series in enumerate(_SERIES):
                values = np.array([[series.value(seeds[j][i]) if seeds[j].get(i) else np.nan for i in iters]
                                   for j in seeds])
                mean = np.nanmean(values, axis=0)  # the mean over seeds, as the tables give it
                pooled = [_interval(series, [x for j in seeds for x in seeds[j].get(i, [])]) for i in iters]
                low = [mu - ci[0] if ci else 0.0 for mu, ci in zip(mean, pooled, strict=True)]
                high = [ci[1] - mu if ci else 0.0 for mu, ci in zip(mean, pooled, strict=True)]
                axes[row][col].errorbar([i + nudge for i in iters], mean, yerr=[np.maximum(low, 0), np.maximum(high, 0)],
                                        linestyle=style, marker=marker, linewidth=max(0.8, 2.4 - 0.3 * k),
                                        markersize=max(3.0, 7.0 - 0.6 * k), capsize=2, elinewidth=0.8,
                                        zorder=2 + k, label=m)
        every = sorted({i for m in shown for d in _by_seed(r, s, m).values() for i in d})
        for row, series in enumerate(_SERIES):
            # integer ticks at the iterations (the nudges are not iterations), padded by half a step
            if every and len(every) <= 12:
                axes[row][col].set_xticks(every)
            else:
                axes[row][col].xaxis.set_major_locator(MaxNLocator(integer=True))
            if every:
                axes[row][col].set_xlim(every[0] - 0.5, every[-1] + 0.5)
            wilson_ci = series.per_episode is None
            axes[row][col].set_ylabel(series.label + (" (95 % Wilson)" if wilson_ci else " (95 % CI)"), fontsize=8)
        axes[0][col].set_ylim(-2, 102)
        axes[0][col].set_title(s, fontsize=9)
        axes[-1][col].set_xlabel("iteration (-1: before training)" if any(i < 0 for i in iters) else "iteration")
        axes[0][col].legend(fontsize=7)
    fig.tight_layout()
    return fig


def curves(r: Results, path: Path) -> Path:
    """Success, LLM calls and steps per held-out task against iteration, per setting: each
    method's mean over seeds with the pooled episodes' 95 % interval at every point."""
    fig = curves_figure(r)
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def success_vs_cost(r: Results, path: Path) -> Path:
    """Final held-out success against LLM calls per task, one point per method (±1 std over seeds)."""
    mean_panel = len(r.settings) > 1  # the paper's Figure 3 also shows the mean over settings
    fig, axes = _figure(1, len(r.settings) + mean_panel)
    success = r.per_seed(r.final, lambda xs: 100 * statistics.fmean(x.head.success for x in xs))
    cost = r.per_seed(r.final, lambda xs: statistics.fmean(x.head.usage.llm_calls for x in xs))
    panels = [*r.settings, *(["mean over settings"] if mean_panel else [])]
    for col, s in enumerate(panels):
        ax = axes[0][col]
        for m in r.order:
            if s == "mean over settings":  # each setting's mean over seeds, then their mean (± std over settings)
                mine = [t for t in r.settings if (t, m) in success]
                if not mine:
                    continue
                (y, ys) = mean_std([mean_std(success[(t, m)])[0] for t in mine])
                (x, xs) = mean_std([mean_std(cost[(t, m)])[0] for t in mine])
                ax.errorbar([x], [y], xerr=[xs], yerr=[ys], fmt="o", capsize=3, label=f"{m} ({len(mine)} settings)")
                continue
            if (s, m) not in success:
                continue
            (y, ys), (x, xs) = mean_std(success[(s, m)]), mean_std(cost[(s, m)])
            ax.errorbar([x], [y], xerr=[xs], yerr=[ys], fmt="o", capsize=3, label=m)
        ax.set_title(s, fontsize=9)
        ax.set_xlabel("LLM calls per held-out task")
        ax.set_ylabel("held-out success (%)")
        ax.set_ylim(-2, 102)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path
