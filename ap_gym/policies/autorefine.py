"""AutoRefine (after Qiu et al.): abstraction memory plus maintenance.

On top of :class:`AbstractionMemory`:

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

from typing import Any

import numpy as np

from ap_gym.policies.abstraction import AbstractionMemory
from ap_gym.types import Episode

__all__ = ["AutoRefine"]


class AutoRefine(AbstractionMemory):
    name = "autorefine"

    def __init__(self, *args: Any, min_uses: int = 3, filter_below: float = 0.3, prune_below: float = 0.25,
                 capacity: int = 100, evolve_every: int = 10, prune_every: int = 25, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.min_uses, self.filter_below, self.prune_below = min_uses, filter_below, prune_below
        self.capacity, self.evolve_every, self.prune_every = capacity, evolve_every, prune_every

    def _allowed_abstractions(self) -> list[int] | None:
        return [a.id for a in self.abstractions.all()
                if not (a.uses >= self.min_uses and a.score < self.filter_below)]

    def _learn(self, episode: Episode, record_id: int, vec: np.ndarray) -> None:
        super()._learn(episode, record_id, vec)
        n = len(self.trajectories)
        if n % self.evolve_every == 0:
            self._evolve(episode, vec)
        if n % self.prune_every == 0:
            self._prune()

    def _evolve(self, episode: Episode, vec: np.ndarray) -> None:
        rows = self.db.conn.execute(
            "SELECT family, max(id) FROM trajectories GROUP BY family HAVING sum(success)>0 AND sum(1-success)>0 "
            "ORDER BY max(id) DESC LIMIT 1").fetchall()
        if not rows:
            return
        family = rows[0][0]
        ids = self.db.conn.execute(
            "SELECT id, success FROM trajectories WHERE family=? ORDER BY id DESC", (family,)).fetchall()
        wins = [i for i, s in ids if s][:2]
        losses = [i for i, s in ids if not s][:2]
        text = self.synthesise("synth_contrastive", "maintenance",
                               successes=self.records_text(self.trajectories.get(wins)),
                               failures=self.records_text(self.trajectories.get(losses)))
        sources = wins + losses
        centre = self.trajectories.embeddings(sources).mean(axis=0)  # retrieved for tasks like its sources
        self.store_abstraction(text, episode, sources, centre / max(float(np.linalg.norm(centre)), 1e-9), "skill")
        self.decisions["evolved_family"] = family

    def _prune(self) -> None:
        active = self.abstractions.all()
        low = [a.id for a in active if a.uses >= self.min_uses and a.score < self.prune_below]
        self.abstractions.deactivate(low, "low score")
        rest = sorted((a for a in active if a.id not in set(low)), key=lambda a: (a.score, a.id))
        over = len(rest) - self.capacity
        if over > 0:
            self.abstractions.deactivate([a.id for a in rest[:over]], "over capacity")

    def spec(self) -> dict[str, Any]:
        return {**super().spec(), "min_uses": self.min_uses, "filter_below": self.filter_below,
                "prune_below": self.prune_below, "capacity": self.capacity,
                "evolve_every": self.evolve_every, "prune_every": self.prune_every}
