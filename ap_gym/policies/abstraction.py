"""Abstraction memory: after each training episode, synthesise an abstraction and store it.

For a new task, the B stored abstractions whose source tasks are most similar are
shown as lessons. Each abstraction keeps its provenance: the record it came from and,
as parents, the abstractions that were in that record's prompt, which is what the
error-reproduction audit follows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ap_gym.policies.memory import MemoryPolicy, format_record
from ap_gym.types import Episode

__all__ = ["AbstractionMemory"]

HEADER = "Lessons from earlier tasks"


class AbstractionMemory(MemoryPolicy):
    name = "abstraction"
    stores_abstractions = True
    abstraction_kind = "rule"

    def retrieve_abstractions(self, vec: np.ndarray) -> list[tuple[int, str, float]]:
        hits = self.abstractions.nearest(vec, self.memory.budget, self._allowed_abstractions())
        texts = {a.id: a.text for a in self.abstractions.get([i for i, _ in hits])}
        return [(i, texts[i], s) for i, s in hits if i in texts]

    def _allowed_abstractions(self) -> list[int] | None:
        return None

    def abstraction_block(self, vec: np.ndarray, header: str = HEADER) -> list[tuple[str, str]]:
        hits = self.retrieve_abstractions(vec)
        self._in_prompt += [i for i, _, _ in hits]
        self.decisions["retrieved_abstractions"] = [i for i, _, _ in hits]
        return [(header, "\n".join(t for _, t, _ in hits))] if hits else []

    def _guidance(self, vec: np.ndarray, info: Mapping[str, Any]) -> list[tuple[str, str]]:
        return self.abstraction_block(vec)

    def _learn(self, episode: Episode, record_id: int, vec: np.ndarray) -> None:
        if self._in_prompt:
            self.abstractions.record_use(self._in_prompt, episode.success)
        record = self.trajectories.get([record_id])[0]
        text = self.synthesise("synth_abstraction", records=format_record(record, self.memory.record_chars))
        self.store_abstraction(text, episode, [record_id], vec, self.abstraction_kind)
