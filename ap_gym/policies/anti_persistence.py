"""Anti-Persistence (Wang, Panaganti, Zhou, arXiv 2610.27406): keep records, discard guidance.

Per task (``../shared/spec/anti-persistence.md`` is the specification):

1. embed the task (instruction plus a truncated first observation);
2. select a mode with the contextual bandit (:mod:`ap_gym.policies.bandit`):
   ``none``, ``imitation``, ``strategic`` or ``corrective``;
3. retrieve records by task similarity, budget B = 5: ``none`` takes the most similar
   whatever their outcome; ``imitation`` and ``strategic`` take successes;
   ``corrective`` takes B failures plus at most one success for contrast. When the
   records a mode needs are missing, synthesis is skipped (cost 0) and the agent acts
   without guidance; ``corrective`` never falls back to another mode;
4. synthesise guidance with one LLM call (``none``: no call; the records themselves,
   under a "related past attempts" header) and put it in the acting prompt under the
   mode's header;
5. act;
6. in training: store the record; append the bandit's feedback (embedding, mode,
   r = clip(y - λκ, -1, 1), family, truncated instruction, outcome, κ) to the outcome
   log, except for attempts made while trajectory memory was empty, failed
   embeddings and infrastructure failures; **throw the guidance away**.

The abstraction store stays empty, always. Ablations are options of this design, not
copies: ``persist_guidance=True`` stores each synthesised guidance as an abstraction
(kind ``guidance``) and shows the most similar stored ones in later prompts (the
discard-versus-persist experiment); ``fixed_mode``; ``random_mode``; the bandit's
γ, λ, c, ε, ρ, B̂ through :class:`BanditConfig`; B through ``MemoryConfig.budget``; the
frozen skill layer and the admission judge of
:class:`~ap_gym.policies.memory_policy.MemoryPolicy`.

:class:`AntiPersistencePolicy` (also importable as ``AntiPersistence``) is the policy: the
acting agent around a backbone, the memory (records and the bandit's outcome log) and
this design.

Everything decided is recorded in the Episode's ``policy_info``: the mode and why, the
bandit's utilities, the neighbourhood's mean similarity, the retrieved record ids, the
guidance text and the synthesis calls it cost.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ap_gym.policies.abstraction import show_abstractions
from ap_gym.policies.bandit import MODES, BanditConfig, Choice, ModeBandit, mode_reward
from ap_gym.policies.design import Block, TaskContext
from ap_gym.policies.memory_policy import policy_of, register_design
from ap_gym.types import Episode

__all__ = ["MODE_HEADERS", "AntiPersistence", "AntiPersistenceDesign", "AntiPersistencePolicy"]

MODE_HEADERS = {
    "none": "Related past attempts (for reference; they were different tasks)",
    "imitation": "Action patterns from similar successful attempts",
    "strategic": "A plan distilled from similar successful attempts",
    "corrective": "Mistakes to avoid, from similar failed attempts",
}
PERSISTED_HEADER = "Stored guidance from earlier tasks"


@register_design("anti_persistence", policy="AntiPersistencePolicy")
@dataclass(frozen=True)
class AntiPersistenceDesign:
    """Anti-Persistence: records kept, guidance synthesised per task in a bandit-chosen mode, then discarded.

    Attributes:
        bandit: the mode bandit's parameters (the spec's defaults).
        fixed_mode: always use this mode (ablation).
        random_mode: choose the mode uniformly at random (ablation).
        persist_guidance: store synthesised guidance instead of discarding it (ablation).
    """

    bandit: BanditConfig = field(default_factory=BanditConfig)
    fixed_mode: Literal["none", "imitation", "strategic", "corrective"] | None = None
    random_mode: bool = False
    persist_guidance: bool = False
    selector: ModeBandit = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.fixed_mode is not None and self.fixed_mode not in MODES:
            raise ValueError(f"fixed_mode must be one of {MODES}")
        if self.fixed_mode is not None and self.random_mode:
            raise ValueError("choose fixed_mode or random_mode, not both")
        object.__setattr__(self, "selector", ModeBandit(BanditConfig.coerce(self.bandit)))

    def choose_mode(self, task: TaskContext) -> Choice:
        rng = task.memory.task_rng(task.task_id)
        if self.fixed_mode is not None:
            return Choice(self.fixed_mode, "fixed")
        if self.random_mode:
            return Choice(rng.choice(MODES), "random")
        return self.selector.select(task.vec, task.memory.outcomes, rng)

    def guidance(self, task: TaskContext) -> list[Block]:
        memory, vec = task.memory, task.vec
        memory_empty = len(memory.trajectories) == 0
        choice = self.choose_mode(task)
        mode, budget = choice.mode, task.config.budget
        task.decisions.update(mode=mode, mode_reason=choice.reason, utilities=choice.utilities,
                              mean_similarity=choice.mean_similarity)
        if mode == "none":
            hits = memory.retrieve_records(vec, budget)
        elif mode in ("imitation", "strategic"):
            hits = memory.retrieve_records(vec, budget, success=True)
        else:  # the spec: B failures, plus one success for contrast when there is one
            failures = memory.retrieve_records(vec, budget, success=False)
            contrast = memory.retrieve_records(vec, 1, success=True) if failures else []
            hits = failures + contrast
        records = [r for r, _ in hits]
        text, calls, skipped = "", 0, False
        if mode == "none":
            text = task.records_text(records)
        elif (mode == "corrective" and not any(not r.success for r in records)) or not records:
            skipped = True  # the mode's records are missing: no call, cost 0, no fallback
        elif mode == "corrective":
            has_success = any(r.success for r in records)
            text = task.synthesise(
                "synth_corrective", instruction=task.instruction, records=task.records_text(records),
                contrast_note=", and one successful attempt for contrast" if has_success else "")
            calls = 1
        else:
            text = task.synthesise(f"synth_{mode}", instruction=task.instruction, records=task.records_text(records))
            calls = 1
        task.decisions.update(synthesis_calls=calls, synthesis_skipped=skipped, memory_empty=memory_empty,
                              mode_guidance=text or None)
        task.state.update(mode=mode, calls=calls, memory_empty=memory_empty, sources=[r.id for r in records],
                          text=text if calls else "")
        blocks: list[Block] = []
        if self.persist_guidance:
            blocks += show_abstractions(task, budget, None, PERSISTED_HEADER, sep="\n\n")
        if text:
            blocks.append((MODE_HEADERS[mode], text))
        return blocks

    def learn(self, task: TaskContext, episode: Episode, record_id: int) -> None:
        state = task.state
        if not state:
            return
        if not state["memory_empty"]:
            task.memory.outcomes.append(
                embedding=task.vec, mode=state["mode"],
                reward=mode_reward(episode.success, state["calls"], self.selector.config.lam),
                family=episode.task_family, instruction=episode.instruction, success=episode.success,
                synthesis_calls=state["calls"], trajectory_id=record_id)
        if self.persist_guidance and state["text"]:
            task.keep_abstraction(state["text"], episode, state["sources"], task.vec, "guidance")
        # Otherwise the guidance is simply dropped: nothing of it outlives the episode.


#: The policy: the acting agent around a backbone, the memory (records and the bandit's
#: outcome log) and this design. ``AntiPersistence`` is the name the paper's code uses.
AntiPersistencePolicy = policy_of(AntiPersistenceDesign)
AntiPersistence = AntiPersistencePolicy
