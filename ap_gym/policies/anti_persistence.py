"""Anti-Persistence (Wang, Panaganti, Zhou, arXiv 2610.27406): keep records, discard guidance.

Per task (``../shared/spec/anti-persistence.md`` is the specification):

1. embed the task (instruction plus a truncated first observation);
2. select a mode with the contextual bandit (:mod:`ap_gym.policies.bandit`):
   ``none``, ``imitation``, ``strategic`` or ``corrective``;
3. retrieve records by task similarity, budget B = 5: ``none`` takes the most similar
   whatever their outcome; ``imitation`` and ``strategic`` take successes;
   ``corrective`` takes failures plus at most one success for contrast. When the
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

The abstraction store stays empty, always. Ablations are options of this class, not
copies: ``persist_guidance=True`` stores each synthesised guidance as an abstraction
(kind ``guidance``) and shows the most similar stored ones in later prompts (the
discard-versus-persist experiment); ``fixed_mode``; ``random_mode``; the bandit's
γ, λ, c, ε, ρ, B̂ through :class:`BanditConfig`; B through ``MemoryConfig.budget``; the
frozen skill layer and the admission judge of :class:`MemoryPolicy`.

Everything decided is recorded in the Episode's ``policy_info``: the mode and why, the
bandit's utilities, the neighbourhood's mean similarity, the retrieved record ids, the
guidance text and the synthesis calls it cost.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ap_gym.policies.bandit import MODES, BanditConfig, Choice, ModeBandit, mode_reward
from ap_gym.policies.memory import MemoryPolicy
from ap_gym.types import Episode

__all__ = ["MODE_HEADERS", "AntiPersistence"]

MODE_HEADERS = {
    "none": "Related past attempts (for reference; they were different tasks)",
    "imitation": "Action patterns from similar successful attempts",
    "strategic": "A plan distilled from similar successful attempts",
    "corrective": "Mistakes to avoid, from similar failed attempts",
}


class AntiPersistence(MemoryPolicy):
    """See the module docstring.

    Args:
        bandit: the bandit's parameters (spec defaults).
        fixed_mode: always use this mode (ablation).
        random_mode: choose the mode uniformly at random (ablation).
        persist_guidance: store synthesised guidance instead of discarding it (ablation).
        **kwargs: :class:`MemoryPolicy` arguments.
    """

    name = "anti_persistence"

    def __init__(self, *args: Any, bandit: BanditConfig | None = None, fixed_mode: str | None = None,
                 random_mode: bool = False, persist_guidance: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if fixed_mode is not None and fixed_mode not in MODES:
            raise ValueError(f"fixed_mode must be one of {MODES}")
        if fixed_mode is not None and random_mode:
            raise ValueError("choose fixed_mode or random_mode, not both")
        self.bandit = ModeBandit(bandit)
        self.fixed_mode = fixed_mode
        self.random_mode = random_mode
        self.persist_guidance = persist_guidance
        self.stores_abstractions = persist_guidance
        self._episode_state: dict[str, Any] = {}

    def choose_mode(self, vec: np.ndarray, task_id: str) -> Choice:
        rng = self.task_rng(task_id)
        if self.fixed_mode is not None:
            return Choice(self.fixed_mode, "fixed")
        if self.random_mode:
            return Choice(rng.choice(MODES), "random")
        return self.bandit.select(vec, self.outcomes, rng)

    def _guidance(self, vec: np.ndarray, info: Mapping[str, Any]) -> list[tuple[str, str]]:
        memory_empty = len(self.trajectories) == 0
        choice = self.choose_mode(vec, str(info.get("task_id", "")))
        mode, budget = choice.mode, self.memory.budget
        if mode == "none":
            hits = self.retrieve_records(vec, budget)
        elif mode in ("imitation", "strategic"):
            hits = self.retrieve_records(vec, budget, success=True)
        else:
            failures = self.retrieve_records(vec, budget - 1 if budget > 1 else 1, success=False)
            contrast = self.retrieve_records(vec, 1, success=True) if failures else []
            if not contrast:
                failures = self.retrieve_records(vec, budget, success=False)
            hits = failures + contrast
        records = [r for r, _ in hits]
        text, calls, skipped = "", 0, False
        if mode == "none":
            text = self.records_text(records)
        elif (mode == "corrective" and not any(not r.success for r in records)) or not records:
            skipped = True  # the mode's records are missing: no call, cost 0, no fallback
        elif mode == "corrective":
            has_success = any(r.success for r in records)
            text = self.synthesise(
                "synth_corrective", instruction=str(info.get("instruction", "")), records=self.records_text(records),
                contrast_note=", and one successful attempt for contrast" if has_success else "")
            calls = 1
        else:
            text = self.synthesise(f"synth_{mode}", instruction=str(info.get("instruction", "")),
                                   records=self.records_text(records))
            calls = 1
        self.decisions.update(
            mode=mode, mode_reason=choice.reason, utilities=choice.utilities,
            mean_similarity=choice.mean_similarity, retrieved_records=[r.id for r in records],
            similarities=[round(s, 4) for _, s in hits], synthesis_calls=calls, synthesis_skipped=skipped,
            memory_empty=memory_empty, mode_guidance=text or None,
        )
        self._episode_state = {"mode": mode, "calls": calls, "memory_empty": memory_empty,
                               "sources": [r.id for r in records], "text": text if calls else ""}
        blocks: list[tuple[str, str]] = []
        if self.persist_guidance:
            hits_a = self.abstractions.nearest(vec, self.memory.budget)
            stored = self.abstractions.get([i for i, _ in hits_a])
            self._in_prompt += [a.id for a in stored]
            self.decisions["retrieved_abstractions"] = [a.id for a in stored]
            if stored:
                blocks.append(("Stored guidance from earlier tasks", "\n\n".join(a.text for a in stored)))
        if text:
            blocks.append((MODE_HEADERS[mode], text))
        return blocks

    def _learn(self, episode: Episode, record_id: int, vec: np.ndarray) -> None:
        state, self._episode_state = self._episode_state, {}
        if not state:
            return
        if not state["memory_empty"]:
            self.outcomes.append(
                embedding=vec, mode=state["mode"], reward=mode_reward(episode.success, state["calls"], self.bandit.config.lam),
                family=episode.task_family, instruction=episode.instruction, success=episode.success,
                synthesis_calls=state["calls"], trajectory_id=record_id)
        if self.persist_guidance and state["text"]:
            self.store_abstraction(state["text"], episode, state["sources"], vec, "guidance")
        # Otherwise the guidance is simply dropped: nothing of it outlives the episode.

    def spec(self) -> dict[str, Any]:
        return {**super().spec(), "bandit": self.bandit.config.to_dict(), "fixed_mode": self.fixed_mode,
                "random_mode": self.random_mode, "persist_guidance": self.persist_guidance}
