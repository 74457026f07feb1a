"""The abstraction store: synthesised text with its provenance (the records it came from
and its parents: the stored abstractions in those records' prompts), usage counts,
scores and flags. Anti-Persistence leaves it empty; every other design that synthesises
writes here, and the error-reproduction audit reads it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ap_gym.memory.table import EmbeddedTable

__all__ = ["Abstraction", "AbstractionStore"]


@dataclass(frozen=True)
class Abstraction:
    """A stored abstraction with its provenance and bookkeeping."""

    id: int
    text: str
    kind: str
    iteration: int
    active: bool
    uses: int
    successes: int
    score: float
    flags: dict[str, Any]
    sources: list[int]
    parents: list[int]


class AbstractionStore(EmbeddedTable):
    """Rules, summaries, skills and reflections, each with sources and parents.

    The embedding of an abstraction is that of the task it was synthesised for, so it is
    retrieved for similar tasks. Only active abstractions are retrieved.
    """

    table = "abstractions"
    where = "WHERE active=1"

    def add(self, *, text: str, kind: str, embedding: np.ndarray, iteration: int,
            sources: Sequence[int] = (), parents: Sequence[int] = (), flags: dict[str, Any] | None = None) -> int:
        self.db.writable()
        if not kind or not kind.isidentifier():
            raise ValueError(f"an abstraction's kind is a word (rule, skill, reflection, ...), not {kind!r}")

        def provenance(aid: int) -> None:
            self.db.conn.executemany("INSERT OR IGNORE INTO abstraction_sources VALUES (?,?)",
                                     [(aid, s) for s in sources])
            self.db.conn.executemany("INSERT OR IGNORE INTO abstraction_parents VALUES (?,?)",
                                     [(aid, p) for p in parents])

        return self._insert({"text": text, "kind": kind, "iteration": iteration, "flags": json.dumps(flags or {})},
                            embedding, provenance)

    def get(self, ids: Sequence[int]) -> list[Abstraction]:
        """The abstractions with these ids (active or not), in the order given."""
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        by_id = {a.id: a for a in self._read(f"WHERE id IN ({marks})", f"WHERE abstraction_id IN ({marks})", list(ids))}
        return [by_id[i] for i in ids if i in by_id]

    def all(self, include_inactive: bool = False) -> list[Abstraction]:
        """Every abstraction (reads the whole table: for reports, audits and tests)."""
        return self._read("" if include_inactive else "WHERE active=1", "", [])

    def _read(self, where: str, link_where: str, args: list[Any]) -> list[Abstraction]:
        rows = self.db.execute(f"SELECT * FROM abstractions {where} ORDER BY id", args).fetchall()
        sources: dict[int, list[int]] = {}
        parents: dict[int, list[int]] = {}
        for a, t in self.db.execute(
                f"SELECT abstraction_id, trajectory_id FROM abstraction_sources {link_where} ORDER BY 1, 2", args):
            sources.setdefault(a, []).append(t)
        for a, p in self.db.execute(
                f"SELECT abstraction_id, parent_id FROM abstraction_parents {link_where} ORDER BY 1, 2", args):
            parents.setdefault(a, []).append(p)
        return [Abstraction(r["id"], r["text"], r["kind"], r["iteration"], bool(r["active"]), r["uses"],
                            r["successes"], r["score"], json.loads(r["flags"]), sources.get(r["id"], []),
                            parents.get(r["id"], [])) for r in rows]

    def ids(self, kind: str | None = None, not_below: tuple[int, float] | None = None) -> list[int]:
        """Active abstractions' ids, in order: of one ``kind``, and without those that have
        at least ``not_below[0]`` uses and a score below ``not_below[1]``."""
        where: list[str] = ["active=1"]
        args: list[Any] = []
        if kind is not None:
            where.append("kind=?")
            args.append(kind)
        if not_below is not None:
            where.append("NOT (uses>=? AND score<?)")
            args += [*not_below]
        rows = self.db.execute(f"SELECT id FROM abstractions WHERE {' AND '.join(where)} ORDER BY id", args)
        return [r[0] for r in rows]

    def scores(self) -> list[tuple[int, int, float]]:
        """(id, uses, score) of every active abstraction, in order (for maintenance)."""
        return [(r[0], r[1], r[2]) for r in
                self.db.execute("SELECT id, uses, score FROM abstractions WHERE active=1 ORDER BY id")]

    def record_use(self, ids: Sequence[int], success: bool) -> None:
        """Count a use of each abstraction and update its score, (successes+1)/(uses+2)."""
        self.db.writable()
        with self.db.lock, self.db.conn:
            for aid in ids:
                self.db.execute(
                    "UPDATE abstractions SET uses=uses+1, successes=successes+?,"
                    " score=(successes+?+1.0)/(uses+1+2.0) WHERE id=?", (int(success), int(success), aid))

    def deactivate(self, ids: Sequence[int], reason: str) -> None:
        """Prune: deactivated abstractions stay on disk (provenance) but are never retrieved."""
        self.db.writable()
        with self.db.lock, self.db.conn:
            for aid in ids:
                self.db.execute(
                    "UPDATE abstractions SET active=0, flags=json_set(flags, '$.pruned', ?) WHERE id=?", (reason, aid))
        self.invalidate()
