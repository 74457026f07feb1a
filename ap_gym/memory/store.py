"""One SQLite database per policy state, holding the three stores of the spec.

* :class:`TrajectoryStore`: task, family, instruction, steps, outcome, embedding,
  iteration, and the guidance mode and abstraction ids that were in the prompt.
* :class:`OutcomeLog`: the bandit's feedback, one entry per eligible training episode,
  with a sequence number for recency.
* :class:`AbstractionStore`: synthesised text with its kind, the records it came from,
  its parents (abstractions in the prompts of those records), creation iteration,
  usage counts and scores, and operational flags.

The database uses WAL mode, foreign keys and a schema version. In evaluation mode it is
opened read-only and immutable: nothing an evaluation episode does can write to it, and
the file stays byte-for-byte the same. A corrupt or foreign file, a newer schema or an
embedding of the wrong dimension raises :class:`~ap_gym.errors.StoreError`, which says
what to do; nothing already stored is touched.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ap_gym.errors import StoreError
from ap_gym.memory.index import ANN_THRESHOLD, AutoIndex, load_index, save_index

__all__ = [
    "SCHEMA_VERSION",
    "Abstraction",
    "AbstractionStore",
    "LogEntry",
    "MemoryDB",
    "OutcomeLog",
    "Record",
    "TrajectoryStore",
]

SCHEMA_VERSION = 1
APP_ID = "ap-gym memory"

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE trajectories (
    id INTEGER PRIMARY KEY,
    task_id TEXT NOT NULL, family TEXT NOT NULL, instruction TEXT NOT NULL,
    steps TEXT NOT NULL, success INTEGER NOT NULL, score REAL,
    embedding BLOB NOT NULL, iteration INTEGER NOT NULL,
    mode TEXT, abstraction_ids TEXT NOT NULL DEFAULT '[]'
);
CREATE TABLE outcome_log (
    seq INTEGER PRIMARY KEY,
    embedding BLOB NOT NULL, mode TEXT NOT NULL, reward REAL NOT NULL,
    family TEXT NOT NULL, instruction TEXT NOT NULL, success INTEGER NOT NULL,
    synthesis_calls INTEGER NOT NULL,
    trajectory_id INTEGER REFERENCES trajectories(id)
);
CREATE TABLE abstractions (
    id INTEGER PRIMARY KEY,
    text TEXT NOT NULL, kind TEXT NOT NULL, embedding BLOB NOT NULL,
    iteration INTEGER NOT NULL, active INTEGER NOT NULL DEFAULT 1,
    uses INTEGER NOT NULL DEFAULT 0, successes INTEGER NOT NULL DEFAULT 0,
    score REAL NOT NULL DEFAULT 0.5, flags TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE abstraction_sources (
    abstraction_id INTEGER NOT NULL REFERENCES abstractions(id),
    trajectory_id INTEGER NOT NULL REFERENCES trajectories(id),
    PRIMARY KEY (abstraction_id, trajectory_id)
);
CREATE TABLE abstraction_parents (
    abstraction_id INTEGER NOT NULL REFERENCES abstractions(id),
    parent_id INTEGER NOT NULL REFERENCES abstractions(id),
    PRIMARY KEY (abstraction_id, parent_id)
);
"""


def _expected_columns() -> dict[str, set[str]]:
    """Table -> columns of the current schema (read off ``_SCHEMA`` once)."""
    if not _COLUMNS:
        conn = sqlite3.connect(":memory:")
        conn.executescript(_SCHEMA)
        for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall():
            _COLUMNS[table] = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
        conn.close()
    return _COLUMNS


_COLUMNS: dict[str, set[str]] = {}


def _index_suffixes() -> list[str]:
    return [f".{t}.faiss{ext}" for t in ("trajectories", "outcome_log", "abstractions") for ext in ("", ".json")]


def _blob(v: np.ndarray) -> bytes:
    return np.asarray(v, dtype=np.float32).tobytes()


def _vec(b: bytes) -> np.ndarray:
    return np.frombuffer(b, dtype=np.float32)


