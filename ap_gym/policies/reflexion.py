"""Reflexion (Shinn et al., 2023), adapted to held-out single attempts.

The original method retries the *same* task: after a failed trial the agent writes a
verbal self-reflection, keeps the last 1-3 reflections in an episodic buffer, and puts
them in the prompt of the next trial of that task. The paper's protocol never retries a
held-out task, so here:

* after every **failed training** episode, one LLM call (purpose ``reflection``) writes
  a reflection on that attempt; it is stored (kind ``reflection``) with its record as
  source and the reflections that were in that attempt's prompt as parents;
* for any task, training or held-out, the ``max_reflections`` (default 3, Reflexion's
  buffer size) stored reflections whose source tasks are most similar are shown;
* successes produce no reflection, as in the original.

So a reflection reaches a later attempt at a *similar* task rather than a retry of the
same one; on the training tasks that recur across iterations this includes the same task.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ap_gym.policies.abstraction import AbstractionMemory
from ap_gym.policies.memory import format_record
from ap_gym.types import Episode

__all__ = ["Reflexion"]

HEADER = "Reflections on earlier failed attempts"


class Reflexion(AbstractionMemory):
    name = "reflexion"

    def __init__(self, *args: Any, max_reflections: int = 3, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_reflections = max_reflections

    def retrieve_abstractions(self, vec: np.ndarray) -> list[tuple[int, str, float]]:
        reflections = [a.id for a in self.abstractions.all() if a.kind == "reflection"]
        hits = self.abstractions.nearest(vec, self.max_reflections, reflections)
        texts = {a.id: a.text for a in self.abstractions.get([i for i, _ in hits])}
        return [(i, texts[i], s) for i, s in hits if i in texts]

    def _guidance(self, vec: np.ndarray, info: Mapping[str, Any]) -> list[tuple[str, str]]:
        return self.abstraction_block(vec, HEADER)

    def _learn(self, episode: Episode, record_id: int, vec: np.ndarray) -> None:
        if episode.success:
            return
        record = self.trajectories.get([record_id])[0]
        text = self.synthesise("reflection", "reflection", records=format_record(record, self.memory.record_chars))
        self.store_abstraction(text, episode, [record_id], vec, "reflection")

    def spec(self) -> dict[str, Any]:
        return {**super().spec(), "max_reflections": self.max_reflections}
