"""Training logs for the viewer's Training page: every ``training.jsonl`` under the paths given.

A trainer writes :class:`~ap_gym.trainlog.TrainingLog` files (``benchmarks/learning.py``
writes one per rule); the viewer overlays any of their metrics against the update, the
wall time or the episodes played. A path given to ``ap-gym view`` may be a run (its logs,
if any, are found inside it), a directory that holds only training logs (a learning
benchmark's ``results/learning``), or one log file.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ap_gym.trainlog import FILENAME, TrainingLog

__all__ = ["find_logs", "training_logs"]

log = logging.getLogger(__name__)


def find_logs(paths: Iterable[str | Path]) -> list[Path]:
    """The training logs under ``paths`` (each file once, in path order; a file whose first line
    is not a training log's header is not one)."""
    found: list[Path] = []
    seen: set[Path] = set()
    for path in map(Path, paths):
        candidates = [path] if path.is_file() else sorted(
            p for p in path.rglob(FILENAME) if ".view" not in p.relative_to(path).parts)
        for p in candidates:
            if not p.is_file():  # a FIFO or a device named training.jsonl would block the reader: skipped
                log.warning("ap-gym view: %s is not a regular file; skipped", p)
                continue
            if p.resolve() not in seen and TrainingLog.header(p) is not None:
                seen.add(p.resolve())
                found.append(p)
    return found


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) \
        else None


def training_logs(paths: Sequence[str | Path]) -> dict[str, Any]:
    """Every log's header, its metrics (the numeric keys its lines carry) and its lines.

    ``episodes_seen`` is added to each line when the log counts ``episodes`` per update (the
    running total: an x axis that compares rules with different group sizes)."""
    logs = []
    for i, path in enumerate(find_logs(paths)):
        header = TrainingLog.header(path) or {}
        rows = [{k: (_number(v) if k != "update" else v) for k, v in row.items()} for row in TrainingLog.read(path)]
        if rows and all(r.get("episodes") is not None for r in rows):
            seen = 0.0
            for r in rows:
                seen += float(r["episodes"] or 0.0)
                r["episodes_seen"] = seen
        metrics = sorted({k for r in rows for k, v in r.items() if k != "update" and v is not None})
        name = str(header.get("run") or path.parent.name)
        rule = header.get("rule")
        rule = str(rule) if rule is not None else None  # a header written by hand may hold a number
        config = header.get("config")
        logs.append({"id": i, "path": str(path), "name": name if not rule or rule in name else f"{name} ({rule})",
                     "rule": rule, "config": config if isinstance(config, dict) else {}, "metrics": metrics,
                     "rows": rows})
    return {"logs": logs}
