"""Similarity search over unit-length embeddings, behind a small interface.

Exact cosine top-k in numpy is right for the stores' usual size (thousands of rows): it
is exact, deterministic (ties broken by id) and costs ~4 ms a query at 100k rows. Past
``ANN_THRESHOLD`` rows :class:`AutoIndex` moves the vectors into an HNSW graph (FAISS's
``IndexHNSWFlat``), which answers top-10 over a million rows in well under a
millisecond with recall@10 near 1 (``benchmarks/retrieval.py`` measures it against
exact search; FAISS HNSW beat FAISS IVF-Flat and usearch on query time and build time
there, see ``benchmarks/RESULTS.md``).

A search restricted to some ids (``allowed``) is exact over those ids when they are
few (their vectors are read back from the index), and a filtered HNSW search otherwise.

Indexes can be written to a file and read back (:func:`save_index`, :func:`load_index`):
the stores keep one beside their SQLite file once it is large, and rebuild it from
SQLite when it is missing or stale.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = ["ANN_THRESHOLD", "AutoIndex", "ExactIndex", "HNSWIndex", "VectorIndex", "load_index", "save_index"]

#: rows at which :class:`AutoIndex` switches from exact search to HNSW.
ANN_THRESHOLD = 50_000
#: an ``allowed`` restriction this small is searched exactly, even in an HNSW index.
EXACT_FILTER_LIMIT = 20_000

_EMPTY = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32))


@runtime_checkable
class VectorIndex(Protocol):
    """Top-k by cosine similarity (vectors are L2-normalised, so a dot product)."""

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None: ...

    def search(self, query: np.ndarray, k: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]: ...

    def __len__(self) -> int: ...


def _exact_top_k(ids: np.ndarray, vecs: np.ndarray, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    if len(ids) == 0 or k <= 0:
        return _EMPTY
    sims = vecs @ query
    if len(ids) > 4 * k:  # partial selection first: a full sort of 1M rows costs ~100 ms
        part = np.argpartition(-sims, k)[: k]
        # keep every row tied with the k-th so the id tie-break stays exact
        cut = sims[part].min()
        part = np.flatnonzero(sims >= cut)
        ids, sims = ids[part], sims[part]
    order = np.lexsort((ids, -sims))[:k]
    return ids[order], sims[order]


class ExactIndex:
    """Brute-force cosine top-k; ``allowed`` restricts the search to some ids."""

    kind = "exact"

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._ids = np.zeros(0, dtype=np.int64)
        self._vecs = np.zeros((0, dim), dtype=np.float32)
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []

    def __len__(self) -> int:
        return len(self._ids) + sum(len(i) for i, _ in self._pending)

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        # appended in chunks and joined on the next search: adding one row at a time
        # to a large matrix would copy it every time
        vectors = np.asarray(vectors, dtype=np.float32).reshape(-1, self.dim)
        self._pending.append((np.asarray(ids, dtype=np.int64).reshape(-1), vectors))

    def _flush(self) -> None:
        if self._pending:
            self._ids = np.concatenate([self._ids, *(i for i, _ in self._pending)])
            self._vecs = np.concatenate([self._vecs, *(v for _, v in self._pending)])
            self._pending = []

    def vectors(self) -> tuple[np.ndarray, np.ndarray]:
        """All ids and vectors (for moving them into another index)."""
        self._flush()
        return self._ids, self._vecs

    def search(self, query: np.ndarray, k: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The ids and similarities of the ``k`` nearest rows, most similar first.

        Ties are broken by id (older first) so results never depend on insertion order.
        """
        self._flush()
        ids, vecs = self._ids, self._vecs
        if allowed is not None:
            keep = np.isin(ids, allowed)
            ids, vecs = ids[keep], vecs[keep]
        return _exact_top_k(ids, vecs, np.asarray(query, dtype=np.float32).reshape(self.dim), k)

    def nbytes(self) -> int:
        self._flush()
        return int(self._ids.nbytes + self._vecs.nbytes)