class MemoryDB:
    """The SQLite file behind a policy's memory.

    Args:
        path: the database file; created with the current schema when missing.
        readonly: open immutable and read-only (evaluation mode).
        embedding_dim: the dimension every embedding must have; fixed at creation.
        embedder: the embedder's identity, recorded at creation and shown in errors.
    """

    def __init__(self, path: str | Path, *, readonly: bool = False, embedding_dim: int | None = None,
                 embedder: str = "?", ann_threshold: int = ANN_THRESHOLD) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self.ann_threshold = ann_threshold
        self._lock = threading.RLock()
        self._stores: list[_Embedded] = []
        existed = self.path.exists() and self.path.stat().st_size > 0
        if readonly and not existed:
            raise StoreError(f"{self.path} does not exist; a read-only memory needs a database")
        if not readonly:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if not os.access(self.path.parent, os.W_OK) or (existed and not os.access(self.path, os.W_OK)):
                raise StoreError(f"cannot write the memory {self.path}: its directory or the file is read-only. "
                                 "Give write access, or open it read-only (evaluation); the file was not modified.")
        try:
            if readonly:
                self._fold_wal()  # an immutable open would not see committed rows still in the WAL
                uri = f"file:{self.path.resolve()}?mode=ro&immutable=1"
                self.conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
            else:
                self.conn = sqlite3.connect(self.path, check_same_thread=False)
            self.conn.row_factory = sqlite3.Row
            self.conn.execute("PRAGMA foreign_keys=ON")
            tables = {r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        except sqlite3.DatabaseError as e:
            raise StoreError(
                f"{self.path} is not a usable SQLite database ({e}). It may be corrupt or not a "
                "memory file: move it aside and start a new memory; it was not modified."
            ) from e
        try:
            if not tables:
                if readonly:
                    raise StoreError(f"{self.path} is empty; train a policy before evaluating it")
                self._create(embedding_dim, embedder)
            else:
                self._check(tables)
            if not readonly:
                self.conn.execute("PRAGMA journal_mode=WAL")
                if self.meta("uuid") is None:  # written by an older ap-gym
                    self.set_meta("uuid", uuid.uuid4().hex)
            self.dim = int(self.meta("embedding_dim")) if self.meta("embedding_dim") else embedding_dim
            self.embedder = self.meta("embedder") or embedder
            if embedding_dim is not None and self.dim is not None and embedding_dim != self.dim:
                raise StoreError(self._dim_message(embedding_dim))
        except sqlite3.DatabaseError as e:
            self.conn.close()
            raise StoreError(f"{self.path} is damaged ({e}); restore it from a run snapshot or move it aside; "
                             "it was not modified") from e
        except BaseException:
            self.conn.close()
            raise

    def _fold_wal(self) -> None:
        """Fold a non-empty WAL into the file before an immutable read-only open."""
        wal = Path(f"{self.path}-wal")
        if not wal.exists() or wal.stat().st_size == 0:
            return
        try:
            conn = sqlite3.connect(self.path)
            try:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                conn.close()
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{self.path} has committed rows in its WAL ({wal}) that could not be folded in "
                             f"({e}); open it once with write access (training mode) to checkpoint it") from e

    def execute(self, sql: str, args: Any = ()) -> sqlite3.Cursor:
        """Run a query; a damaged database raises :class:`StoreError` saying what to do."""
        try:
            return self.conn.execute(sql, args)
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{self.path} is damaged ({e}); restore it from a run snapshot "
                             "(snapshots/iter<k>/memory.sqlite) or move it aside") from e

    def _create(self, dim: int | None, embedder: str) -> None:
        with self.conn:
            self.conn.executescript(_SCHEMA)
            self.conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            self.conn.executemany("INSERT INTO meta VALUES (?, ?)", [
                ("app", APP_ID), ("schema_version", str(SCHEMA_VERSION)), ("embedder", embedder),
                ("embedding_dim", "" if dim is None else str(dim)), ("uuid", uuid.uuid4().hex),
            ])

    def _check(self, tables: set[str]) -> None:
        if "meta" not in tables:
            raise StoreError(
                f"{self.path} is an SQLite database but not an ap-gym memory (tables: "
                f"{', '.join(sorted(tables))}). Use another path; the file was not modified."
            )
        if self.meta("app") != APP_ID:
            raise StoreError(f"{self.path} belongs to {self.meta('app')!r}, not ap-gym; use another path")
        version = int(self.meta("schema_version") or 0)
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} was written by a newer ap-gym (schema {version} > {SCHEMA_VERSION}). "
                "Upgrade ap-gym to read it; the file was not modified."
            )
        expected = _expected_columns()
        for table, columns in expected.items():
            have = {r[1] for r in self.conn.execute(f"PRAGMA table_info({table})")}
            if not have:
                raise StoreError(f"{self.path} is damaged: its table {table} is missing; restore it from a run "
                                 "snapshot or move it aside (it was not modified)")
            if missing := columns - have:
                raise StoreError(f"{self.path} is damaged: table {table} lacks {', '.join(sorted(missing))}; "
                                 "restore it from a run snapshot or move it aside (it was not modified)")
        self.conn.execute("SELECT count(*) FROM trajectories").fetchone()

    def _dim_message(self, got: int) -> str:
        return (f"embedding of dimension {got}, but {self.path} holds dimension {self.dim} "
                f"(made with {self.embedder}). Use the same embedder, or a new memory path.")

    def meta(self, key: str) -> str | None:
        row = self.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return None if row is None else row[0]

    def set_meta(self, key: str, value: str) -> None:
        self._writable()
        with self._lock, self.conn:
            self.conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def check_vector(self, v: np.ndarray) -> np.ndarray:
        v = np.asarray(v, dtype=np.float32).reshape(-1)
        if self.dim is None and not self.readonly:
            self.dim = len(v)
            self.set_meta("embedding_dim", str(self.dim))
        if len(v) != self.dim:
            raise StoreError(self._dim_message(len(v)))
        return v

    def _writable(self) -> None:
        if self.readonly:
            raise StoreError(f"{self.path} is open read-only (evaluation mode): memory is frozen")

    def checkpoint(self) -> None:
        """Fold the WAL into the main file, so the file alone is the whole state."""
        if not self.readonly:
            with self._lock:
                self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        for store in self._stores:
            store.persist()

    def backup(self, dest: str | Path) -> Path:
        """A consistent copy of the database at ``dest`` (SQLite's backup API)."""
        dest = Path(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_suffix(dest.suffix + ".tmp")
        tmp.unlink(missing_ok=True)
        with self._lock:
            target = sqlite3.connect(tmp)
            try:
                self.conn.backup(target)
            finally:
                target.close()
        tmp.replace(dest)
        for suffix in _index_suffixes():
            Path(f"{dest}{suffix}").unlink(missing_ok=True)
        for store in self._stores:  # the copy's index files, so a snapshot loads without a rebuild
            store.persist(dest)
        return dest

    def close(self) -> None:
        with self._lock:
            self.checkpoint()
            self.conn.close()

    @staticmethod
    def validate(path: str | Path, embedding_dim: int | None = None) -> None:
        """Raise :class:`StoreError` unless ``path`` is a memory this ap-gym can read with
        embeddings of ``embedding_dim``; the file is opened read-only and not changed."""
        MemoryDB(path, readonly=True, embedding_dim=embedding_dim).close()

    @staticmethod
    def stage(snapshot: str | Path, dest: str | Path, embedding_dim: int | None = None) -> Path:
        """A proven copy of ``snapshot`` beside ``dest``, ready for :meth:`swap_in`.

        The snapshot is checked first (corrupt, foreign, newer schema, other embedding
        dimension: :class:`StoreError` naming the snapshot), then copied, then the copy is
        checked; ``dest`` is not touched.
        """
        snapshot, dest = Path(snapshot), Path(dest)
        try:
            MemoryDB.validate(snapshot, embedding_dim)
        except StoreError as e:
            raise StoreError(f"the snapshot {snapshot} cannot be loaded ({e}); the live memory {dest} was not "
                             "modified") from None
        tmp = dest.with_name(dest.name + ".incoming")
        shutil.copyfile(snapshot, tmp)
        try:
            MemoryDB.validate(tmp, embedding_dim)
        except StoreError:
            tmp.unlink(missing_ok=True)
            raise
        return tmp

    @staticmethod
    def swap_in(staged: str | Path, dest: str | Path, snapshot: str | Path | None = None) -> None:
        """Replace ``dest`` (closed) by a staged copy in one rename; its WAL files and index
        files go, the snapshot's index files come along."""
        dest = Path(dest)
        for suffix in ("-wal", "-shm", *_index_suffixes()):
            Path(str(dest) + suffix).unlink(missing_ok=True)
        Path(staged).replace(dest)
        if snapshot is not None:
            for suffix in _index_suffixes():
                if Path(f"{snapshot}{suffix}").exists():
                    shutil.copyfile(f"{snapshot}{suffix}", f"{dest}{suffix}")

    @staticmethod
    def restore(snapshot: str | Path, dest: str | Path, embedding_dim: int | None = None) -> None:
        """Replace ``dest`` (closed) with a proven copy of ``snapshot``; see :meth:`stage`."""
        MemoryDB.swap_in(MemoryDB.stage(snapshot, dest, embedding_dim), dest, snapshot)


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


class _Embedded:
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
        db._stores.append(self)

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
        with self.db._lock:
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
        with self.db._lock:
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
        self.db._writable()
        vec = self.db.check_vector(embedding)
        columns = [*row, "embedding"]
        with self.db._lock, self.db.conn:
            cur = self.db.execute(
                f"INSERT INTO {self.table} ({', '.join(columns)}) VALUES ({','.join('?' * len(columns))})",
                [*row.values(), _blob(vec)])
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
        with self.db._lock:
            self._index = None
            self._count = None

    def nearest(self, query: np.ndarray, k: int, allowed: Iterable[int] | None = None) -> list[tuple[int, float]]:
        query = self.db.check_vector(query)
        allowed_arr = None if allowed is None else np.fromiter(allowed, dtype=np.int64)
        index = self._load_index()
        with self.db._lock:
            self._catch_up()
        ids, sims = index.search(query, k, allowed_arr)
        return [(int(i), float(s)) for i, s in zip(ids, sims, strict=True)]

    def __len__(self) -> int:
        if self._count is None:
            self._count = int(self.db.execute(f"SELECT count(*) FROM {self.table}").fetchone()[0])
        return self._count


class TrajectoryStore(_Embedded):
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

    def embeddings(self, ids: Sequence[int]) -> np.ndarray:
        rows = dict(self.db.execute(
            f"SELECT id, embedding FROM trajectories WHERE id IN ({','.join('?' * len(ids))})", list(ids)).fetchall())
        return np.stack([_vec(rows[i]) for i in ids])

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


@dataclass(frozen=True)
class LogEntry:
    """One outcome-log entry: bandit feedback for one training episode."""

    seq: int
    embedding: np.ndarray
    mode: str
    reward: float
    family: str
    instruction: str
    success: bool
    synthesis_calls: int
    trajectory_id: int | None = None


class OutcomeLog(_Embedded):
    """The bandit's feedback, searchable by task embedding.

    The bandit asks three things of it, each cheap at a million entries: which modes
    were ever tried, the k entries nearest a task (through the similarity index), and
    every entry's mode and reward in log order (numpy arrays, read once and extended on
    append). What it computes from them is the bandit's
    (:mod:`ap_gym.policies.bandit`).
    """

    table = "outcome_log"
    id_col = "seq"

    def __init__(self, db: MemoryDB) -> None:
        super().__init__(db)
        self._arrays: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._mode_names: list[str] = []

    def append(self, *, embedding: np.ndarray, mode: str, reward: float, family: str, instruction: str,
               success: bool, synthesis_calls: int, trajectory_id: int | None = None) -> int:
        seq = self._insert({
            "mode": mode, "reward": float(reward), "family": family, "instruction": instruction[:200],
            "success": int(success), "synthesis_calls": int(synthesis_calls), "trajectory_id": trajectory_id,
        }, embedding)
        if self._arrays is not None:
            seqs, codes, rewards = self._arrays
            self._arrays = (np.append(seqs, seq), np.append(codes, self._code(mode)), np.append(rewards, float(reward)))
        return seq

    def _code(self, mode: str) -> int:
        if mode not in self._mode_names:
            self._mode_names.append(mode)
        return self._mode_names.index(mode)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """Every entry's mode code and reward in log order, and the code -> mode names."""
        with self.db._lock:
            if self._arrays is None:
                seqs, codes, rewards = [], [], []
                for seq, mode, reward in self.db.execute("SELECT seq, mode, reward FROM outcome_log ORDER BY seq"):
                    seqs.append(seq)
                    codes.append(self._code(mode))
                    rewards.append(reward)
                self._arrays = (np.array(seqs, dtype=np.int64), np.array(codes, dtype=np.int64),
                                np.array(rewards, dtype=np.float64))
            return self._arrays[1], self._arrays[2], list(self._mode_names)

    def modes_seen(self) -> set[str]:
        codes, _, names = self.arrays()
        return {names[c] for c in np.unique(codes)}

    def neighbours(self, query: np.ndarray, k: int) -> list[tuple[int, float, str, float, int]]:
        """The ``k`` entries most similar to ``query``: (position in the log, similarity, mode, reward, seq)."""
        hits = self.nearest(query, k)
        self.arrays()
        assert self._arrays is not None
        seqs, codes, rewards = self._arrays
        positions = np.searchsorted(seqs, [seq for seq, _ in hits])
        return [(int(p), sim, self._mode_names[int(codes[p])], float(rewards[p]), seq)
                for p, (seq, sim) in zip(positions, hits, strict=True)]

    def entries(self) -> list[LogEntry]:
        """Every entry, in log order (reads the whole log: for reports and tests)."""
        rows = self.db.execute("SELECT * FROM outcome_log ORDER BY seq").fetchall()
        return [LogEntry(r["seq"], _vec(r["embedding"]), r["mode"], r["reward"], r["family"],
                         r["instruction"], bool(r["success"]), r["synthesis_calls"], r["trajectory_id"])
                for r in rows]

    def invalidate(self) -> None:
        super().invalidate()
        self._arrays = None

    def _grew(self) -> None:
        self._arrays = None


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


class AbstractionStore(_Embedded):
    """Rules, summaries, skills and reflections, each with sources and parents.

    The embedding of an abstraction is that of the task it was synthesised for, so it is
    retrieved for similar tasks. Only active abstractions are retrieved.
    """

    table = "abstractions"
    where = "WHERE active=1"
    KINDS = ("rule", "summary", "skill", "reflection", "guidance", "frozen")

    def add(self, *, text: str, kind: str, embedding: np.ndarray, iteration: int,
            sources: Sequence[int] = (), parents: Sequence[int] = (), flags: dict[str, Any] | None = None) -> int:
        self.db._writable()
        if kind not in self.KINDS:
            raise ValueError(f"kind must be one of {self.KINDS}, not {kind!r}")

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
        where, args = ["active=1"], []
        if kind is not None:
            where.append("kind=?")
            args.append(kind)
        if not_below is not None:
            where.append("NOT (uses>=? AND score<?)")
            args += list(not_below)
        rows = self.db.execute(f"SELECT id FROM abstractions WHERE {' AND '.join(where)} ORDER BY id", args)
        return [r[0] for r in rows]

    def scores(self) -> list[tuple[int, int, float]]:
        """(id, uses, score) of every active abstraction, in order (for maintenance)."""
        return [(r[0], r[1], r[2]) for r in
                self.db.execute("SELECT id, uses, score FROM abstractions WHERE active=1 ORDER BY id")]

    def record_use(self, ids: Sequence[int], success: bool) -> None:
        """Count a use of each abstraction and update its score, (successes+1)/(uses+2)."""
        self.db._writable()
        with self.db._lock, self.db.conn:
            for aid in ids:
                self.db.execute(
                    "UPDATE abstractions SET uses=uses+1, successes=successes+?,"
                    " score=(successes+?+1.0)/(uses+1+2.0) WHERE id=?", (int(success), int(success), aid))

    def deactivate(self, ids: Sequence[int], reason: str) -> None:
        """Prune: deactivated abstractions stay on disk (provenance) but are never retrieved."""
        self.db._writable()
        with self.db._lock, self.db.conn:
            for aid in ids:
                self.db.execute(
                    "UPDATE abstractions SET active=0, flags=json_set(flags, '$.pruned', ?) WHERE id=?", (reason, aid))
        self.invalidate()

    def set_flag(self, aid: int, key: str, value: Any) -> None:
        self.db._writable()
        with self.db._lock, self.db.conn:
            self.db.execute("UPDATE abstractions SET flags=json_set(flags, ?, json(?)) WHERE id=?",
                                 (f"$.{key}", json.dumps(value), aid))


