"""A table with an embedding column, mirrored in a similarity index: the base of every store."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ap_gym.memory.db import MemoryDB, blob, vector
from ap_gym.memory.index import AutoIndex, load_index, save_index

__all__ = ["EmbeddedTable"]


class EmbeddedTable:
    """A table with an embedding column mirrored in a similarity index.

    The index is built from SQLite on first use. Once the table reaches the ANN
    threshold the index is an HNSW graph, kept in a file beside the database
    (``<db>.<table>.faiss``) with the fingerprint (row count, largest id, id sum) of the
    rows it holds: a missing, unreadable or stale file is rebuilt from SQLite, so the
    database alone stays the whole state.
    """

    table = ""
    id_col = "id"
    where = ""

    def __init__(self, db: MemoryDB) -> None:
        self.db = db
        self._index: AutoIndex | None = None
        self._index_max = 0
        self._dirty = False
        self._count: int | None = None
        db.attach(self)

    def index_path(self, db_path: str | Path | None = None) -> Path:
        return Path(f"{db_path or self.db.path}.{self.table}.faiss")

    def fingerprint(self) -> dict[str, Any]:
        count, max_id, id_sum = self.db.execute(
            f"SELECT count(*), coalesce(max({self.id_col}), 0), coalesce(sum({self.id_col}), 0)"
            f" FROM {self.table} {self.where}").fetchone()
        # the database's own id: an index file of another database with the same counts is not ours
        return {"table": self.table, "rows": count, "max_id": max_id, "id_sum": id_sum,
                "dim": self.db.dim, "embedder": self.db.embedder, "db": self.db.meta("uuid")}

    def _load_index(self) -> AutoIndex:
        with self.db.lock:
            if self._index is not None:
                return self._index
            dim = self.db.dim or 1
            index = AutoIndex(dim, self.db.ann_threshold)
            fingerprint = self.fingerprint()
            self._index_max = int(fingerprint["max_id"])
            if fingerprint["rows"] >= self.db.ann_threshold:
                loaded = load_index(self.index_path(), fingerprint)
                if loaded is not None:
                    index.inner = loaded
                    self._index = index
                    return index
            cursor = self.db.execute(
                f"SELECT {self.id_col}, embedding FROM {self.table} {self.where} ORDER BY {self.id_col}")
            while rows := cursor.fetchmany(50_000):
                vecs = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(len(rows), -1)
                if self.db.dim is None:
                    index = AutoIndex(vecs.shape[1], self.db.ann_threshold)
                    dim = vecs.shape[1]
                index.add(np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows)), vecs)
            self._index = index
            self._dirty = True
            self.persist()
            return index

    def persist(self, db_path: str | Path | None = None) -> None:
        """Write the HNSW index beside the database (or the copy at ``db_path``); best effort."""
        with self.db.lock:
            if self._index is None or self._index.kind != "hnsw" or (db_path is None and not self._dirty):
                return
            if db_path is None and self.db.readonly:  # nothing is written beside a frozen database
                return
            try:
                save_index(self._index, self.index_path(db_path), self.fingerprint())
            except (OSError, RuntimeError):
                return  # a read-only directory: the index is rebuilt next time
            if db_path is None:
                self._dirty = False

    def _insert(self, row: dict[str, Any], embedding: np.ndarray, then: Callable[[int], None] | None = None) -> int:
        """Insert one row and its embedding (and ``then(new_id)`` in the same transaction); index it."""
        self.db.writable()
        vec = self.db.check_vector(embedding)
        columns = [*row, "embedding"]
        with self.db.lock, self.db.conn:
            cur = self.db.execute(
                f"INSERT INTO {self.table} ({', '.join(columns)}) VALUES ({','.join('?' * len(columns))})",
                [*row.values(), blob(vec)])
            assert cur.lastrowid is not None  # an INSERT sets it
            new_id = int(cur.lastrowid)
            if then is not None:
                then(new_id)
        self._added(np.array([new_id]), vec[None])
        return new_id

    def _added(self, ids: np.ndarray, vecs: np.ndarray) -> None:
        if self._index is not None:
            self._index.add(ids, vecs)
            self._dirty = True
            self._index_max = max(self._index_max, int(ids.max()))
        if self._count is not None:
            self._count += len(ids)

    def _catch_up(self) -> None:
        """Index rows another process (or handle) added since the index was built; a frozen
        (read-only, immutable) database cannot change, so it is not asked."""
        if self._index is None or self.db.readonly:
            return
        latest = self.db.execute(f"SELECT coalesce(max({self.id_col}), 0) FROM {self.table}").fetchone()[0]
        if latest <= self._index_max:
            return
        join = "AND" if self.where else "WHERE"
        rows = self.db.execute(f"SELECT {self.id_col}, embedding FROM {self.table} {self.where} {join} "
                               f"{self.id_col} > ? ORDER BY {self.id_col}", (self._index_max,)).fetchall()
        if rows:
            vecs = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(len(rows), -1)
            self._index.add(np.array([r[0] for r in rows], dtype=np.int64), vecs)
            self._dirty = True
            self._grew()
        self._index_max, self._count = int(latest), None

    def _grew(self) -> None:
        """Rows appeared from elsewhere: drop caches derived from the table."""

    def invalidate(self) -> None:
        with self.db.lock:
            self._index = None
            self._count = None

    def nearest(self, query: np.ndarray, k: int, allowed: Iterable[int] | None = None) -> list[tuple[int, float]]:
        query = self.db.check_vector(query)
        allowed_arr = None if allowed is None else np.fromiter(allowed, dtype=np.int64)
        index = self._load_index()
        with self.db.lock:
            self._catch_up()
        ids, sims = index.search(query, k, allowed_arr)
        return [(int(i), float(s)) for i, s in zip(ids, sims, strict=True)]

    def embeddings(self, ids: Sequence[int]) -> np.ndarray:
        """The stored embeddings of rows ``ids``, in that order."""
        marks = ",".join("?" * len(ids))
        rows = dict(self.db.execute(f"SELECT {self.id_col}, embedding FROM {self.table} "
                                    f"WHERE {self.id_col} IN ({marks})", list(ids)).fetchall())
        return np.stack([vector(rows[i]) for i in ids]) if ids else np.zeros((0, self.db.dim or 0), np.float32)

    def __len__(self) -> int:
        if self._count is None:
            self._count = int(self.db.execute(f"SELECT count(*) FROM {self.table}").fetchone()[0])
        return self._count
