"""Similarity search over unit-length embeddings, behind a small interface.

Exact cosine top-k in numpy is right for the stores' usual size (thousands of rows);
an approximate index can replace :class:`ExactIndex` without touching the stores.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

__all__ = ["ExactIndex", "VectorIndex"]


@runtime_checkable
class VectorIndex(Protocol):
    """Top-k by cosine similarity (vectors are L2-normalised, so a dot product)."""

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None: ...

    def search(self, query: np.ndarray, k: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]: ...

    def __len__(self) -> int: ...


class ExactIndex:
    """Brute-force cosine top-k; ``allowed`` restricts the search to some ids."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._ids = np.zeros(0, dtype=np.int64)
        self._vecs = np.zeros((0, dim), dtype=np.float32)

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        vectors = np.asarray(vectors, dtype=np.float32).reshape(-1, self.dim)
        self._ids = np.concatenate([self._ids, np.asarray(ids, dtype=np.int64)])
        self._vecs = np.concatenate([self._vecs, vectors])

    def search(self, query: np.ndarray, k: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The ids and similarities of the ``k`` nearest rows, most similar first.

        Ties are broken by id (older first) so results never depend on insertion order.
        """
        if len(self._ids) == 0 or k <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        ids, vecs = self._ids, self._vecs
        if allowed is not None:
            keep = np.isin(ids, allowed)
            ids, vecs = ids[keep], vecs[keep]
            if len(ids) == 0:
                return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        sims = vecs @ np.asarray(query, dtype=np.float32).reshape(self.dim)
        order = np.lexsort((ids, -sims))[:k]
        return ids[order], sims[order]
