from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from ap_gym.errors import StoreError
from ap_gym.memory import AbstractionStore, ExactIndex, MemoryDB, OutcomeLog, TrajectoryStore


def unit(*v):
    a = np.asarray(v, dtype=np.float32)
    return a / np.linalg.norm(a)


def add_record(store, task="t", success=True, vec=(1, 0, 0), abstraction_ids=()):
    return store.add(task_id=task, family="f", instruction=f"do {task}", steps=[{"action": "look", "observation": "o", "reward": 0}],
                     success=success, score=1.0 if success else 0.0, embedding=unit(*vec), iteration=0,
                     abstraction_ids=abstraction_ids)


def sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_exact_index_top_k_with_filter_and_stable_ties():
    index = ExactIndex(2)
    index.add(np.array([1, 2, 3, 4]), np.stack([unit(1, 0), unit(0, 1), unit(1, 0), unit(1, 1)]))
    ids, sims = index.search(unit(1, 0), 3)
    assert list(ids) == [1, 3, 4] and sims[0] == pytest.approx(1.0)
    ids, _ = index.search(unit(1, 0), 2, allowed=np.array([2, 4]))
    assert list(ids) == [4, 2]


def test_stores_round_trip_and_provenance(tmp_path):
    db = MemoryDB(tmp_path / "m.sqlite", embedding_dim=3, embedder="e")
    trajectories, log, abstractions = TrajectoryStore(db), OutcomeLog(db), AbstractionStore(db)
    r1 = add_record(trajectories, "a", True, (1, 0, 0))
    r2 = add_record(trajectories, "b", False, (0, 1, 0))
    a1 = abstractions.add(text="rule 1", kind="rule", embedding=unit(1, 0, 0), iteration=0, sources=[r1])
    r3 = add_record(trajectories, "c", True, (1, 0.1, 0), abstraction_ids=[a1])
    a2 = abstractions.add(text="rule 2", kind="rule", embedding=unit(1, 0, 0), iteration=1, sources=[r3], parents=[a1])
    log.append(embedding=unit(1, 0, 0), mode="none", reward=1.0, family="f", instruction="x" * 500,
               success=True, synthesis_calls=0, trajectory_id=r3)
    assert [i for i, _ in trajectories.nearest(unit(1, 0, 0), 2)] == [r1, r3]
    assert [i for i, _ in trajectories.nearest(unit(1, 0, 0), 5, trajectories.ids(success=False))] == [r2]
    assert trajectories.get([r3])[0].abstraction_ids == [a1]
    stored = {a.id: a for a in abstractions.all()}
    assert stored[a2].parents == [a1] and stored[a2].sources == [r3] and stored[a1].parents == []
    assert len(log.entries()[0].instruction) == 200
    abstractions.record_use([a1], True)
    abstractions.record_use([a1], False)
    a = abstractions.get([a1])[0]
    assert (a.uses, a.successes, a.score) == (2, 1, pytest.approx(0.5))
    abstractions.deactivate([a1], "test")
    assert [a.id for a in abstractions.all()] == [a2] and len(abstractions) == 2
    db.close()


def test_readonly_is_frozen_and_leaves_the_file_unchanged(tmp_path):
    path = tmp_path / "m.sqlite"
    db = MemoryDB(path, embedding_dim=3)
    add_record(TrajectoryStore(db))
    db.close()
    before = sha(path)
    ro = MemoryDB(path, readonly=True, embedding_dim=3)
    store = TrajectoryStore(ro)
    assert len(store) == 1 and store.nearest(unit(1, 0, 0), 1)
    with pytest.raises(StoreError, match="read-only"):
        add_record(store)
    ro.close()
    assert sha(path) == before


def test_corrupt_file_is_refused_and_untouched(tmp_path):
    path = tmp_path / "m.sqlite"
    path.write_bytes(b"this is not a database" * 100)
    before = sha(path)
    with pytest.raises(StoreError, match="not a usable SQLite database.*move it aside"):
        MemoryDB(path, embedding_dim=3)
    assert sha(path) == before


def test_foreign_database_is_refused(tmp_path):
    path = tmp_path / "other.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (name TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="not an ap-gym memory"):
        MemoryDB(path, embedding_dim=3)


def test_newer_schema_is_refused_and_data_kept(tmp_path):
    path = tmp_path / "m.sqlite"
    db = MemoryDB(path, embedding_dim=3)
    add_record(TrajectoryStore(db))
    db.set_meta("schema_version", "99")
    db.close()
    with pytest.raises(StoreError, match="newer ap-gym.*Upgrade"):
        MemoryDB(path, embedding_dim=3)
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT count(*) FROM trajectories").fetchone()[0] == 1


