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

from dataclasses import dataclass

from pydantic import PositiveInt

from ap_gym.policies.abstraction import show_abstractions
from ap_gym.policies.design import Block, TaskContext
from ap_gym.policies.memory_policy import policy_of, register_design
from ap_gym.policies.records import format_record
from ap_gym.types import Episode

__all__ = ["Reflexion", "ReflexionDesign"]

HEADER = "Reflections on earlier failed attempts"


@register_design("reflexion", policy="Reflexion")
@dataclass(frozen=True)
class ReflexionDesign:
    """Reflexion: a reflection per failed training episode, the nearest ones shown."""

    max_reflections: PositiveInt = 3

    def guidance(self, task: TaskContext) -> list[Block]:
        reflections = task.memory.abstractions.ids(kind="reflection")
        return show_abstractions(task, self.max_reflections, reflections, HEADER)

    def learn(self, task: TaskContext, episode: Episode, record_id: int) -> None:
        if episode.success:
            return
        record = task.memory.trajectories.get([record_id])[0]
        text = task.synthesise("reflection", "reflection", records=format_record(record, task.config.record_tokens))
        task.keep_abstraction(text, episode, [record_id], task.vec, "reflection")


Reflexion = policy_of(ReflexionDesign)
