"""Joint memory: trajectory memory and abstraction memory together (their designs composed)."""

from __future__ import annotations

from dataclasses import dataclass

from ap_gym.policies.abstraction import AbstractionDesign
from ap_gym.policies.design import Block, Composite, TaskContext
from ap_gym.policies.memory_policy import policy_of, register_design
from ap_gym.policies.trajectory import TrajectoryDesign
from ap_gym.types import Episode

__all__ = ["JointDesign", "JointMemory"]


@register_design("joint", policy="JointMemory")
@dataclass(frozen=True)
class JointDesign:
    """Joint memory: stored lessons first, then the B most similar records."""

    def guidance(self, task: TaskContext) -> list[Block]:
        return _PARTS.guidance(task)

    def learn(self, task: TaskContext, episode: Episode, record_id: int) -> None:
        _PARTS.learn(task, episode, record_id)


_PARTS = Composite((AbstractionDesign(), TrajectoryDesign()))
JointMemory = policy_of(JointDesign)
