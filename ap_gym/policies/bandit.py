"""Anti-Persistence's contextual bandit over guidance modes (spec: "The mode-selection bandit").

The bandit has no state of its own beyond the outcome log: every choice is a function of
the log, the task embedding and a random generator, so snapshotting the database
snapshots the bandit, and a frozen log means a frozen bandit.

Rule, with the spec's defaults:

* neighbourhood: the ``neighbours`` (B̂ = 10) log entries most similar to the task;
* weight of an entry: cosine similarity x ``gamma`` ** age (γ = 0.998), age = number of
  entries logged after it;
* reward of an entry: clip(y - ``lam`` x κ, -1, 1) (λ = 0.05), y the outcome, κ the
  synthesis calls actually made;
* utility of a mode: its weighted mean reward among the neighbours plus
  ``c`` x sqrt(ln N / n_m) (c = 0.5), N and n_m weighted counts (ln N is floored at 0).
  A mode with no weight among the neighbours has no local estimate; it is reached
  through ε-exploration;
* start-up: round-robin (``MODES`` order) until every mode is in the log once; then
  ε-greedy with ``epsilon`` = 0.1 (uniform over modes);
* fallback: when the neighbourhood's mean similarity is below ``rho`` (ρ = 0.7), the
  mode with the best global weighted mean reward (weights γ ** age, all entries).

All of this arithmetic lives here; the outcome log only stores entries and answers
queries (nearest entries, every entry's mode and reward in log order). The global
weighted sums are kept up to date as the log grows, entry by entry, so a million-entry
log costs one pass once rather than one per task.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
from pydantic import Field

from ap_gym.memory.outcomes import LogEntry
from ap_gym.options import Options

__all__ = ["MODES", "BanditConfig", "Choice", "EntryList", "LogView", "ModeBandit", "mode_reward", "sums_from_arrays"]

MODES = ("none", "imitation", "strategic", "corrective")


class BanditConfig(Options):
    """The bandit's parameters, the spec's defaults (see the module docstring)."""

    neighbours: int = Field(default=10, ge=1)
    gamma: float = Field(default=0.998, gt=0.0, le=1.0)
    lam: float = Field(default=0.05, ge=0.0)
    c: float = Field(default=0.5, ge=0.0)
    epsilon: float = Field(default=0.1, ge=0.0, le=1.0)
    rho: float = 0.7


@dataclass(frozen=True)
class Choice:
    """A selected mode and why: ``round_robin``, ``explore``, ``ucb`` or ``fallback``."""

    mode: str
    reason: str
    utilities: dict[str, float | None] = field(default_factory=dict)
    mean_similarity: float | None = None
    neighbour_seqs: tuple[int, ...] = ()


def mode_reward(success: bool, synthesis_calls: int, lam: float = 0.05) -> float:
    """r = clip(y - λκ, -1, 1)."""
    return max(-1.0, min(1.0, float(success) - lam * synthesis_calls))


def sums_from_arrays(codes: np.ndarray, rewards: np.ndarray, names: Sequence[str],
                     gamma: float) -> dict[str, tuple[float, float]]:
    """Per mode: (sum of gamma**age x reward, sum of gamma**age) over the whole log."""
    n = len(codes)
    weights = gamma ** (n - 1 - np.arange(n, dtype=np.float64))
    rewarded = np.bincount(codes, weights=weights * rewards, minlength=len(names))
    total = np.bincount(codes, weights=weights, minlength=len(names))
    return {m: (float(rewarded[i]), float(total[i])) for i, m in enumerate(names)}


class LogView(Protocol):
    """What the bandit reads from an outcome log (an :class:`~ap_gym.memory.OutcomeLog`
    answers it through its similarity index, so a million entries cost milliseconds)."""

    def __len__(self) -> int: ...

    def modes_seen(self) -> set[str]: ...

    def neighbours(self, query: np.ndarray, k: int) -> list[tuple[int, float, str, float, int]]: ...

    def arrays(self) -> tuple[np.ndarray, np.ndarray, list[str]]: ...


class EntryList:
    """A :class:`LogView` over a list of entries in log order (exact, for small logs and tests)."""

    def __init__(self, entries: Sequence[LogEntry]) -> None:
        self.entries = list(entries)

    def __len__(self) -> int:
        return len(self.entries)

    def modes_seen(self) -> set[str]:
        return {e.mode for e in self.entries}

    def neighbours(self, query: np.ndarray, k: int) -> list[tuple[int, float, str, float, int]]:
        n = len(self.entries)
        sims = np.stack([e.embedding for e in self.entries]) @ np.asarray(query, dtype=np.float32)
        order = np.lexsort((np.arange(n), -sims))[:k]
        return [(int(i), float(sims[i]), self.entries[i].mode, self.entries[i].reward, self.entries[i].seq)
                for i in order]

    def arrays(self) -> tuple[np.ndarray, np.ndarray, list[str]]:
        names = list(dict.fromkeys(e.mode for e in self.entries))
        codes = np.array([names.index(e.mode) for e in self.entries], dtype=np.int64)
        return codes, np.array([e.reward for e in self.entries], dtype=np.float64), names


def _view(log: LogView | Sequence[LogEntry]) -> LogView:
    return EntryList(log) if isinstance(log, Sequence) else log


class _GlobalSums:
    """Recency-weighted reward sums per mode over a whole log, kept up to date as it grows.

    Computed in one pass the first time a log is seen; each entry appended later ages the
    sums by γ and adds its reward, so a long log is read once.
    """

    def __init__(self, gamma: float) -> None:
        self.gamma = gamma
        self._log: LogView | None = None
        self._seen = 0
        self._sums: dict[str, list[float]] = {}

    def __call__(self, log: LogView) -> dict[str, tuple[float, float]]:
        codes, rewards, names = log.arrays()
        n = len(codes)
        if self._log is not log or n < self._seen:
            self._log, self._seen = log, n
            self._sums = {m: list(v) for m, v in sums_from_arrays(codes, rewards, names, self.gamma).items()}
        for j in range(self._seen, n):  # every older entry ages by one
            for pair in self._sums.values():
                pair[0] *= self.gamma
                pair[1] *= self.gamma
            pair = self._sums.setdefault(names[int(codes[j])], [0.0, 0.0])
            pair[0] += float(rewards[j])
            pair[1] += 1.0
        self._seen = n
        return {m: (v[0], v[1]) for m, v in self._sums.items()}


class ModeBandit:
    def __init__(self, config: BanditConfig | None = None, modes: Sequence[str] = MODES) -> None:
        self.config = config or BanditConfig()
        self.modes = tuple(modes)
        self._global = _GlobalSums(self.config.gamma)

    def select(self, query: np.ndarray, log: LogView | Sequence[LogEntry], rng: random.Random) -> Choice:
        """Choose a mode for a task with embedding ``query`` given the outcome log."""
        log = _view(log)
        tried = log.modes_seen()
        for mode in self.modes:
            if mode not in tried:
                return Choice(mode, "round_robin")
        explore = rng.random() < self.config.epsilon
        if explore:
            return Choice(rng.choice(self.modes), "explore")
        return self.exploit(query, log)

    def exploit(self, query: np.ndarray, log: LogView | Sequence[LogEntry]) -> Choice:
        """The deterministic part of the rule: UCB among neighbours, or the global fallback."""
        cfg = self.config
        log = _view(log)
        n = len(log)
        near = log.neighbours(query, cfg.neighbours)
        seqs = tuple(seq for *_, seq in near)
        mean_sim = float(np.mean([sim for _, sim, *_ in near]))
        if mean_sim < cfg.rho:
            return self._fallback(log, mean_sim, seqs)
        weights: dict[str, float] = dict.fromkeys(self.modes, 0.0)
        sums: dict[str, float] = dict.fromkeys(self.modes, 0.0)
        for position, sim, mode, reward, _ in near:
            w = sim * cfg.gamma ** (n - 1 - position)
            weights[mode] = weights.get(mode, 0.0) + w
            sums[mode] = sums.get(mode, 0.0) + w * reward
        total = sum(w for w in weights.values() if w > 0)
        log_n = max(math.log(total), 0.0) if total > 0 else 0.0
        util: dict[str, float | None] = {}
        for m in self.modes:
            if weights[m] > 0:
                util[m] = sums[m] / weights[m] + cfg.c * math.sqrt(log_n / weights[m])
            else:
                util[m] = None
        known = {m: u for m, u in util.items() if u is not None}
        if not known:  # no neighbour carries weight
            return self._fallback(log, mean_sim, seqs)
        best = max(known, key=lambda m: known[m])  # ties: MODES order
        return Choice(best, "ucb", util, mean_sim, seqs)

    def _fallback(self, log: LogView, mean_sim: float, seqs: tuple[int, ...]) -> Choice:
        """The mode with the best global (all-entries) weighted mean reward."""
        util = self.global_means(log)
        best = max(self.modes, key=lambda m: _or_minus_infinity(util[m]))
        return Choice(best, "fallback", util, mean_sim, seqs)

    def global_means(self, log: LogView | Sequence[LogEntry]) -> dict[str, float | None]:
        sums = self._global(_view(log))
        out: dict[str, float | None] = {}
        for m in self.modes:
            rewarded, total = sums.get(m, (0.0, 0.0))
            out[m] = rewarded / total if total > 0 else None
        return out


def _or_minus_infinity(value: float | None) -> float:
    return -math.inf if value is None else value