def test_a_schema_version_that_is_no_number_is_named_as_damage(tmp_path):
    path = tmp_path / "m.sqlite"
    db = MemoryDB(path, embedding_dim=3)
    add_record(TrajectoryStore(db))
    db.set_meta("schema_version", "two")
    db.close()
    with pytest.raises(StoreError, match="damaged: its schema_version is 'two'"):
        MemoryDB(path, embedding_dim=3)
    assert sqlite3.connect(path).execute("SELECT count(*) FROM trajectories").fetchone()[0] == 1


def test_wrong_embedding_dimension(tmp_path):
    path = tmp_path / "m.sqlite"
    db = MemoryDB(path, embedding_dim=3, embedder="mini")
    store = TrajectoryStore(db)
    add_record(store)
    with pytest.raises(StoreError, match="dimension 2.*holds dimension 3.*mini"):
        store.add(task_id="x", family="f", instruction="i", steps=[], success=True, score=1.0,
                  embedding=unit(1, 0), iteration=0)
    db.close()
    with pytest.raises(StoreError, match="dimension 384"):
        MemoryDB(path, embedding_dim=384)
    assert len(TrajectoryStore(MemoryDB(path, embedding_dim=3))) == 1


def test_backup_and_restore(tmp_path):
    db = MemoryDB(tmp_path / "m.sqlite", embedding_dim=3)
    store = TrajectoryStore(db)
    add_record(store)
    db.backup(tmp_path / "snap.sqlite")
    add_record(store, "two")
    db.close()
    MemoryDB.restore(tmp_path / "snap.sqlite", tmp_path / "m.sqlite")
    assert len(TrajectoryStore(MemoryDB(tmp_path / "m.sqlite", embedding_dim=3))) == 1


def _healthy(path, rows=3):
    db = MemoryDB(path, embedding_dim=3)
    store = TrajectoryStore(db)
    for i in range(rows):
        add_record(store, f"t{i}")
    db.close()
    return path


@pytest.mark.parametrize(("damage", "message"), [
    ("DROP TABLE outcome_log", "table outcome_log is missing"),
    ("DROP TABLE meta; CREATE TABLE meta (k TEXT, v TEXT); INSERT INTO meta VALUES ('app', 'x')", "damaged"),
    ("ALTER TABLE trajectories DROP COLUMN mode", "trajectories lacks mode"),
])
def test_structural_damage_is_a_store_error(tmp_path, damage, message):
    path = _healthy(tmp_path / "m.sqlite")
    conn = sqlite3.connect(path)
    conn.executescript(damage)
    conn.close()
    before = sha(path)
    for readonly in (False, True):
        with pytest.raises(StoreError, match=message):
            MemoryDB(path, readonly=readonly, embedding_dim=3)
    assert sha(path) == before


def test_flipped_bits_never_escape_as_raw_sqlite_errors(tmp_path):
    path = _healthy(tmp_path / "m.sqlite", rows=200)
    data = bytearray(path.read_bytes())
    for offset in range(4096 + 100, len(data), 997):  # every page but the header's
        data[offset] ^= 0xFF
    path.write_bytes(bytes(data))
    try:
        db = MemoryDB(path, embedding_dim=3)
        store = TrajectoryStore(db)
        store.get(store.ids())
        store.nearest(unit(1, 0, 0), 3)
    except StoreError as e:
        assert "restore it from a run snapshot" in str(e) or "move it aside" in str(e)
    # (sqlite3 errors of any other kind would fail this test)


def test_a_read_only_directory_is_named_as_such(tmp_path, monkeypatch):
    import os

    path = _healthy(tmp_path / "m.sqlite")
    monkeypatch.setattr(os, "access", lambda p, mode: mode != os.W_OK)  # root ignores permissions
    with pytest.raises(StoreError, match="read-only.*not modified"):
        MemoryDB(path, embedding_dim=3)
    monkeypatch.undo()
    assert len(TrajectoryStore(MemoryDB(path, embedding_dim=3))) == 3


def test_rows_added_by_another_handle_are_found(tmp_path):
    path = _healthy(tmp_path / "m.sqlite", rows=2)
    mine, theirs = MemoryDB(path, embedding_dim=3), MemoryDB(path, embedding_dim=3)
    store = TrajectoryStore(mine)
    assert len(store.nearest(unit(0, 0, 1), 5)) == 2  # index built
    new = add_record(TrajectoryStore(theirs), "new", vec=(0, 0, 1))
    assert store.nearest(unit(0, 0, 1), 1)[0][0] == new and len(store) == 3
    mine.close()
    theirs.close()


