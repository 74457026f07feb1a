"""The error-reproduction audit (spec: "Error-reproduction audit (provenance)").

An operational bias labeller flags an abstraction by a stated protocol; "not flagged"
means only that: it may be unclassified, never "correct". The built-in protocol per
benchmark (:class:`GrammarLabeller`): an abstraction is flagged when it quotes a command
(in quotes or backticks) whose verb the benchmark's command grammar does not have, for
example ``"grab the mug"`` in ScienceWorld or ``"teleport to kitchen"`` in TextWorld.
A callable ``(text) -> bool`` (an LLM judge, say) can be used instead or on top.

The audit compares the flag rate of abstractions with at least one flagged parent
against those with none, and estimates, for one synthesis invocation, q (probability
of flagged-parent exposure), α (flagged-output rate given exposure) and η (admission
probability); q·α·η > 0 means a positive probability of admitting a flagged descendant.
This is association, not causation.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the records come through ap_gym.protocol.results
    from ap_gym.memory.store import Abstraction

__all__ = ["VERBS", "AuditRow", "GrammarLabeller", "audit"]

VERBS = {
    "textworld": {"look", "inventory", "go", "take", "drop", "put", "insert", "open", "close", "unlock", "lock",
                  "examine", "eat", "drink", "cook", "slice", "chop", "dice", "prepare", "read", "north", "south",
                  "east", "west"},
    "scienceworld": {"open", "close", "activate", "deactivate", "connect", "disconnect", "use", "look", "read",
                     "move", "pick", "put", "pour", "dunk", "mix", "go", "teleport", "eat", "flush", "focus",
                     "wait", "wait1", "inventory", "examine", "task", "plant", "water"},
    "alfworld": {"go", "take", "put", "move", "open", "close", "toggle", "heat", "cool", "clean", "slice",
                 "use", "look", "inventory", "examine"},
    "shop": {"search", "click"},
}
_QUOTED = re.compile(r"[\"'`\u2018\u201c]([a-z][a-z0-9 \-]{1,60})[\"'`\u2019\u201d]", re.I)


@dataclass(frozen=True)
class GrammarLabeller:
    """Flags quoted commands whose first word is not a verb of ``benchmark``."""

    benchmark: str

    def __call__(self, text: str) -> bool:
        verbs = VERBS.get(self.benchmark)
        if not verbs:
            return False
        for match in _QUOTED.finditer(text):
            words = match.group(1).strip().lower().split()
            if 1 <= len(words) <= 8 and words[0] not in verbs:
                return True
        return False


@dataclass(frozen=True)
class AuditRow:
    setting: str
    abstractions: int
    flagged: int
    with_flagged_parent: int
    flagged_given_flagged_parent: int
    without_flagged_parent: int
    flagged_given_no_flagged_parent: int
    rejected: int

    @property
    def rate_exposed(self) -> float:
        return self.flagged_given_flagged_parent / self.with_flagged_parent if self.with_flagged_parent else float("nan")

    @property
    def rate_unexposed(self) -> float:
        return (self.flagged_given_no_flagged_parent / self.without_flagged_parent
                if self.without_flagged_parent else float("nan"))

    @property
    def gap(self) -> float:
        return self.rate_exposed - self.rate_unexposed

    @property
    def q(self) -> float:
        return self.with_flagged_parent / self.abstractions if self.abstractions else float("nan")

    @property
    def alpha(self) -> float:
        return self.rate_exposed

    @property
    def eta(self) -> float:
        invocations = self.abstractions + self.rejected
        return self.abstractions / invocations if invocations else float("nan")


def audit(setting: str, abstractions: Sequence[Abstraction], labeller: Callable[[str], bool],
          rejected: int = 0) -> AuditRow:
    """The audit table row of one setting's stored abstractions (inactive ones included)."""
    flags = {a.id: bool(labeller(a.text)) for a in abstractions}
    exposed = [a for a in abstractions if any(flags.get(p, False) for p in a.parents)]
    unexposed = [a for a in abstractions if a not in exposed]
    return AuditRow(
        setting=setting,
        abstractions=len(abstractions),
        flagged=sum(flags.values()),
        with_flagged_parent=len(exposed),
        flagged_given_flagged_parent=sum(flags[a.id] for a in exposed),
        without_flagged_parent=len(unexposed),
        flagged_given_no_flagged_parent=sum(flags[a.id] for a in unexposed),
        rejected=rejected,
    )
