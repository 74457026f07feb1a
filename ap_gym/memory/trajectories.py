"""Trajectory memory: records of past episodes (task, steps, outcome, what was in their
prompt), retrieved by task-embedding similarity."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ap_gym.memory.table import EmbeddedTable

__all__ = ["Record", "TrajectoryStore"]


@dataclass(frozen=True)
class Record:
    """One stored trajectory."""

    id: int
    task_id: str
    family: str
    instruction: str
    steps: list[dict[str, Any]]
    success: bool
    score: float | None
    iteration: int
    mode: str | None
    abstraction_ids: list[int] = field(default_factory=list)


class TrajectoryStore(EmbeddedTable):
    """Records of past episodes, retrieved by task-embedding similarity."""

    table = "trajectories"

    def add(self, *, task_id: str, family: str, instruction: str, steps: Sequence[dict[str, Any]],
            success: bool, score: float | None, embedding: np.ndarray, iteration: int,
            mode: str | None = None, abstraction_ids: Sequence[int] = ()) -> int:
        return self._insert({
            "task_id": task_id, "family": family, "instruction": instruction, "steps": json.dumps(list(steps)),
            "success": int(success), "score": score, "iteration": iteration, "mode": mode,
            "abstraction_ids": json.dumps(list(abstraction_ids)),
        }, embedding)

    def get(self, ids: Sequence[int]) -> list[Record]:
        if not ids:
            return []
        rows = self.db.execute(
            f"SELECT * FROM trajectories WHERE id IN ({','.join('?' * len(ids))})", list(ids)
        ).fetchall()
        by_id = {r["id"]: r for r in rows}
        return [self._record(by_id[i]) for i in ids if i in by_id]

    @staticmethod
    def _record(r: sqlite3.Row) -> Record:
        return Record(r["id"], r["task_id"], r["family"], r["instruction"], json.loads(r["steps"]),
                      bool(r["success"]), r["score"], r["iteration"], r["mode"], json.loads(r["abstraction_ids"]))

    def ids_of_task(self, task_id: str) -> list[int]:
        """The records of one task (several when training drew it more than once)."""
        return [r[0] for r in self.db.execute("SELECT id FROM trajectories WHERE task_id=? ORDER BY id", (task_id,))]

    def ids(self, success: bool | None = None) -> list[int]:
        if success is None:
            rows = self.db.execute("SELECT id FROM trajectories ORDER BY id")
        else:
            rows = self.db.execute("SELECT id FROM trajectories WHERE success=? ORDER BY id", (int(success),))
        return [r[0] for r in rows]

    def latest_mixed_family(self) -> str | None:
        """The task family with the most recent record among those with both successes and failures."""
        row = self.db.execute(
            "SELECT family, max(id) FROM trajectories GROUP BY family HAVING sum(success)>0 AND sum(1-success)>0 "
            "ORDER BY max(id) DESC LIMIT 1").fetchone()
        return None if row is None else row[0]

    def family_outcomes(self, family: str) -> list[tuple[int, bool]]:
        """(id, success) of a family's records, newest first."""
        rows = self.db.execute("SELECT id, success FROM trajectories WHERE family=? ORDER BY id DESC", (family,))
        return [(r[0], bool(r[1])) for r in rows]