def test_a_frozen_open_sees_rows_still_in_the_wal_and_writes_nothing(tmp_path):
    path = tmp_path / "m.sqlite"
    writer = MemoryDB(path, embedding_dim=3, ann_threshold=2)
    store = TrajectoryStore(writer)
    for i in range(4):
        add_record(store, f"t{i}")  # committed, still in the WAL: the writer stays open
    assert Path(f"{path}-wal").stat().st_size > 0
    frozen = MemoryDB(path, readonly=True, embedding_dim=3, ann_threshold=2)
    ro = TrajectoryStore(frozen)
    assert len(ro) == 4 and len(ro.nearest(unit(1, 0, 0), 4)) == 4  # an HNSW index built in memory
    frozen.close()
    assert not list(tmp_path.glob("*.faiss*"))
    writer.close()


KILL_AT_META = """
import os, signal, sqlite3, sys
import ap_gym.memory.db as db

class Killing(sqlite3.Connection):  # SIGKILL once the schema's tables exist, before their meta rows
    def executemany(self, sql, *args, **kwargs):
        if "INSERT INTO meta" in sql:
            os.kill(os.getpid(), signal.SIGKILL)
        return super().executemany(sql, *args, **kwargs)

real = sqlite3.connect
db.sqlite3 = type("sqlite3", (), {"connect": staticmethod(lambda *a, **k: real(*a, factory=Killing, **k)),
                                  "Row": sqlite3.Row, "DatabaseError": sqlite3.DatabaseError})
db.MemoryDB(sys.argv[1], embedding_dim=4)
"""


def test_a_kill_while_the_memory_is_created_never_blocks_a_resume(tmp_path):
    """Issue 42 item 2: a SIGKILL between the schema and its meta rows left tables, an empty
    meta and a hot journal, and every resume failed ('belongs to None, not ap-gym')."""
    import subprocess
    import sys

    path = tmp_path / "memory.sqlite"
    done = subprocess.run([sys.executable, "-c", KILL_AT_META, str(path)], capture_output=True, timeout=120)
    assert done.returncode == -9, done.stderr.decode()[-2000:]
    db = MemoryDB(path, embedding_dim=4)  # the resume
    assert db.meta("app") == "ap-gym memory" and db.dim == 4
    TrajectoryStore(db).add(task_id="t/0", family="f", instruction="do it", steps=[], success=True, score=1.0,
                            embedding=np.ones(4, dtype=np.float32), iteration=0)
    db.close()


def test_a_memory_an_older_ap_gym_left_half_created_is_finished(tmp_path):
    """Files an older ap-gym left that way (every table, all empty, no meta row) hold nothing:
    their creation is finished; a file with rows but no meta is still refused."""
    from ap_gym.memory.db import _SCHEMA

    path = tmp_path / "memory.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(_SCHEMA)
    conn.close()
    db = MemoryDB(path, embedding_dim=4)
    assert db.meta("app") == "ap-gym memory"
    db.close()
    other = tmp_path / "other.sqlite"
    conn = sqlite3.connect(other)
    conn.executescript(_SCHEMA + "INSERT INTO outcome_log VALUES (1, x'00', 'none', 0, 'f', 'i', 0, 0, NULL);")
    conn.close()
    with pytest.raises(StoreError, match="not ap-gym"):
        MemoryDB(other, embedding_dim=4)


def test_a_memory_left_with_only_some_of_its_tables_and_no_meta_is_finished(tmp_path):
    """Round 4's own interrupted store: 4 of the schema's tables, all empty, an empty meta,
    still stopped every resume with 'belongs to None'."""
    import re

    from ap_gym.memory.db import _SCHEMA, _expected_columns

    statements = [s.strip() for s in _SCHEMA.split(";") if s.strip()]
    tables = [s for s in statements if s.upper().startswith("CREATE TABLE")]
    keep = [s for s in tables if re.search(r"CREATE TABLE (?:IF NOT EXISTS )?meta\b", s)] + \
        [s for s in tables if not re.search(r"CREATE TABLE (?:IF NOT EXISTS )?meta\b", s)][:3]
    path = tmp_path / "memory.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(";\n".join(keep) + ";")
    conn.close()
    assert len(keep) < len(_expected_columns())
    db = MemoryDB(path, embedding_dim=4)  # the resume
    assert db.meta("app") == "ap-gym memory"
    TrajectoryStore(db).add(task_id="t/0", family="f", instruction="do it", steps=[], success=True, score=1.0,
                            embedding=np.ones(4, dtype=np.float32), iteration=0)
    db.close()


def test_closing_a_database_twice_does_nothing_the_second_time(tmp_path):
    """A run stopped between a memory's closing its database and opening the next one
    closes it again on the way out: that second close must not raise."""
    db = MemoryDB(tmp_path / "m.sqlite", embedding_dim=3)
    db.close()
    db.close()
    assert db.closed
    with pytest.raises(sqlite3.ProgrammingError):  # closed for real: nothing reads through it
        db.conn.execute("SELECT 1")
