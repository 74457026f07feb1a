"""Joint memory: trajectory memory and abstraction memory together (their designs composed)."""

from __future__ import annotations

from typing import Any

from ap_gym.policies.abstraction import AbstractionDesign
from ap_gym.policies.design import Composite
from ap_gym.policies.memory_policy import MEMORY_NEEDS, MEMORY_SUPPORTS, MemoryPolicy
from ap_gym.policies.registry import register_policy
from ap_gym.policies.trajectory import TrajectoryDesign

__all__ = ["JointMemory"]


@register_policy("joint", needs=MEMORY_NEEDS, supports=MEMORY_SUPPORTS)
class JointMemory(MemoryPolicy):
    """Joint memory: stored lessons first, then the B most similar records."""

    def __init__(self, backbone: Any, embedder: Any = None, **kwargs: Any) -> None:
        super().__init__(backbone, embedder, design=Composite((AbstractionDesign(), TrajectoryDesign())), **kwargs)
