"""A scripted, deterministic "compliant" backbone: an instrument for validating the
measuring apparatus, never a default.

A CPU cannot show what a large model does with wrong guidance, but it can check that the
harness measures it: seed a memory with a known share of wrong rules, let an agent whose
behaviour is known by construction act on it, and see whether the audit and the success
figures report what was injected. :class:`CompliantBackbone` is that agent:

* **acting**: it follows the guidance whenever the guidance recommends (not forbids) a
  command that is admissible now and that it has not yet issued this episode; otherwise
  it plays the task's walkthrough, except that with probability ``error_rate`` (drawn
  from a hash of the seed, the task and the step: deterministic, order-free) it issues a
  random admissible command instead. Record lines shown as context (``> command``) are
  never taken for guidance.
* **synthesis** (rules, guidance, reflections, maintenance): ``synthesise(prompt)``, a
  function the study supplies, writes the text from the records in the prompt: what a
  model that copies its material would write.
* **admission judge**: yes.

It needs each task's walkthrough, keyed by instruction (``walkthroughs``). Calls are
counted like a model's, with zero tokens.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ap_gym.backbones.base import Completion, GenerationConfig, Message, Scores
from ap_gym.text import commands_in

__all__ = ["CompliantBackbone", "guidance_rules"]

_ADMISSIBLE = re.compile(r"\n\nAdmissible commands: (.*?)(?: \(and \d+ more\))?$", re.S)


def guidance_rules(text: str) -> str:
    """The rules of a guidance block, without the records it shows as context (their
    ``> command`` and indented observation lines, task and outcome lines)."""
    return "\n".join(line for line in text.splitlines()
                     if line[:1] not in (" ", "\t", ">", "[")
                     and not line.startswith(("Your task:", "Task:", "Outcome:", "Trajectory:", "...")))


class CompliantBackbone:
    """See the module docstring.

    Args:
        walkthroughs: instruction -> the task's walkthrough (its winning commands).
        synthesise: writes a synthesis, reflection or maintenance answer from its prompt.
        error_rate: the chance, per step, of a random admissible command instead of the
            walkthrough's.
        seed: seeds those draws.
    """

    def __init__(self, walkthroughs: Mapping[str, Sequence[str]], synthesise: Callable[[str], str],
                 error_rate: float = 0.0, seed: int = 0) -> None:
        if not 0.0 <= error_rate <= 1.0:
            raise ValueError("error_rate is a probability")
        self.walkthroughs = {k: list(v) for k, v in walkthroughs.items()}
        self.synthesise = synthesise
        self.error_rate = error_rate
        self.seed = seed
        self.identity = f"compliant(error_rate={error_rate:g}, seed={seed})"

    # ----------------------------------------------------------------- acting
    def act(self, messages: Sequence[Message]) -> str:
        system = messages[0]["content"]
        line = next((ln for ln in system.splitlines() if ln.startswith("Your task: ")), "")
        instruction = line.removeprefix("Your task: ").strip()
        if instruction not in self.walkthroughs:
            raise ValueError("the compliant backbone knows no walkthrough for this task's instruction")
        plan = self.walkthroughs[instruction]
        issued = [m["content"].strip() for m in messages if m["role"] == "assistant"]
        observations = [m["content"] for m in messages if m["role"] == "user"]
        match = _ADMISSIBLE.search(observations[-1])
        admissible = [a.strip() for a in match.group(1).split(", ")] if match else []
        for command in commands_in(guidance_rules(system)):
            if not command.negated and command.text in admissible and command.text not in issued:
                return command.text
        step = len(issued)
        draw = random.Random(hashlib.sha256(f"{self.seed}|{instruction}|{step}".encode()).digest())
        if admissible and draw.random() < self.error_rate:
            return draw.choice(admissible)
        return self._next_of(plan, issued, admissible)

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
            text = self.act(messages)
        else:
            prompt = messages[-1]["content"]
            text = "yes" if "Answer with exactly one word: yes or no" in prompt else self.synthesise(prompt)
        return Completion(text, 0, 0, 0.0)

    def generate_batch(self, batch: Sequence[Sequence[Message]],
                       config: GenerationConfig = GenerationConfig()) -> list[Completion]:
        return [self.generate(m, config) for m in batch]

    def score(self, messages: Sequence[Message], candidates: Sequence[str], reduction: str = "sum") -> Scores:
        chosen = self.act(messages)
        return Scores(tuple(0.0 if c == chosen else -10.0 for c in candidates), 0, 0)

    def describe(self) -> dict[str, Any]:
        return {"identity": self.identity, "kind": "scripted (an instrument for injection studies)"}
