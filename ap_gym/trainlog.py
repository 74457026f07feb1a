"""A training run's log: one JSON line per update, the format ``ap-gym view`` reads.

A trainer (``benchmarks/learning.py``, ``examples/grpo_torch.py``, a user's script) writes
``training.jsonl``: a first line that says what it is (``{"format": "ap-gym-training/1",
"run": ..., "rule": ..., "config": {...}}``), then one line per update with its number and
its metrics (``{"update": 3, "reward": 0.25, "loss": -0.01, ...}``; a metric is a finite
number or ``null``). The viewer finds such files in the directories it is given and plots
any metric against the update, the wall time or the episodes played. A leaf: it imports
nothing of ap-gym, so the training side writes what the viewer reads without either
importing the other.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["FILENAME", "SCHEMA", "TrainingLog"]

SCHEMA = "ap-gym-training/1"
FILENAME = "training.jsonl"


class TrainingLog:
    """Appends one line per update to ``path`` (a new file starts with the header line).

    Args:
        path: the ``training.jsonl`` to write.
        run: the run's name, as the viewer shows it.
        rule: the training rule (``grpo``, ``rebn``, ...), if any.
        config: what produced it (saved in the header).
    """

    def __init__(self, path: str | Path, *, run: str, rule: str | None = None,
                 config: Mapping[str, Any] | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.last: dict[str, Any] = {}
        header = {"format": SCHEMA, "run": run, "rule": rule, "config": dict(config or {})}
        self.path.write_text(json.dumps(header, default=str) + "\n", encoding="utf-8")

    @classmethod
    def resume(cls, path: str | Path, *, upto: int, run: str, rule: str | None = None,
               config: Mapping[str, Any] | None = None) -> TrainingLog:
        """The log of a run that resumes after update ``upto``: its header and update lines
        up to ``upto`` are kept (a line past it was written after the save the run resumes
        from, and will be written again); a missing or foreign file starts anew."""
        path = Path(path)
        kept = [r for r in cls.read(path) if r["update"] <= upto] if upto > 0 and cls.header(path) else []
        log = cls(path, run=run, rule=rule, config=config)
        if kept:
            with open(log.path, "a", encoding="utf-8") as f:
                f.writelines(json.dumps(r) + "\n" for r in kept)
            log.last = kept[-1]
        return log

    def write(self, *, update: int, **metrics: float | int | None) -> None:
        """One update's line; a metric that is not a finite number is refused (a NaN loss is
        a fact to stop on, not a point to plot)."""
        for key, value in metrics.items():
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                                      or not math.isfinite(value)):
                raise ValueError(f"training log: {key}={value!r} is not a finite number")
        self.last = {"update": int(update), **metrics}
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(self.last) + "\n")
            f.flush()

    @staticmethod
    def header(path: str | Path) -> dict[str, Any] | None:
        """The header of a training log, or ``None`` when ``path`` is not one."""
        if not Path(path).is_file():  # a FIFO would block the read: not a log
            return None
        try:
            with open(path, encoding="utf-8") as f:
                first = json.loads(f.readline())
        except (OSError, ValueError):
            return None
        # "schema" was the key's name before the results record took that word for its own
        return first if isinstance(first, dict) and SCHEMA in (first.get("format"), first.get("schema")) else None

    @staticmethod
    def read(path: str | Path) -> list[dict[str, Any]]:
        """Every update line of a training log (a damaged or cut line is skipped)."""
        rows: list[dict[str, Any]] = []
        if not Path(path).is_file():
            return rows
        with open(path, encoding="utf-8", errors="replace") as f:
            f.readline()
            for line in f:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if isinstance(row, dict) and isinstance(row.get("update"), int):
                    rows.append(row)
        return rows
