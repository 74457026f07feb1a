"""Trajectory memory: retrieve similar past records as in-context examples; no synthesis."""

from __future__ import annotations

from typing import Any

from ap_gym.policies.design import Block, TaskContext
from ap_gym.policies.memory_policy import MEMORY_NEEDS, MEMORY_SUPPORTS, MemoryPolicy
from ap_gym.policies.registry import register_policy
from ap_gym.types import Episode

__all__ = ["TrajectoryDesign", "TrajectoryMemory"]

HEADER = "Related past attempts (for reference; they were different tasks)"


class TrajectoryDesign:
    """The B most similar records, whatever their outcome, shown with their outcomes."""

    def guidance(self, task: TaskContext) -> list[Block]:
        hits = task.memory.retrieve_records(task.vec, task.memory.config.budget)
        task.decisions["retrieved_records"] = [r.id for r, _ in hits]
        task.decisions["similarities"] = [round(s, 4) for _, s in hits]
        return [(HEADER, task.memory.records_text([r for r, _ in hits]))] if hits else []

    def learn(self, task: TaskContext, episode: Episode, record_id: int) -> None:
        """Nothing beyond the record, which every memory policy stores."""


@register_policy("trajectory", needs=MEMORY_NEEDS, supports=MEMORY_SUPPORTS)
class TrajectoryMemory(MemoryPolicy):
    """Trajectory memory: the B most similar records in the prompt."""

    def __init__(self, backbone: Any, embedder: Any = None, **kwargs: Any) -> None:
        super().__init__(backbone, embedder, design=TrajectoryDesign(), **kwargs)
