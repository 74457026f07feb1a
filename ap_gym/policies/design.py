"""What distinguishes one memory design from another: what it retrieves, what it writes.

A :class:`Design` answers two questions and nothing else:

* ``guidance(task)``: the blocks (header, text) to put in the acting prompt for this
  task, read from the memory (retrieval, and synthesis when the design synthesises);
* ``learn(task, episode, record_id)``: after a training episode whose record is stored,
  what else to write (abstractions, reflections, bandit feedback, maintenance).

Both receive a :class:`TaskContext`: the memory, the memory options, the task's embedding
and info, the decision record that ends up in the Episode (retrieval writes its own keys
there), the abstraction ids shown in the prompt, scratch state kept from ``guidance`` to
``learn``, and the calls that cost LLM calls (``synthesise``, ``keep_abstraction`` with its
admission judge), counted under their purposes. Designs compose: :class:`Composite` shows
its parts' blocks in order and lets each learn (joint memory is abstraction memory's
design followed by trajectory memory's).

A new design is one dataclass in one file: decorate it with
:func:`~ap_gym.policies.memory_policy.register_design` and it is a policy that every
config, the protocol and the viewer know.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from ap_gym.backbones.base import Backbone, GenerationConfig
from ap_gym.memory import Memory, Record
from ap_gym.policies.records import records_text
from ap_gym.prompts import load_prompt
from ap_gym.types import Episode, UsageMeter

if TYPE_CHECKING:
    from ap_gym.policies.memory_policy import MemoryConfig

__all__ = ["Admission", "Block", "Composite", "Design", "Synthesiser", "TaskContext"]

#: A guidance block: (header, text).
Block = tuple[str, str]
#: A judge of new abstractions: ``(text, episode) -> admit?``.
Admission = Callable[[str, Episode], bool]


@dataclass
class Synthesiser:
    """LLM calls a design makes besides acting, each counted under its purpose."""

    backbone: Backbone
    meter: UsageMeter
    generation: GenerationConfig
    seed: int = 0

    def synthesise(self, prompt_name: str, purpose: str = "synthesis", **fields: str) -> str:
        """One LLM call with a packaged prompt (``ap_gym/prompts/<name>.txt``)."""
        prompt = load_prompt(prompt_name).format(**fields)
        config = self.generation.seeded(self.seed, prompt_name, prompt)
        completion = self.backbone.generate([{"role": "user", "content": prompt}], config)
        self.meter.record(purpose, completion.prompt_tokens, completion.completion_tokens)
        return completion.text.strip()


@dataclass
class TaskContext:
    """One task as a design sees it, from ``guidance`` to ``learn``."""

    memory: Memory
    config: MemoryConfig
    vec: np.ndarray
    info: Mapping[str, Any]
    decisions: dict[str, Any]
    synthesiser: Synthesiser
    admission: Admission | str | None = None
    #: the LLM judge's own backbone, when it is not the acting one.
    judge: Synthesiser | None = None
    #: ids of the stored abstractions shown in this task's prompt (their provenance).
    in_prompt: list[int] = field(default_factory=list)
    #: the randomised-exposure coin said to withhold the stored abstractions retrieved for
    #: this task (they are recorded as ``withheld_abstractions``, never shown).
    withhold: bool = False
    #: what the coin decided, recorded with every abstraction synthesised from this task.
    exposure: dict[str, Any] | None = None
    #: what a design keeps from ``guidance`` for ``learn`` (never beyond the episode).
    state: dict[str, Any] = field(default_factory=dict)

    @property
    def task_id(self) -> str:
        return str(self.info.get("task_id", ""))

    @property
    def instruction(self) -> str:
        return str(self.info.get("instruction", ""))

    def records_text(self, records: Sequence[Record]) -> str:
        """Records as a prompt lists them, each within the memory options' ``record_tokens``."""
        return records_text(records, self.config.record_tokens)

    def synthesise(self, prompt_name: str, purpose: str = "synthesis", **fields: str) -> str:
        return self.synthesiser.synthesise(prompt_name, purpose, **fields)

    def admit(self, text: str, episode: Episode) -> bool:
        """The admission judge's verdict on a new abstraction (``None`` admits all)."""
        if not text:
            return False
        if self.admission is None:
            return True
        if self.admission == "llm":
            judge = self.judge or self.synthesiser
            answer = judge.synthesise("admission_judge", "admission", instruction=episode.instruction,
                                      outcome="success" if episode.success else "failure", text=text)
            return answer.strip().lower().startswith("yes")
        return bool(self.admission(text, episode))  # type: ignore[operator]  # "llm" was handled above: a callable is left

    def keep_abstraction(self, text: str, episode: Episode, sources: list[int], vec: np.ndarray,
                         kind: str) -> int | None:
        """Admit and store ``text`` with its provenance; a rejection is recorded."""
        exposure = {"exposure": self.exposure} if self.exposure is not None else {}
        if not self.admit(text, episode):  # kept with its provenance: the audit counts it (alpha, eta)
            self.decisions.setdefault("rejected_abstractions", []).append(
                {"text": text, "sources": list(sources), "parents": self.memory.parents_of(sources), **exposure})
            return None
        return self.memory.add_abstraction(text, kind, vec, sources, flags=exposure or None)


@runtime_checkable
class Design(Protocol):
    """What a memory design retrieves for a task and writes after a training episode."""

    def guidance(self, task: TaskContext) -> list[Block]: ...

    def learn(self, task: TaskContext, episode: Episode, record_id: int) -> None: ...


@dataclass(frozen=True)
class Composite:
    """Several designs as one: their blocks in order; each learns in turn."""

    parts: Sequence[Design]

    def guidance(self, task: TaskContext) -> list[Block]:
        return [block for part in self.parts for block in part.guidance(task)]

    def learn(self, task: TaskContext, episode: Episode, record_id: int) -> None:
        for part in self.parts:
            part.learn(task, episode, record_id)
