from __future__ import annotations

import numpy as np
import pytest

from ap_gym.memory import MemoryDB, OutcomeLog, TrajectoryStore
from ap_gym.memory.index import AutoIndex, ExactIndex, HNSWIndex, load_index, save_index
from ap_gym.policies.bandit import ModeBandit


def clustered(n: int, dim: int = 32, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((max(1, n // 50), dim))
    x = centers[rng.integers(0, len(centers), n)] + 0.5 * rng.standard_normal((n, dim))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def test_hnsw_finds_the_exact_neighbours_and_honours_allowed():
    data, queries = clustered(4000), clustered(50, seed=1)
    ids = np.arange(10, 4010)
    exact, hnsw = ExactIndex(32), HNSWIndex(32)
    exact.add(ids, data)
    hnsw.add(ids, data)
    recall = np.mean([len(set(exact.search(q, 10)[0]) & set(hnsw.search(q, 10)[0])) / 10 for q in queries])
    assert recall >= 0.95
    allowed = ids[::7]
    for q in queries[:5]:  # a small restriction is searched exactly: identical answers
        e_ids, e_sims = exact.search(q, 5, allowed)
        h_ids, h_sims = hnsw.search(q, 5, allowed)
        assert list(e_ids) == list(h_ids) and np.allclose(e_sims, h_sims, atol=1e-5)
    assert len(hnsw.search(queries[0], 5, np.array([99999]))[0]) == 0


def test_auto_index_moves_to_hnsw_at_its_threshold():
    index = AutoIndex(32, threshold=300)
    data = clustered(400)
    index.add(np.arange(250), data[:250])
    assert index.kind == "exact"
    index.add(np.arange(250, 400), data[250:])
    assert index.kind == "hnsw" and len(index) == 400
    assert index.search(data[399], 1)[0][0] == 399


def test_saved_index_is_used_only_while_its_fingerprint_matches(tmp_path):
    hnsw = HNSWIndex(32)
    hnsw.add(np.arange(100), clustered(100))
    save_index(hnsw, tmp_path / "x.faiss", {"rows": 100})
    assert len(load_index(tmp_path / "x.faiss", {"rows": 100})) == 100
    assert load_index(tmp_path / "x.faiss", {"rows": 101}) is None
    (tmp_path / "x.faiss").write_bytes(b"garbage")
    assert load_index(tmp_path / "x.faiss", {"rows": 100}) is None


def add_rows(store: TrajectoryStore, vecs: np.ndarray) -> None:
    for i, v in enumerate(vecs):
        store.add(task_id=f"t{i}", family="f", instruction="i", steps=[], success=bool(i % 2), score=None,
                  embedding=v, iteration=0)


def test_store_keeps_its_index_beside_sqlite_and_rebuilds_it_when_stale(tmp_path):
    path, vecs = tmp_path / "m.sqlite", clustered(700)
    db = MemoryDB(path, embedding_dim=32, ann_threshold=500)
    store = TrajectoryStore(db)
    add_rows(store, vecs[:600])
    first = store.nearest(vecs[5], 3)
    assert store._index.kind == "hnsw" and first[0][0] == 6  # ids start at 1
    db.close()
    index_file = store.index_path()
    assert index_file.exists()

    ro = MemoryDB(path, readonly=True, ann_threshold=500)  # evaluation: loads the file, same answers
    ro_store = TrajectoryStore(ro)
    again = ro_store.nearest(vecs[5], 3)
    assert [i for i, _ in again] == [i for i, _ in first]
    assert np.allclose([s for _, s in again], [s for _, s in first], atol=1e-5)
    assert [i for i, _ in ro_store.nearest(vecs[5], 2, allowed=[2, 4, 6])][0] == 6
    ro.close()

    db = MemoryDB(path, embedding_dim=32, ann_threshold=500)  # 100 more rows; the file is now stale
    add_rows(TrajectoryStore(db), vecs[600:])
    db.conn.close()  # as if killed: the index file was not rewritten
    ro = MemoryDB(path, readonly=True, ann_threshold=500)
    store = TrajectoryStore(ro)
    assert store.fingerprint()["rows"] == 700
    assert store.nearest(vecs[650], 1)[0][0] == 651  # rebuilt from SQLite
    ro.close()

    index_file.write_bytes(b"not an index")  # a damaged file is rebuilt, never an error
    ro = MemoryDB(path, readonly=True, ann_threshold=500)
    assert TrajectoryStore(ro).nearest(vecs[650], 1)[0][0] == 651
    ro.close()


def test_snapshots_carry_the_index(tmp_path):
    db = MemoryDB(tmp_path / "m.sqlite", embedding_dim=32, ann_threshold=100)
    store = TrajectoryStore(db)
    add_rows(store, clustered(150))
    store.nearest(clustered(1)[0], 1)
    db.backup(tmp_path / "snap" / "memory.sqlite")
    assert (tmp_path / "snap" / "memory.sqlite.trajectories.faiss").exists()
    MemoryDB.restore(tmp_path / "snap" / "memory.sqlite", tmp_path / "copy.sqlite")
    assert (tmp_path / "copy.sqlite.trajectories.faiss").exists()
    db.close()


def test_outcome_log_answers_the_bandit_like_the_entry_list(tmp_path):
    db = MemoryDB(tmp_path / "m.sqlite", embedding_dim=32)
    log = OutcomeLog(db)
    vecs = clustered(60)
    modes = ("none", "imitation", "strategic", "corrective")
    for i, v in enumerate(vecs):
        log.append(embedding=v, mode=modes[i % 4], reward=[1.0, -0.1, 0.0, 0.95][(i * 7) % 4], family="f",
                   instruction="i", success=i % 3 == 0, synthesis_calls=i % 2)
    bandit = ModeBandit()
    for q in clustered(10, seed=3):
        assert bandit.exploit(q, log) == bandit.exploit(q, log.entries())
    assert bandit.global_means(log) == pytest.approx(bandit.global_means(log.entries()))
    assert log.modes_seen() == set(modes) and len(log) == 60
    db.close()


def test_an_index_file_of_another_database_is_never_used(tmp_path):
    """Two databases with the same row counts and ids: each searches its own vectors."""
    import shutil

    def build(path, seed):
        db = MemoryDB(path, embedding_dim=32, ann_threshold=50)
        store = TrajectoryStore(db)
        vecs = clustered(80, seed=seed)
        for v in vecs:
            store.add(task_id="t", family="f", instruction="i", steps=[], success=True, score=1.0, embedding=v,
                      iteration=0)
        store.nearest(vecs[0], 5)  # builds and saves the HNSW file
        db.close()
        return vecs

    vecs_a = build(tmp_path / "a.sqlite", 1)
    vecs_b = build(tmp_path / "b.sqlite", 2)
    for suffix in (".trajectories.faiss", ".trajectories.faiss.json"):  # A's index beside B
        shutil.copyfile(f"{tmp_path / 'a.sqlite'}{suffix}", f"{tmp_path / 'b.sqlite'}{suffix}")
    db = MemoryDB(tmp_path / "b.sqlite", readonly=True, embedding_dim=32, ann_threshold=50)
    store = TrajectoryStore(db)
    exact = ExactIndex(32)
    exact.add(np.arange(1, 81), vecs_b)
    for q in vecs_b[:5]:
        assert [i for i, _ in store.nearest(q, 5)] == list(exact.search(q, 5)[0])
    assert not np.allclose(vecs_a, vecs_b)
    db.close()
