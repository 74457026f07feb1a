"""Held-out success of agents beside the baselines that say what it means.

A learned agent's number is read against the floor (uniform random over the admissible
commands, over several seeds), the best simple rule (:mod:`ap_gym.policies.rules`), the
ceiling (the expert's walkthrough) and the untrained model, all on the same held-out games
at the same step limit. Every row is played by ``ap-gym run`` itself (no memory, greedy
``choose`` for models), so a row here is what a user's run would give.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ap_gym.protocol import RunConfig, load_headers, run
from ap_gym.protocol.results import EpisodeHeader
from ap_gym.report.stats import difference, proportion

__all__ = ["Row", "evaluate", "family_table", "rows_table", "termination_table"]


@dataclass(frozen=True)
class Row:
    """One agent's held-out episodes (all seeds)."""

    label: str
    heads: tuple[EpisodeHeader, ...]
    seeds: int = 1

    @property
    def won(self) -> int:
        return sum(h.success for h in self.heads)

    @property
    def n(self) -> int:
        return len(self.heads)


def evaluate(name: str, out: Path, env_id: str, env_options: Mapping[str, Any], policies: Sequence[Mapping[str, Any]],
             *, backbone: str = "default", seeds: Sequence[int] = (0,), heldout: int | None = None,
             max_steps: int, workers: int = 1, lanes: int = 1, progress: bool = True) -> dict[str, Row]:
    """Every policy of ``policies`` on the held-out split, by ``ap-gym run`` (resumable):
    label -> its :class:`Row` (infrastructure failures left out, and counted in the run)."""
    config = RunConfig.from_dict({
        "name": name, "out": str(out), "benchmarks": [env_id], "backbone": backbone,
        "env_options": {env_id: dict(env_options)}, "policies": list(policies), "seeds": list(seeds),
        "iterations": 1, "train_per_iter": 0, "heldout": heldout, "max_steps": max_steps, "workers": workers,
        "lanes": lanes, "retries": 1})
    heads = [h for h in load_headers(run(config, progress=progress)) if h.phase == "eval"]
    by: dict[str, list[EpisodeHeader]] = defaultdict(list)
    for h in heads:
        if not h.infrastructure_failure:
            by[h.policy].append(h)
    return {p.label: Row(p.label, tuple(sorted(by[p.label], key=lambda h: (h.seed, h.task_id))), len(seeds))
            for p in config.policies}


def _cell(row: Row) -> str:
    if row.seeds > 1:  # a mean count over seeds, its range, and the pooled proportion's interval
        per_seed = defaultdict(int)
        for h in row.heads:
            per_seed[h.seed] += h.success
        counts = [per_seed.get(s, 0) for s in sorted({h.seed for h in row.heads})]
        tasks = row.n // max(len(counts), 1)
        return (f"{proportion(row.won, row.n)} (pooled over {len(counts)} seeds; per seed "
                f"{statistics.fmean(counts):.1f}/{tasks}, {min(counts)}-{max(counts)})")
    return f"{proportion(row.won, row.n)} ({row.won}/{row.n})"


def rows_table(rows: Sequence[Row], *, reference: str | None = None, notes: Mapping[str, str] | None = None) -> list[str]:
    """Held-out success per agent with 95 % Wilson intervals; against ``reference`` (a row's
    label), Newcombe's interval of the difference."""
    ref = next((r for r in rows if r.label == reference), None)
    lines = ["| agent | held-out success | " + (f"minus {reference} | " if reference else "")
             + "mean steps (won) | what it is |", "|---|---|" + ("---|" if reference else "") + "---|---|"]
    for r in rows:
        won_steps = [h.num_steps for h in r.heads if h.success]
        diff = "-" if ref is None or r is ref else str(difference(r.won, r.n, ref.won, ref.n))
        steps = f"{statistics.fmean(won_steps):.1f}" if won_steps else "-"
        lines.append(f"| {r.label} | {_cell(r)} | " + (f"{diff} | " if reference else "")
                     + f"{steps} | {(notes or {}).get(r.label, '')} |")
    return lines


def _natural(text: str) -> list[Any]:
    """A sort key that orders "levels-6-10" before "levels-11-15"."""
    import re

    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text)]


def family_table(rows: Sequence[Row]) -> list[str]:
    """Held-out wins per task family (where an agent fails)."""
    families = sorted({h.task_family for r in rows for h in r.heads}, key=_natural)
    lines = ["| family | " + " | ".join(r.label for r in rows) + " |", "|---|" + "---|" * len(rows)]
    for family in families:
        cells = []
        for r in rows:
            mine = [h for h in r.heads if h.task_family == family]
            cells.append(f"{sum(h.success for h in mine)}/{len(mine)}" if mine else "-")
        lines.append(f"| {family} | " + " | ".join(cells) + " |")
    return lines


def termination_table(rows: Sequence[Row]) -> list[str]:
    """How the episodes ended (won, lost, the step limit), per agent."""
    kinds = ["won", "lost", "step_limit"]
    lines = ["| agent | " + " | ".join(kinds) + " | other |", "|---|" + "---|" * (len(kinds) + 1)]
    for r in rows:
        counts = defaultdict(int)
        for h in r.heads:
            counts[h.termination.value] += 1
        other = sum(v for k, v in counts.items() if k not in kinds)
        lines.append(f"| {r.label} | " + " | ".join(str(counts.get(k, 0)) for k in kinds) + f" | {other} |")
    return lines
