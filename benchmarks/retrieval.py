"""Top-k retrieval at 10k, 100k and 1M records: HNSW (FAISS) against exact search.

For each size: build both indexes on the same vectors, then time single top-5 and
top-10 queries (mean and 95th percentile, one query at a time as a policy asks), and
measure recall@k of HNSW against the exact answer and each index's memory. Then the
same through the stores: ``--store-rows`` trajectory records and outcome-log entries
written to a real SQLite memory, the index rebuilt from SQLite on the first query,
queried, written beside the database, and loaded from that file by a read-only
(evaluation) reopen.

The vectors are synthetic and say so: 384-d unit vectors (all-MiniLM-L6-v2's size)
drawn around one centre per 500 records with noise as large as the centre, so a
record's nearest neighbours have cosine ~0.5-0.7 (task embeddings of one family sit in
that range). Embedding a million real instructions with MiniLM would take ~40 minutes
here.

    python benchmarks/retrieval.py [--sizes 10000 100000 1000000] [--queries 200] [--store-rows 100000]
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ap_gym.memory import MemoryDB, OutcomeLog, TrajectoryStore
from ap_gym.memory.index import ExactIndex, HNSWIndex
from benchmarks._bench import abba, emit, machine, spread  # noqa: E402

DIM = 384


def vectors(n: int, rng: np.random.Generator, centres: np.ndarray) -> np.ndarray:
    out = np.empty((n, DIM), dtype=np.float32)
    for start in range(0, n, 100_000):
        m = min(100_000, n - start)
        x = centres[rng.integers(0, len(centres), m)] + rng.standard_normal((m, DIM)).astype(np.float32) / np.sqrt(DIM)
        out[start:start + m] = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


def time_queries(index, queries: np.ndarray, k: int) -> tuple[float, float, list[np.ndarray]]:
    times, answers = [], []
    for q in queries:
        t = time.perf_counter()
        ids, _ = index.search(q, k)
        times.append(time.perf_counter() - t)
        answers.append(ids)
    ms = 1000 * np.array(times)
    return float(ms.mean()), float(np.percentile(ms, 95)), answers


def recall(approx: list[np.ndarray], exact: list[np.ndarray], k: int) -> float:
    return float(np.mean([len(set(a.tolist()) & set(e.tolist())) / k for a, e in zip(approx, exact, strict=True)]))


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def index_level(sizes: list[int], n_queries: int, repeats: int) -> list[str]:
    """Markdown rows: per size and k, both indexes warmed by one pass over the queries,
    then ``repeats`` timed passes in ABBA order (median of the passes' means, p95 over all)."""
    rows = []
    for n in sizes:
        rng = np.random.default_rng(n)
        centres = rng.standard_normal((max(1, n // 500), DIM)).astype(np.float32) / np.sqrt(DIM)
        data, queries = vectors(n, rng, centres), vectors(n_queries, rng, centres)
        ids = np.arange(1, n + 1)
        exact = ExactIndex(DIM)
        exact.add(ids, data)
        t = time.perf_counter()
        hnsw = HNSWIndex(DIM)
        for start in range(0, n, 50_000):
            hnsw.add(ids[start:start + 50_000], data[start:start + 50_000])
        build = time.perf_counter() - t
        for k in (5, 10):
            time_queries(exact, queries, k), time_queries(hnsw, queries, k)  # equal warm-up
            means: dict[str, list[float]] = {"exact": [], "hnsw": []}
            p95s: dict[str, list[float]] = {"exact": [], "hnsw": []}
            answers = {}
            for r in range(repeats):
                for name in (("exact", "hnsw") if abba(r) else ("hnsw", "exact")):
                    mean, p95, got = time_queries(exact if name == "exact" else hnsw, queries, k)
                    means[name].append(mean)
                    p95s[name].append(p95)
                    answers[name] = got
            rows.append(f"| {n:,} | {k} | {spread(means['exact'])} ({max(p95s['exact']):.2f}) | "
                        f"{spread(means['hnsw'], 3)} ({max(p95s['hnsw']):.2f}) | "
                        f"{recall(answers['hnsw'], answers['exact'], k):.3f} | {exact.nbytes() / 2**20:,.0f} | "
                        f"{hnsw.nbytes() / 2**20:,.0f} | {build:.1f} s |")
            print(rows[-1], flush=True)
        del exact, hnsw, data
    return rows


def store_level(rows: int, n_queries: int) -> list[str]:
    out: list[str] = []
    rng = np.random.default_rng(7)
    centres = rng.standard_normal((max(1, rows // 500), DIM)).astype(np.float32) / np.sqrt(DIM)
    data, queries = vectors(rows, rng, centres), vectors(n_queries, rng, centres)
    modes = ("none", "imitation", "strategic", "corrective")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "memory.sqlite"
        db = MemoryDB(path, embedding_dim=DIM, embedder="synthetic")
        trajectories, log = TrajectoryStore(db), OutcomeLog(db)
        t = time.perf_counter()
        with db.conn:
            db.conn.executemany(
                "INSERT INTO trajectories (task_id, family, instruction, steps, success, score, embedding, iteration)"
                " VALUES (?,?,?,?,?,?,?,?)",
                ((f"task{i}", f"family{i % 30}", "an instruction", "[]", i % 2, None, data[i].tobytes(), 0)
                 for i in range(rows)))
            db.conn.executemany(
                "INSERT INTO outcome_log (embedding, mode, reward, family, instruction, success, synthesis_calls)"
                " VALUES (?,?,?,?,?,?,?)",
                ((data[i].tobytes(), modes[i % 4], float(i % 3 == 0), f"family{i % 30}", "i", int(i % 3 == 0), i % 3)
                 for i in range(rows)))
        out.append(f"Stores: {rows:,} trajectory records + {rows} outcome-log entries written to SQLite in "
              f"{time.perf_counter() - t:.1f} s ({path.stat().st_size / 2**30:.2f} GiB).")
        for name, store in (("trajectories", trajectories), ("outcome log", log)):
            t = time.perf_counter()
            store.nearest(queries[0], 10)
            out.append(f"- {name}: index rebuilt from SQLite in {time.perf_counter() - t:.1f} s")
        db.close()
        ro = MemoryDB(path, readonly=True)
        trajectories, log = TrajectoryStore(ro), OutcomeLog(ro)
        for name, store in (("trajectories", trajectories), ("outcome log", log)):
            t = time.perf_counter()
            store.nearest(queries[0], 10)
            load = time.perf_counter() - t
            for q in queries:  # warm-up
                store.nearest(q, 10)
            times = []
            for q in queries:
                t = time.perf_counter()
                store.nearest(q, 10)
                times.append(1000 * (time.perf_counter() - t))
            out.append(f"- {name} (read-only reopen): index loaded from its file in {load:.1f} s; top-10 "
                  f"{np.mean(times):.3f} ms mean, {np.percentile(times, 95):.3f} ms p95 (kind {store._index.kind})")
        from ap_gym.policies.bandit import ModeBandit

        bandit, times = ModeBandit(), []
        for q in queries:  # warm-up
            bandit.exploit(q, log)
        for q in queries:
            t = time.perf_counter()
            bandit.exploit(q, log)
            times.append(1000 * (time.perf_counter() - t))
        out.append(f"- bandit exploit over {rows:,} log entries: {np.mean(times):.2f} ms mean, "
                   f"{np.percentile(times, 95):.2f} ms p95")
        ro.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3, help="timed passes over the queries, ABBA")
    parser.add_argument("--store-rows", type=int, default=100_000, help="0 skips the store measurement")
    args = parser.parse_args()
    lines = [f"384-d synthetic clustered unit vectors; {args.queries} single queries per pass; both indexes warmed "
             f"by one pass, then {args.repeats} passes in ABBA order; ms per query: median of the passes' means "
             "(min-max), the largest p95 in brackets. HNSW M=32, efConstruction=80, efSearch=128.", "",
             "| records | k | exact ms (p95) | HNSW ms (p95) | recall@k | exact MB | HNSW MB | HNSW build |",
             "|---|---|---|---|---|---|---|---|", *index_level(args.sizes, args.queries, args.repeats), "",
             "Target: top-10 over 1M under 10 ms with recall@10 >= 0.95."]
    if args.store_rows:
        lines += ["", *store_level(args.store_rows, args.queries)]
    lines += ["", f"Peak RSS {rss_mb():,.0f} MB."]
    full = max(args.sizes) >= 1_000_000
    emit("retrieval" if full else "retrieval_quick", "`retrieval.py`: HNSW (FAISS) against exact search"
         + ("" if full else f", up to {max(args.sizes):,} records"), "\n".join(lines), machine())

if __name__ == "__main__":
    main()
