"""Trajectory memory: retrieve similar past records as in-context examples; no synthesis."""

from __future__ import annotations

from dataclasses import dataclass

from ap_gym.policies.design import Block, TaskContext
from ap_gym.policies.memory_policy import policy_of, register_design
from ap_gym.types import Episode

__all__ = ["TrajectoryDesign", "TrajectoryMemory"]

HEADER = "Related past attempts (for reference; they were different tasks)"


@register_design("trajectory", policy="TrajectoryMemory")
@dataclass(frozen=True)
class TrajectoryDesign:
    """Trajectory memory: the B most similar records in the prompt, whatever their outcome."""

    def guidance(self, task: TaskContext) -> list[Block]:
        hits = task.memory.retrieve_records(task.vec, task.config.budget)
        return [(HEADER, task.records_text([r for r, _ in hits]))] if hits else []

    def learn(self, task: TaskContext, episode: Episode, record_id: int) -> None:
        """Nothing beyond the record, which every memory policy stores."""


TrajectoryMemory = policy_of(TrajectoryDesign)
