"""A scripted, stochastic actor: an instrument for checking the measuring apparatus, never a default.

A CPU cannot show what a large model does with wrong guidance, but it can check that the
harness measures it: put known wrong rules or records where a design reads, let an agent
whose behaviour is known by its parameters act on them, and see whether the audit and the
success figures report what was planted. :class:`ScriptedActor` is that agent:

* **acting**: with probability ``compliance`` it follows its guidance, when the guidance
  offers something to follow: the first command a rule recommends (not forbids) that is
  admissible now and not yet issued, or else what a successful record shown in the prompt
  did next after the command the actor just issued (ids masked: ``click[b0...]`` matches
  any product). Otherwise it plays the task's walkthrough, except that with probability
  ``error_rate`` it issues a random admissible command. Every draw comes from the seed,
  the task and the step (deterministic, order-free).
* **synthesis** (rules, guidance, reflections, maintenance): ``synthesise(prompt, rng)``,
  a function the study supplies, writes the text from the records in the prompt.
* **admission judge**: yes.

It acts through :meth:`ScriptedActor.act_on` (the
:class:`~ap_gym.backbones.base.CommandActor` ability): the agent hands it the step's
admissible commands, so it never parses them out of the prompt's text.

It needs each task's walkthrough, keyed by instruction (``walkthroughs``). Calls are
counted like a model's, with zero tokens. ``followed`` counts the steps where guidance
offered a command and the actor took it, and ``offered`` those where it offered one: the
realised compliance.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ap_gym.backbones.base import Completion, GenerationConfig, Message, Scores
from ap_gym.seeding import derived_rng
from ap_gym.text import commands_in, guidance_rules

__all__ = ["ScriptedActor", "guidance_rules", "shown_records"]

_ID = re.compile(r"\bb0[a-z0-9]{8}\b")


def shown_records(text: str) -> list[tuple[bool, list[str]]]:
    """The records a prompt shows: (success, commands), in order (``Outcome:`` then ``> command`` lines)."""
    records: list[tuple[bool, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("Outcome:"):
            records.append((line.startswith("Outcome: success"), []))
        elif line.startswith("> ") and records:
            records[-1][1].append(line[2:].strip())
    return records


def _masked(command: str) -> str:
    return _ID.sub("<id>", command.lower())


class ScriptedActor:
    """See the module docstring.

    Args:
        walkthroughs: instruction -> the task's walkthrough (its winning commands).
        synthesise: ``(prompt, rng) -> text`` for a synthesis, reflection or maintenance call.
        compliance: the chance, at a step where guidance offers a command, that it is followed.
        error_rate: the chance, per step otherwise, of a random admissible command.
        seed: seeds every draw.
    """

    def __init__(self, walkthroughs: Mapping[str, Sequence[str]], synthesise: Callable[[str, Any], str], *,
                 compliance: float = 1.0, error_rate: float = 0.0, seed: int = 0) -> None:
        for name, p in (("compliance", compliance), ("error_rate", error_rate)):
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{name} is a probability, not {p}")
        self.walkthroughs = {k: list(v) for k, v in walkthroughs.items()}
        self.synthesise = synthesise
        self.compliance, self.error_rate, self.seed = compliance, error_rate, seed
        self.identity = f"scripted(compliance={compliance:g}, error_rate={error_rate:g}, seed={seed})"
        self.offered = self.followed = 0

    # ----------------------------------------------------------------- acting
    def act_on(self, messages: Sequence[Message], candidates: Sequence[str]) -> Completion:
        """The command it issues, given the prompt (its guidance and history) and the step's
        admissible commands (handed over by the agent, never read out of the prompt)."""
        return Completion(self.act(messages, list(candidates)), 0, 0, 0.0)

    def act(self, messages: Sequence[Message], admissible: list[str]) -> str:
        system = messages[0]["content"]
        line = next((ln for ln in system.splitlines() if ln.startswith("Your task: ")), "")
        instruction = line.removeprefix("Your task: ").strip()
        if instruction not in self.walkthroughs:
            raise ValueError("the scripted actor knows no walkthrough for this task's instruction")
        issued = [m["content"].strip() for m in messages if m["role"] == "assistant"]
        draw = derived_rng(self.seed, instruction, len(issued))
        guided = self.guided(system, issued, admissible)
        if guided is not None:
            self.offered += 1
            if draw.random() < self.compliance:
                self.followed += 1
                return guided
        if admissible and draw.random() < self.error_rate:
            return draw.choice(admissible)
        return self._next_of(self.walkthroughs[instruction], issued, admissible)

    @staticmethod
    def guided(system: str, issued: list[str], admissible: list[str]) -> str | None:
        """What the guidance offers now: a recommended command, else a shown success's next move."""
        for command in commands_in(guidance_rules(system)):
            if not command.negated and command.text in admissible and command.text not in issued:
                return command.text
        if not issued:
            return None
        last = _masked(issued[-1])
        for success, commands in shown_records(system):
            if not success:
                continue
            for before, after in zip(commands, commands[1:], strict=False):
                if _masked(before) == last and after in admissible and after not in issued:
                    return after
        return None

    @staticmethod
    def _next_of(plan: list[str], issued: list[str], admissible: list[str]) -> str:
        """The walkthrough's next command: the first one not yet issued in plan order (a
        detour leaves the plan where it was), or one that is admissible now."""
        done = 0
        for command in issued:
            if done < len(plan) and command == plan[done]:
                done += 1
        if done < len(plan):
            return plan[done]
        return admissible[0] if admissible else "look"

    # -------------------------------------------------------------- protocol
    def generate(self, messages: Sequence[Message], config: GenerationConfig = GenerationConfig(),
                 **_: Any) -> Completion:
        if messages and messages[0]["role"] == "system":
            raise ValueError("the scripted actor acts through act_on (the agent hands it the step's commands); "
                             "generate answers synthesis, reflection and judge prompts only")
        prompt = messages[-1]["content"]
        text = "yes" if "Answer with exactly one word: yes or no" in prompt else \
            self.synthesise(prompt, derived_rng(self.seed, "synthesis", prompt))
        return Completion(text, 0, 0, 0.0)

    def generate_batch(self, batch: Sequence[Sequence[Message]],
                       config: GenerationConfig = GenerationConfig()) -> list[Completion]:
        return [self.generate(m, config) for m in batch]

    def score(self, messages: Sequence[Message], candidates: Sequence[str], reduction: str = "sum") -> Scores:
        chosen = self.act(messages, list(candidates))
        return Scores(tuple(0.0 if c == chosen else -10.0 for c in candidates), 0, 0)

    def describe(self) -> dict[str, Any]:
        return {"identity": self.identity, "kind": "scripted (an instrument for injection studies)"}
