"""Randomness derived from names, never from order: one function for every derived seed.

A training sample, a random policy's episode, a bandit's exploration draw and a sampled
completion each get a generator (or a seed) computed from the run's seed and what they
are for (the task, the iteration, the step). So a result never depends on which episodes
ran before it: resume, worker count and execution order change nothing.
"""

from __future__ import annotations

import hashlib
import random

__all__ = ["derived_rng", "derived_seed"]


def derived_seed(*parts: object, bits: int = 64) -> int:
    """A ``bits``-bit integer fixed by ``parts`` (SHA-256 of their ``|``-joined text)."""
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[: (bits + 7) // 8], "big") & ((1 << bits) - 1)


def derived_rng(*parts: object) -> random.Random:
    """A generator seeded by :func:`derived_seed` of ``parts``."""
    return random.Random(derived_seed(*parts))
