"""The report's figures: learning curves (held-out success, LLM calls and trajectory length
per iteration, the paper's Figure 9 among them) and success against cost per setting
(the paper's Figure 3). Each panel is one setting; a line or a point is a method, its
mean over seeds, with a ±1 std band or bar.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ap_gym.report.data import Results, Row
from ap_gym.report.stats import mean_std

__all__ = ["curves", "success_vs_cost"]

_SERIES: list[tuple[str, Callable[[list[Row]], float]]] = [
    ("held-out success (%)", lambda xs: 100 * statistics.fmean(x.head.success for x in xs)),
    ("LLM calls per task", lambda xs: statistics.fmean(x.head.usage.llm_calls for x in xs)),
    ("steps per task", lambda xs: statistics.fmean(x.head.num_steps for x in xs)),
]


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


def curves(r: Results, path: Path) -> Path:
    """Success, LLM calls and steps per held-out task against iteration, per setting."""
    import numpy as np
    from matplotlib.ticker import MaxNLocator

    fig, axes = _figure(len(_SERIES), len(r.settings))
    for col, s in enumerate(r.settings):
        iters: list[int] = []
        for m in r.order:
            seeds = _by_seed(r, s, m)
            if not seeds:
                continue
            iters = sorted({i for d in seeds.values() for i in d})
            for row, (_, fn) in enumerate(_SERIES):
                values = np.array([[fn(seeds[k][i]) if seeds[k].get(i) else np.nan for i in iters] for k in seeds])
                mean, sd = np.nanmean(values, axis=0), np.nanstd(values, axis=0)
                axes[row][col].plot(iters, mean, marker="o", label=m)
                axes[row][col].fill_between(iters, mean - sd, mean + sd, alpha=0.2)
        for row, (label, _) in enumerate(_SERIES):
            axes[row][col].xaxis.set_major_locator(MaxNLocator(integer=True))
            axes[row][col].set_ylabel(label)
        axes[0][col].set_ylim(-2, 102)
        axes[0][col].set_title(s, fontsize=9)
        axes[-1][col].set_xlabel("iteration (-1: before training)" if any(i < 0 for i in iters) else "iteration")
        axes[0][col].legend(fontsize=7)
    fig.tight_layout()
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
