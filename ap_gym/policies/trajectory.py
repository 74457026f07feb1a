"""Trajectory memory: retrieve similar past records as in-context examples; no synthesis."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ap_gym.policies.memory import MemoryPolicy

__all__ = ["TrajectoryMemory"]

HEADER = "Related past attempts (for reference; they were different tasks)"


class TrajectoryMemory(MemoryPolicy):
    """The B most similar records, whatever their outcome, shown with their outcomes."""

    name = "trajectory"

    def _guidance(self, vec: np.ndarray, info: Mapping[str, Any]) -> list[tuple[str, str]]:
        hits = self.retrieve_records(vec, self.memory.budget)
        self.decisions["retrieved_records"] = [r.id for r, _ in hits]
        self.decisions["similarities"] = [round(s, 4) for _, s in hits]
        return [(HEADER, self.records_text([r for r, _ in hits]))] if hits else []