class HNSWIndex:
    """Approximate top-k with FAISS's HNSW graph (inner product on unit vectors).

    Args:
        dim: the embedding dimension.
        m: graph degree (FAISS's ``M``); 32 is FAISS's usual choice for 384-d text.
        ef_construction: build-time beam; higher builds slower and finds better links.
        ef_search: query-time beam (at least ``k`` is used); recall rises with it.
    """

    kind = "hnsw"

    def __init__(self, dim: int, *, m: int = 32, ef_construction: int = 80, ef_search: int = 128,
                 _index: Any = None) -> None:
        import faiss

        self.dim = dim
        self.ef_search = ef_search
        if _index is None:
            hnsw = faiss.IndexHNSWFlat(dim, m, faiss.METRIC_INNER_PRODUCT)
            hnsw.hnsw.efConstruction = ef_construction
            _index = faiss.IndexIDMap2(hnsw)
        self._index = _index
        self._id_array: np.ndarray | None = None  # the stored ids, built when a filter needs them

    def __len__(self) -> int:
        return int(self._index.ntotal)

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        vectors = np.ascontiguousarray(np.asarray(vectors, dtype=np.float32).reshape(-1, self.dim))
        self._index.add_with_ids(vectors, ids)
        self._id_array = None  # not copied per add: training adds one row per episode

    def search(self, query: np.ndarray, k: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        import faiss

        if len(self) == 0 or k <= 0:
            return _EMPTY
        q = np.ascontiguousarray(np.asarray(query, dtype=np.float32).reshape(1, self.dim))
        params = faiss.SearchParametersHNSW()  # type: ignore[attr-defined]  # faiss's stubs lack its SWIG classes
        params.efSearch = max(self.ef_search, k)
        if allowed is not None:
            allowed = np.asarray(allowed, dtype=np.int64)
            if self._id_array is None:
                self._id_array = faiss.vector_to_array(self._index.id_map).astype(np.int64)
            present = allowed[np.isin(allowed, self._id_array)]
            if len(present) <= EXACT_FILTER_LIMIT:
                present = np.unique(present)
                vecs = self._index.reconstruct_batch(present) if len(present) else np.zeros((0, self.dim), np.float32)
                return _exact_top_k(present, vecs, q[0], k)
            selector = faiss.IDSelectorBatch(present)
            params.sel = selector
            params.efSearch = max(params.efSearch, 2 * k)
        sims, ids = self._index.search(q, min(k, len(self)), params=params)
        keep = ids[0] >= 0
        ids, sims = ids[0][keep].astype(np.int64), sims[0][keep].astype(np.float32)
        order = np.lexsort((ids, -sims))
        return ids[order], sims[order]

    def nbytes(self) -> int:
        import faiss

        return int(faiss.serialize_index(self._index).nbytes)


class AutoIndex:
    """Exact search while small; HNSW from ``threshold`` rows on (moved over once)."""

    def __init__(self, dim: int, threshold: int = ANN_THRESHOLD, **hnsw: Any) -> None:
        self.dim = dim
        self.threshold = threshold
        self._hnsw_options = hnsw
        self.inner: ExactIndex | HNSWIndex = ExactIndex(dim)

    @property
    def kind(self) -> str:
        return self.inner.kind

    def __len__(self) -> int:
        return len(self.inner)

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        self.inner.add(ids, vectors)
        if isinstance(self.inner, ExactIndex) and len(self.inner) >= self.threshold:
            all_ids, all_vecs = self.inner.vectors()
            hnsw = HNSWIndex(self.dim, **self._hnsw_options)
            hnsw.add(all_ids, all_vecs)
            self.inner = hnsw

    def search(self, query: np.ndarray, k: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        return self.inner.search(query, k, allowed)


def save_index(index: AutoIndex | HNSWIndex, path: str | Path, fingerprint: dict[str, Any]) -> None:
    """Write an HNSW index and the fingerprint of the rows it holds (atomically)."""
    import faiss

    inner = index.inner if isinstance(index, AutoIndex) else index
    if not isinstance(inner, HNSWIndex):
        raise ValueError("only HNSW indexes are saved; exact ones are rebuilt from SQLite in no time")
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    faiss.write_index(inner._index, str(tmp))
    tmp.replace(path)
    meta = path.with_name(path.name + ".json")
    tmp_meta = meta.with_name(meta.name + ".tmp")
    tmp_meta.write_text(json.dumps({"fingerprint": fingerprint, "dim": inner.dim, "ef_search": inner.ef_search}))
    tmp_meta.replace(meta)


def load_index(path: str | Path, fingerprint: dict[str, Any]) -> HNSWIndex | None:
    """The index saved at ``path`` if it holds exactly the rows ``fingerprint`` describes.

    Returns ``None`` when the file is missing, unreadable or stale: the caller rebuilds.
    """
    import faiss

    path = Path(path)
    meta_path = path.with_name(path.name + ".json")
    try:
        meta = json.loads(meta_path.read_text())
        if meta.get("fingerprint") != fingerprint:
            return None
        raw = faiss.read_index(str(path))
    except (OSError, ValueError, RuntimeError):
        return None
    return HNSWIndex(int(meta["dim"]), ef_search=int(meta.get("ef_search", 128)), _index=raw)
