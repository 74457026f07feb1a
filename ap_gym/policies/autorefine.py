"""AutoRefine (after Qiu et al.): abstraction memory plus maintenance.

On top of abstraction memory's design:

* **scoring**: every stored abstraction counts its uses in training prompts and the
  successes of those episodes; its score is (successes + 1) / (uses + 2);
* **retrieval filtering**: abstractions with at least ``min_uses`` uses and a score below
  ``filter_below`` are not retrieved;
* **contrastive skill evolution**: every ``evolve_every`` training episodes, for the task
  family with the most recent records that has both successes and failures, one
  ``maintenance`` call contrasts up to two successes with two failures into a skill
  (kind ``skill``), with those records as sources;
* **periodic pruning**: every ``prune_every`` training episodes, abstractions with at
  least ``min_uses`` uses and a score below ``prune_below`` are deactivated, then the
  lowest-scored beyond ``capacity`` active ones. Pruned abstractions stay on disk with a
  ``pruned`` flag, for provenance, but are never retrieved again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ap_gym.memory import Memory
from ap_gym.policies.abstraction import AbstractionDesign
from ap_gym.policies.design import Block, TaskContext
from ap_gym.policies.memory_policy import policy_of, register_design
from ap_gym.types import Episode

__all__ = ["AutoRefine", "AutoRefineDesign"]


@register_design("autorefine", policy="AutoRefine")
@dataclass(frozen=True)
class AutoRefineDesign:
    """AutoRefine: abstraction memory with scoring, filtering, skill evolution and pruning."""

    min_uses: int = 3
    filter_below: float = 0.3
    prune_below: float = 0.25
    capacity: int = 100
    evolve_every: int = 10
    prune_every: int = 25
    rules: AbstractionDesign = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "rules", AbstractionDesign(allowed=self._allowed))

    def _allowed(self, memory: Memory) -> list[int]:
        return memory.abstractions.ids(not_below=(self.min_uses, self.filter_below))

    def guidance(self, task: TaskContext) -> list[Block]:
        return self.rules.guidance(task)

    def learn(self, task: TaskContext, episode: Episode, record_id: int) -> None:
        self.rules.learn(task, episode, record_id)
        n = len(task.memory.trajectories)
        if n % self.evolve_every == 0:
            self._evolve(task, episode)
        if n % self.prune_every == 0:
            self._prune(task.memory)

    def _evolve(self, task: TaskContext, episode: Episode) -> None:
        trajectories = task.memory.trajectories
        family = trajectories.latest_mixed_family()
        if family is None:
            return
        outcomes = trajectories.family_outcomes(family)
        wins = [i for i, s in outcomes if s][:2]
        losses = [i for i, s in outcomes if not s][:2]
        text = task.synthesise("synth_contrastive", "maintenance",
                               successes=task.records_text(trajectories.get(wins)),
                               failures=task.records_text(trajectories.get(losses)))
        sources = wins + losses
        centre = trajectories.embeddings(sources).mean(axis=0)  # retrieved for tasks like its sources
        task.keep_abstraction(text, episode, sources, centre / max(float(np.linalg.norm(centre)), 1e-9), "skill")
        task.decisions["evolved_family"] = family

    def _prune(self, memory: Memory) -> None:
        active = memory.abstractions.scores()
        low = [i for i, uses, score in active if uses >= self.min_uses and score < self.prune_below]
        memory.abstractions.deactivate(low, "low score")
        dropped = set(low)
        rest = sorted((score, i) for i, _, score in active if i not in dropped)
        over = len(rest) - self.capacity
        if over > 0:
            memory.abstractions.deactivate([i for _, i in rest[:over]], "over capacity")


AutoRefine = policy_of(AutoRefineDesign)
