"""The SQLite file behind a policy's memory: schema, lifecycle, snapshots.

One database per policy state holds the three stores of the spec (:mod:`~ap_gym.memory.trajectories`,
:mod:`~ap_gym.memory.outcomes`, :mod:`~ap_gym.memory.abstractions`). It uses WAL mode,
foreign keys and a schema version. In evaluation mode it is opened read-only and
immutable: nothing an evaluation episode does can write to it, and the file stays
byte-for-byte the same. A corrupt or foreign file, a newer schema or an embedding of the
wrong dimension raises :class:`~ap_gym.errors.StoreError`, which says what to do;
nothing already stored is touched.

Stores use the database through its public side only: ``lock`` (one re-entrant lock for
every writer of the file), ``writable()``, ``execute()``, ``check_vector()`` and
``attach()`` (a store whose index files travel with checkpoints and backups).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import threading
import uuid
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ap_gym.errors import StoreError
from ap_gym.memory.index import ANN_THRESHOLD

__all__ = ["APP_ID", "SCHEMA_VERSION", "IndexedTable", "MemoryDB", "blob", "vector"]


class IndexedTable(Protocol):
    """What the database asks of a store it carries: write its index files beside a file."""

    def persist(self, db_path: str | Path | None = None) -> None: ...

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


def blob(v: np.ndarray) -> bytes:
    return np.asarray(v, dtype=np.float32).tobytes()


def vector(b: bytes) -> np.ndarray:
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
        self.lock = threading.RLock()
        self.closed = False
        self._tables: list[Any] = []
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
            elif not readonly and self._interrupted_creation(tables):
                self._finish_creation(tables, embedding_dim, embedder)
            else:
                self._check(tables)
            if not readonly:
                self.conn.execute("PRAGMA journal_mode=WAL")
                if self.meta("uuid") is None:  # written by an older ap-gym
                    self.set_meta("uuid", uuid.uuid4().hex)
            stored_dim = self.meta("embedding_dim")
            self.dim = int(stored_dim) if stored_dim else embedding_dim
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

    def _create(self, dim: int | None, embedder: str, *, tables: bool = True) -> None:
        """The schema and its meta rows in one transaction: a process killed while creating
        the file leaves a hot journal that SQLite rolls back on the next open (an empty file,
        created again), never tables without their meta."""
        self.conn.executescript("BEGIN; " + (_SCHEMA if tables else "") + f"PRAGMA user_version={SCHEMA_VERSION};")
        try:
            self.conn.executemany("INSERT INTO meta VALUES (?, ?)", [
                ("app", APP_ID), ("schema_version", str(SCHEMA_VERSION)), ("embedder", embedder),
                ("embedding_dim", "" if dim is None else str(dim)), ("uuid", uuid.uuid4().hex)])
            self.conn.commit()
        except BaseException:
            self.conn.rollback()
            raise

    def _finish_creation(self, tables: set[str], dim: int | None, embedder: str) -> None:
        """Finish what an interrupted creation left (see :meth:`_interrupted_creation`)."""
        if set(_expected_columns()) - tables:  # some tables never made it: start the empty file anew
            for table in sorted(tables):
                self.conn.execute(f"DROP TABLE IF EXISTS {table}")  # noqa: S608 (names read from the file)
            self.conn.commit()
            self._create(dim, embedder)
        else:
            self._create(dim, embedder, tables=False)

    def _interrupted_creation(self, tables: set[str]) -> bool:
        """An older ap-gym created the tables and their meta rows in separate transactions (and
        the tables one by one): a kill in between left some or all of the schema's tables, all
        empty, and no meta. That file holds nothing: its creation is finished instead of
        refused ("belongs to None")."""
        schema = set(_expected_columns())
        if "meta" not in tables or tables - schema - {"sqlite_sequence"}:
            return False  # a table of something else: not ours to finish
        if self.conn.execute("SELECT COUNT(*) FROM meta").fetchone()[0]:
            return False
        return all(self.conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] == 0  # noqa: S608 (schema names)
                   for t in tables & schema)

    def _check(self, tables: set[str]) -> None:
        if "meta" not in tables:
            raise StoreError(
                f"{self.path} is an SQLite database but not an ap-gym memory (tables: "
                f"{', '.join(sorted(tables))}). Use another path; the file was not modified."
            )
        if self.meta("app") != APP_ID:
            raise StoreError(f"{self.path} belongs to {self.meta('app')!r}, not ap-gym; use another path")
        try:
            version = int(self.meta("schema_version") or 0)
        except (TypeError, ValueError):
            raise StoreError(f"{self.path} is damaged: its schema_version is {self.meta('schema_version')!r}, not a "
                             "number. Restore the file from a copy (a run's snapshots hold one per iteration); "
                             "it was not modified") from None
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

    def attach(self, table: IndexedTable) -> None:
        """A store on this database: its index files are written with checkpoints and backups."""
        self._tables.append(table)

    def meta(self, key: str) -> str | None:
        row = self.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return None if row is None else row[0]

    def set_meta(self, key: str, value: str) -> None:
        self.writable()
        with self.lock, self.conn:
            self.conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def check_vector(self, v: np.ndarray) -> np.ndarray:
        v = np.asarray(v, dtype=np.float32).reshape(-1)
        if self.dim is None and not self.readonly:
            self.dim = len(v)
            self.set_meta("embedding_dim", str(self.dim))
        if len(v) != self.dim:
            raise StoreError(self._dim_message(len(v)))
        return v

    def writable(self) -> None:
        """Raise :class:`StoreError` when the database is open read-only (evaluation)."""
        if self.readonly:
            raise StoreError(f"{self.path} is open read-only (evaluation mode): memory is frozen")

    def checkpoint(self) -> None:
        """Fold the WAL into the main file, so the file alone is the whole state."""
        if not self.readonly:
            with self.lock:
                self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        for store in self._tables:
            store.persist()

    def backup(self, dest: str | Path) -> Path:
        """A consistent copy of the database at ``dest`` (SQLite's backup API)."""
        dest = Path(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_suffix(dest.suffix + ".tmp")
        tmp.unlink(missing_ok=True)
        with self.lock:
            target = sqlite3.connect(tmp)
            try:
                self.conn.backup(target)
            finally:
                target.close()
        tmp.replace(dest)
        for suffix in _index_suffixes():
            Path(f"{dest}{suffix}").unlink(missing_ok=True)
        for store in self._tables:  # the copy's index files, so a snapshot loads without a rebuild
            store.persist(dest)
        return dest

    def close(self) -> None:
        """Fold the WAL in and close; a second call does nothing. A run stopped (Ctrl-C)
        between a memory's closing its database and opening the next one closes it again on
        the way out, and that must not replace the reason the run stopped."""
        with self.lock:
            if self.closed:
                return
            try:
                self.checkpoint()
            finally:
                self.conn.close()
                self.closed = True

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
