"""Abstraction memory: after each training episode, synthesise an abstraction and store it.

For a new task, the B stored abstractions whose source tasks are most similar are
shown as lessons. Each abstraction keeps its provenance: the record it came from and,
as parents, the abstractions that were in that record's prompt, which is what the
error-reproduction audit follows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ap_gym.memory import Memory
from ap_gym.policies.design import Block, TaskContext
from ap_gym.policies.memory_policy import policy_of, register_design
from ap_gym.policies.records import format_record
from ap_gym.types import Episode

__all__ = ["AbstractionDesign", "AbstractionMemory", "show_abstractions"]

HEADER = "Lessons from earlier tasks"


def show_abstractions(task: TaskContext, k: int, allowed: Sequence[int] | None, header: str,
                      sep: str = "\n") -> list[Block]:
    """The ``k`` stored abstractions nearest the task (among ``allowed``), as one block;
    they are noted as in the prompt (their provenance) and in the decision record."""
    abstractions = task.memory.abstractions
    hits = abstractions.nearest(task.vec, k, allowed)
    texts = {a.id: a.text for a in abstractions.get([i for i, _ in hits])}
    shown = [(i, texts[i]) for i, _ in hits if i in texts]
    if task.withhold:  # the randomised-exposure coin: retrieved, recorded, not shown
        task.decisions.setdefault("withheld_abstractions", []).extend(i for i, _ in shown)
        return []
    task.in_prompt += [i for i, _ in shown]
    task.decisions["retrieved_abstractions"] = [i for i, _ in shown]
    return [(header, sep.join(t for _, t in shown))] if shown else []


@register_design("abstraction", policy="AbstractionMemory")
@dataclass(frozen=True)
class AbstractionDesign:
    """Abstraction memory: a synthesised rule per training episode, the nearest ones shown.

    Attributes:
        kind: the kind stored abstractions get.
        allowed: which stored abstractions may be retrieved (``None``: every active one).
    """

    kind: str = "rule"
    allowed: Callable[[Memory], Sequence[int] | None] | None = None

    def guidance(self, task: TaskContext) -> list[Block]:
        allowed = self.allowed(task.memory) if self.allowed is not None else None
        return show_abstractions(task, task.config.budget, allowed, HEADER)

    def learn(self, task: TaskContext, episode: Episode, record_id: int) -> None:
        memory = task.memory
        if task.in_prompt:
            memory.abstractions.record_use(task.in_prompt, episode.success)
        record = memory.trajectories.get([record_id])[0]
        text = task.synthesise("synth_abstraction", records=format_record(record, task.config.record_tokens))
        task.keep_abstraction(text, episode, [record_id], task.vec, self.kind)


AbstractionMemory = policy_of(AbstractionDesign)
