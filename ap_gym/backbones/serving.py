"""What a server needs of an in-process model, beside :class:`~ap_gym.backbones.hf.TransformersBackbone`.

``ap-gym serve`` answers many clients with one model. :class:`PromptScorer` keeps what
belongs to serving and not to a policy's backbone: a KV cache per named session (an
episode's growing prompt prefilled once, never shared with another session), completions
of token-id prompts, and the log-probability of every token of a batch of prompts (what
scoring candidate commands over ``/v1/completions`` needs). It works through the
backbone's public methods (``lock``, ``using``, ``encode_prompt``, ``complete``,
``forward``) and writes nothing into it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from ap_gym.backbones.base import Completion, GenerationConfig, Message
from ap_gym.backbones.kv_cache import PrefixCache, crop
from ap_gym.backbones.packing import candidate_mask, pack, token_chunks

__all__ = ["PromptLogprobs", "PromptScorer"]


@dataclass(frozen=True)
class PromptLogprobs:
    """Per prompt: the log-probability of every token (``None`` for the first), and the
    greedy next token after it."""

    logprobs: list[list[float | None]]
    next_tokens: list[int]


class PromptScorer:
    """Serving over one :class:`~ap_gym.backbones.hf.TransformersBackbone`.

    Args:
        backbone: the model.
        sessions: KV caches kept for named sessions (least recently used dropped first).
    """

    def __init__(self, backbone: Any, sessions: int = 64) -> None:
        self.backbone = backbone
        self.max_sessions = sessions
        self._sessions: OrderedDict[Hashable, PrefixCache] = OrderedDict()

    @property
    def tokenizer(self) -> Any:
        return self.backbone.tokenizer

    @property
    def max_context(self) -> int:
        return int(self.backbone.max_context)

    @property
    def identity(self) -> str:
        return str(self.backbone.identity)

    def _session_cache(self, session: Hashable | None) -> PrefixCache:
        """The session's cache (kept, most recently used last), or a fresh one for ``None``."""
        if session is None:
            return PrefixCache()
        cache = self._sessions.pop(session, None) or PrefixCache()
        self._sessions[session] = cache
        while len(self._sessions) > self.max_sessions:
            self._sessions.popitem(last=False)
        return cache

    def generate(self, messages: Sequence[Message], config: GenerationConfig, *, session: Hashable | None = None,
                 deadline: float | None = None) -> Completion:
        """A chat completion over ``session``'s KV cache (``None``: a cache of its own)."""
        backbone = self.backbone
        with backbone.lock:
            ids, truncated = backbone.encode_prompt(messages, config.max_new_tokens)
            with backbone.using(self._session_cache(session)):
                return backbone.complete(ids, config, deadline, {"truncated_prompt": True} if truncated else {})

    def generate_ids(self, ids: Sequence[int], config: GenerationConfig, *, deadline: float | None = None) -> Completion:
        """A completion of a token-id prompt, sharing no cache; ``extra["token_ids"]`` holds the tokens."""
        backbone = self.backbone
        with backbone.lock, backbone.using(PrefixCache()):
            return backbone.complete(list(ids), config, deadline)

    def prompt_logprobs(self, prompts: Sequence[Sequence[int]], *, max_tokens_per_pass: int = 2048,
                        chunk: int = 512) -> PromptLogprobs:
        """The log-probability of every token of every prompt, sharing no cache.

        Prompts that share a prefix (a chat prompt followed by each candidate command)
        are computed in one pass over the prefix, then packed passes over the suffixes, as
        the backbone's ``score`` does; the result equals one forward pass per prompt.
        """
        import torch

        lists = [list(p) for p in prompts]
        if not lists or any(not p for p in lists):
            raise ValueError("every prompt needs at least one token")
        shortest = min(len(p) for p in lists)
        common = 0
        while common < shortest - 1 and all(p[common] == lists[0][common] for p in lists):
            common += 1
        groups = [(lists[0][:common], list(range(len(lists))))] if common else \
            [(p[:-1], [k]) for k, p in enumerate(lists)]
        logprobs: list[list[float | None]] = [[] for _ in lists]
        next_tokens = [0] * len(lists)
        with self.backbone.lock, torch.inference_mode():
            for prefix, members in groups:
                self._group(prefix, [lists[k][len(prefix):] for k in members], members, logprobs, next_tokens,
                            max_tokens_per_pass, chunk)
        return PromptLogprobs(logprobs, next_tokens)

    def _group(self, prefix: list[int], suffixes: list[list[int]], members: list[int],
               logprobs: list[list[float | None]], next_tokens: list[int], max_tokens_per_pass: int,
               chunk: int) -> None:
        import torch
        from transformers import DynamicCache

        backbone = self.backbone
        cache = DynamicCache(config=backbone.model.config)
        head: list[float | None] = [None]
        last = None
        for start in range(0, len(prefix), chunk):  # chunked prefill, keeping each prefix token's log-probability
            piece = prefix[start:start + chunk]
            logp = torch.log_softmax(backbone.forward(piece, cache).logits[0].float(), -1)
            targets = prefix[start + 1:start + 1 + len(piece)]
            head += logp[torch.arange(len(targets)), torch.tensor(targets, dtype=torch.long)].tolist()
            last = logp[-1]
        for k, suffix in zip(members, suffixes, strict=True):
            first: list[float | None] = [] if last is None else [float(last[suffix[0]])]
            logprobs[k] = head[:len(prefix)] + first if prefix else [None]
        for batch in token_chunks([len(s) for s in suffixes], max_tokens_per_pass):
            tokens, positions, spans = pack(suffixes, batch, len(prefix), whole=True)
            mask = candidate_mask(spans, len(prefix), len(tokens), backbone.model.dtype, backbone.device)
            out = backbone.forward(tokens, cache, attention_mask=mask[None, None],
                                   position_ids=torch.tensor([positions], device=backbone.device))
            crop(cache, len(prefix))
            logp = torch.log_softmax(out.logits[0].float(), -1)
            for i, (off, length) in zip(batch, spans, strict=True):
                suffix, k = suffixes[i], members[i]
                logprobs[k] += [float(logp[off + j - 1, suffix[j]]) for j in range(1, length)]
                next_tokens[k] = int(torch.argmax(logp[off + length - 1]))
