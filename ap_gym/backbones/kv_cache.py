"""The prompt's KV cache, kept between calls so that a growing prompt prefills only what is new.

Within an episode an agent's prompt grows by appending. A :class:`PrefixCache` holds the
KV cache of the last prompt and the token ids it covers; before the next call it keeps
the longest common prefix with the new prompt (at least one token is always computed,
since the last position's logits are needed) and drops the rest. A cache remembers the
version of the weights it was computed with: after a training step, nothing of it is
reused (scores must not come from the old weights).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["PrefixCache", "crop"]


def crop(cache: Any, keep: int) -> None:
    """Keep the first ``keep`` positions (transformers 5 crops by a negative count)."""
    drop = cache.get_seq_length() - keep
    if drop > 0:
        cache.crop(-drop)


class PrefixCache:
    """A transformers ``DynamicCache`` and the token ids it holds."""

    def __init__(self) -> None:
        self.kv: Any = None
        self.ids: list[int] = []
        self.version: Any = None

    def common_prefix(self, ids: Sequence[int]) -> int:
        """How many leading tokens of ``ids`` the cache already holds (never all of them)."""
        if self.kv is None:
            return 0
        limit = min(len(self.ids), len(ids) - 1)
        common = 0
        while common < limit and self.ids[common] == ids[common]:
            common += 1
        return common

    def prepare(self, ids: Sequence[int], model_config: Any, reuse: bool = True, version: Any = None) -> int:
        """Keep the common prefix with ``ids`` (or start empty, always when the weights'
        ``version`` differs from the one the cache was computed with); returns its length."""
        from transformers import DynamicCache

        common = self.common_prefix(ids) if reuse and version == self.version else 0
        self.version = version
        if common == 0:
            self.kv = DynamicCache(config=model_config)
        else:
            crop(self.kv, common)
        self.ids = list(ids[:common])
        return common

    def reset(self) -> None:
        self.kv, self.ids, self.version = None, [], None
