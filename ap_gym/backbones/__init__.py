"""Language-model backbones and embedders behind small protocols.

* :class:`TransformersBackbone`: any Hugging Face causal LM in-process (default: the
  packaged SmolLM2-135M-Instruct), KV-cache reuse and one-pass candidate scoring.
* :class:`OpenAIBackbone`: any OpenAI-compatible server, ``ap-gym serve`` included.
* :class:`SentenceTransformerEmbedder`: task embeddings (default: all-MiniLM-L6-v2).
"""

from __future__ import annotations

from typing import Any

from ap_gym.backbones.base import (
    Backbone,
    BatchScorer,
    Completion,
    EpisodeCache,
    GenerationConfig,
    Message,
    Scores,
)
from ap_gym.backbones.embedders import Embedder, SentenceTransformerEmbedder
from ap_gym.backbones.hf import TransformersBackbone
from ap_gym.backbones.openai import OpenAIBackbone
from ap_gym.backbones.tiny import tiny_llama

__all__ = [
    "Backbone",
    "BatchScorer",
    "Completion",
    "Embedder",
    "EpisodeCache",
    "GenerationConfig",
    "Message",
    "OpenAIBackbone",
    "Scores",
    "SentenceTransformerEmbedder",
    "TransformersBackbone",
    "make_backbone",
    "tiny_llama",
]


def make_backbone(spec: str | None = None, **kwargs: Any) -> Backbone:
    """A backbone from a short spec, as used by configs and the CLI.

    ``None`` or ``"default"``: the packaged SmolLM2; ``"tiny"``: a tiny random Llama
    (tests, harness speed; ``"tiny:seed=N"`` another one); ``"http://..."``: an OpenAI-compatible server; anything else:
    a model id, directory or GGUF file for :class:`TransformersBackbone`.
    """
    if spec in (None, "", "default"):
        return TransformersBackbone(**kwargs)
    if spec == "tiny" or spec.startswith("tiny:seed="):
        seed = int(spec.partition("=")[2] or 0) if spec != "tiny" else 0
        model, tokenizer = tiny_llama(seed)
        return TransformersBackbone(model, tokenizer=tokenizer, identity=f"tiny-llama(seed={seed})", **kwargs)
    if spec.startswith(("http://", "https://")):
        return OpenAIBackbone(spec, **kwargs)
    return TransformersBackbone(spec, **kwargs)
