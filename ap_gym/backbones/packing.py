"""Packing candidate commands after a prompt so that one forward pass scores them all.

Each candidate's first token is predicted by the prompt's last position; the rest by the
candidate's own positions. The candidates are fed one after another, and a 4D mask lets
each candidate token see the prompt and the earlier tokens of its own candidate only;
position ids restart at the prompt's length for each candidate. The result equals one
forward pass per candidate (``tests/backbones/test_hf.py`` checks it) at a fraction of
the cost.

:func:`pack` and :func:`candidate_mask` serve one prompt over its KV cache;
:func:`lane_batch` serves several lanes, each row ``[new prompt tokens | candidates]``
over that lane's cache, the caches stacked and left-padded (:func:`stack_caches`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ap_gym.backbones.kv_cache import PrefixCache

__all__ = ["LaneRow", "candidate_mask", "lane_batch", "pack", "stack_caches", "to_additive", "token_chunks"]


def token_chunks(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Indices ``0..n-1`` in order, cut into runs whose lengths sum to at most ``budget``
    tokens (an item longer than the budget has a run of its own): the passes of a packed
    scoring call."""
    chunks: list[list[int]] = []
    size = 0
    for i, length in enumerate(lengths):
        if chunks and chunks[-1] and size + length <= budget:
            chunks[-1].append(i)
            size += length
        else:
            chunks.append([i])
            size = length
    return chunks


def pack(cand_ids: Sequence[Sequence[int]], chunk: Sequence[int], prefix: int,
         whole: bool = False) -> tuple[list[int], list[int], list[tuple[int, int]]]:
    """The fed tokens (every candidate but its last token, or all of it with ``whole``:
    then the last position predicts what follows), their positions, and each
    candidate's ``(offset, length)`` in the feed."""
    tokens: list[int] = []
    positions: list[int] = []
    spans: list[tuple[int, int]] = []
    for i in chunk:
        feed = list(cand_ids[i]) if whole else list(cand_ids[i][:-1])
        spans.append((len(tokens), len(feed)))
        tokens += feed
        positions += range(prefix, prefix + len(feed))
    return tokens, positions, spans


def to_additive(allowed: Any, dtype: Any) -> Any:
    """A boolean "may attend" mask as the additive float mask transformers expects."""
    import torch

    mask = torch.zeros(allowed.shape, dtype=dtype)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask


def candidate_mask(spans: Sequence[tuple[int, int]], prefix: int, n: int, dtype: Any, device: Any) -> Any:
    """``(n, prefix + n)``: every fed token sees the prompt and its own candidate's earlier tokens."""
    import torch

    allowed = torch.zeros(n, prefix + n, dtype=torch.bool, device=device)
    allowed[:, :prefix] = True
    for off, length in spans:
        for j in range(length):
            allowed[off + j, prefix + off: prefix + off + j + 1] = True
    mask = torch.zeros(allowed.shape, dtype=dtype, device=device)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask


@dataclass
class LaneRow:
    """One lane's request inside a batched scoring pass."""

    index: int
    key: Any
    cache: PrefixCache
    ids: list[int]
    common: int
    cand_ids: list[list[int]]

    @property
    def new(self) -> int:
        """Prompt tokens this lane computes now (the rest come from its cache)."""
        return len(self.ids) - self.common

    @property
    def width(self) -> int:
        return self.new + sum(len(c) - 1 for c in self.cand_ids)


@dataclass(frozen=True)
class LaneBatch:
    tokens: Any
    targets: Any
    positions: Any
    allowed: Any
    longest: int


def lane_batch(group: Sequence[LaneRow], pad: int) -> LaneBatch:
    """Tensors for one pass over several lanes: tokens, targets, positions and the mask.

    New prompt tokens attend causally among themselves; a candidate token attends to
    every new prompt token and the earlier tokens of its own candidate; each row sees
    its own cached positions only (the others' are left padding).
    """
    import torch

    batch, width = len(group), max(r.width for r in group)
    longest = max(r.common for r in group)
    tokens = torch.full((batch, width), pad, dtype=torch.long)
    targets = torch.zeros((batch, width), dtype=torch.long)
    positions = torch.zeros((batch, width), dtype=torch.long)
    # segment per row position: -1 new prompt token, k candidate k, unique for padding
    segments = -2 - torch.arange(width).repeat(batch, 1)
    new_len = torch.tensor([r.new for r in group])
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
    q = torch.arange(width)
    starts_at = torch.tensor([longest - r.common for r in group])
    past = (torch.arange(longest)[None, None, :] >= starts_at[:, None, None]).expand(batch, width, longest)
    key_is_new = q[None, None, :] < new_len[:, None, None]
    query_is_new = q[None, :, None] < new_len[:, None, None]
    causal = q[None, None, :] <= q[None, :, None]
    same = segments[:, :, None] == segments[:, None, :]
    own = (key_is_new & (causal | ~query_is_new)) | (same & causal)
    return LaneBatch(tokens, targets, positions, torch.cat([past, own], dim=2), longest)


def stack_caches(group: Sequence[LaneRow], num_layers: int, model_config: Any, longest: int) -> Any:
    """The lanes' KV caches in one ``DynamicCache``, left-padded to ``longest`` positions."""
    import torch
    import torch.nn.functional as F
    from transformers import DynamicCache

    stacked = DynamicCache(config=model_config)
    if not longest:
        return stacked
    other = next(r for r in group if r.common)
    for layer in range(num_layers):
        ks, vs = [], []
        for r in group:
            if r.common:
                k, v = r.cache.kv.layers[layer].keys, r.cache.kv.layers[layer].values
            else:  # a lane with no cache yet: zero-length, shaped like the others
                shape = other.cache.kv.layers[layer].keys
                k = shape.new_zeros((1, shape.shape[1], 0, shape.shape[3]))
                v = k.clone()
            ks.append(F.pad(k, (0, 0, longest - r.common, 0)))
            vs.append(F.pad(v, (0, 0, longest - r.common, 0)))
        stacked.update(torch.cat(ks), torch.cat(vs), layer)
    return stacked
