"""The bandit's outcome log: one entry per eligible training episode, searchable by task embedding."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ap_gym.memory.db import MemoryDB, vector
from ap_gym.memory.table import EmbeddedTable

__all__ = ["LogEntry", "OutcomeLog"]


@dataclass(frozen=True)
class LogEntry:
    """One outcome-log entry: bandit feedback for one training episode."""

    seq: int
    embedding: np.ndarray
    mode: str
    reward: float
    family: str
    instruction: str
    success: bool
    synthesis_calls: int
    trajectory_id: int | None = None


class OutcomeLog(EmbeddedTable):
    """The bandit's feedback, searchable by task embedding.

    The bandit asks three things of it, each cheap at a million entries: which modes
    were ever tried, the k entries nearest a task (through the similarity index), and
    every entry's mode and reward in log order (numpy arrays, read once and extended on
    append). What it computes from them is the bandit's
    (:mod:`ap_gym.policies.bandit`).
    """

    table = "outcome_log"
    id_col = "seq"

    def __init__(self, db: MemoryDB) -> None:
        super().__init__(db)
        self._arrays: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._mode_names: list[str] = []

    def append(self, *, embedding: np.ndarray, mode: str, reward: float, family: str, instruction: str,
               success: bool, synthesis_calls: int, trajectory_id: int | None = None) -> int:
        seq = self._insert({
            "mode": mode, "reward": float(reward), "family": family, "instruction": instruction[:200],
            "success": int(success), "synthesis_calls": int(synthesis_calls), "trajectory_id": trajectory_id,
        }, embedding)
        if self._arrays is not None:
            seqs, codes, rewards = self._arrays
            self._arrays = (np.append(seqs, seq), np.append(codes, self._code(mode)), np.append(rewards, float(reward)))
        return seq

    def _code(self, mode: str) -> int:
        if mode not in self._mode_names:
            self._mode_names.append(mode)
        return self._mode_names.index(mode)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """Every entry's mode code and reward in log order, and the code -> mode names."""
        with self.db.lock:
            if self._arrays is None:
                seqs, codes, rewards = [], [], []
                for seq, mode, reward in self.db.execute("SELECT seq, mode, reward FROM outcome_log ORDER BY seq"):
                    seqs.append(seq)
                    codes.append(self._code(mode))
                    rewards.append(reward)
                self._arrays = (np.array(seqs, dtype=np.int64), np.array(codes, dtype=np.int64),
                                np.array(rewards, dtype=np.float64))
            return self._arrays[1], self._arrays[2], list(self._mode_names)

    def modes_seen(self) -> set[str]:
        codes, _, names = self.arrays()
        return {names[c] for c in np.unique(codes)}

    def neighbours(self, query: np.ndarray, k: int) -> list[tuple[int, float, str, float, int]]:
        """The ``k`` entries most similar to ``query``: (position in the log, similarity, mode, reward, seq)."""
        hits = self.nearest(query, k)
        self.arrays()
        assert self._arrays is not None
        seqs, codes, rewards = self._arrays
        positions = np.searchsorted(seqs, [seq for seq, _ in hits])
        return [(int(p), sim, self._mode_names[int(codes[p])], float(rewards[p]), seq)
                for p, (seq, sim) in zip(positions, hits, strict=True)]

    def entries(self) -> list[LogEntry]:
        """Every entry, in log order (reads the whole log: for reports and tests)."""
        rows = self.db.execute("SELECT * FROM outcome_log ORDER BY seq").fetchall()
        return [LogEntry(r["seq"], vector(r["embedding"]), r["mode"], r["reward"], r["family"],
                         r["instruction"], bool(r["success"]), r["synthesis_calls"], r["trajectory_id"])
                for r in rows]

    def invalidate(self) -> None:
        super().invalidate()
        self._arrays = None

    def _grew(self) -> None:
        self._arrays = None
