"""Joint memory: trajectory memory and abstraction memory together."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ap_gym.policies.abstraction import AbstractionMemory
from ap_gym.policies.trajectory import TrajectoryMemory

__all__ = ["JointMemory"]


class JointMemory(AbstractionMemory):
    """Stored lessons first, then the B most similar records."""

    name = "joint"

    def _guidance(self, vec: np.ndarray, info: Mapping[str, Any]) -> list[tuple[str, str]]:
        return self.abstraction_block(vec) + TrajectoryMemory._guidance(self, vec, info)  # type: ignore[arg-type]
