"""Text heuristics that several layers share, depending on nothing else in ap-gym.

* :func:`failed_action`: whether an observation is the feedback of an action that did
  nothing, in the benchmarks' own words. Records keep such observations when they are
  compressed (corrective synthesis needs them most), and the audit reads a command that
  always drew them as one that failed.
* :func:`count_tokens` and :func:`cut_tokens`: a tokenizer-free token budget, the same for
  every backbone so that prompts compare.
* :func:`commands_in`: the commands a piece of guidance recommends or forbids. The audit's
  labeller reads them, and so does the scripted backbone that follows guidance.
* :class:`Grammar`: what an env declares about its commands (their verbs and shape), which
  a run records with its results and the audit checks abstractions against.

It is a leaf on purpose: envs, memory, policies, backbones and the report all read text,
and none of them may import another to do it (shared/DESIGN.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ACTION_WORDS", "FAILED_FEEDBACK", "Command", "Grammar", "commands_in", "count_tokens", "cut_tokens",
           "failed_action", "normalise_command"]

#: Feedback that says an action did nothing, in the benchmarks' own words.
FAILED_FEEDBACK = re.compile(
    r"nothing happens|you can't|you cannot|can't see|don't see|not a verb|didn't understand|don't understand"
    r"|no known action|not clear how|invalid action|unknown action|not possible|isn't possible|ambiguous request"
    r"|you need to|that's not|isn't open|not open|no such|not available", re.I)


def failed_action(observation: str) -> bool:
    """Whether an observation is the feedback of an action that did nothing."""
    return bool(FAILED_FEEDBACK.search(observation[:300]))


_TOKEN = re.compile(r"\w+|[^\w\s]")


def count_tokens(text: str) -> int:
    """Words and punctuation marks: a tokenizer-free proxy for a budget (BPE tokenizers
    give about 1.3 times as many), the same for every backbone so that prompts compare."""
    return len(_TOKEN.findall(text))


def cut_tokens(text: str, tokens: int) -> str:
    """``text`` cut to about ``tokens`` (whole words; ``[...]`` marks a cut)."""
    if tokens <= 0:
        return ""
    out, used = [], 0
    for w in text.split():
        used += count_tokens(w)
        if used > tokens:
            return " ".join(out) + " [...]"
        out.append(w)
    return text


#: Words that make a quoted span an instruction to act: the command verbs of every shipped
#: benchmark, plus the imperative verbs models write when they invent commands.
ACTION_WORDS = frozenset({
    "activate", "add", "bake", "boil", "buy", "carry", "catch", "check", "chill", "choose", "chop", "clean", "click",
    "climb", "close", "collect", "connect", "cook", "cool", "cut", "deactivate", "dice", "disconnect", "drink",
    "drop", "dunk", "east", "eat", "enter", "examine", "exit", "fetch", "fill", "find", "flush", "focus", "freeze",
    "fry", "get", "give", "go", "grab", "grill", "head", "heat", "hold", "insert", "inspect", "inventory", "leave",
    "light", "lock", "look", "microwave", "mix", "move", "navigate", "north", "open", "order", "pick", "place",
    "plant", "pour", "prepare", "press", "pull", "purchase", "push", "put", "read", "rinse", "roast", "run",
    "search", "select", "set", "show", "slice", "south", "switch", "take", "task", "teleport", "throw", "toggle",
    "travel", "turn", "unlock", "use", "wait", "wait1", "walk", "warm", "wash", "water", "west",
})
_QUOTED = re.compile(r"\"([^\"\n]{1,80})\"|`([^`\n]{1,80})`|\u201c([^\u201d\n]{1,80})\u201d"
                     r"|\u2018([^\u2019\n]{1,80})\u2019|(?<![\w])'([^'\n]{1,80})'(?![\w])")
BRACKETED = re.compile(r"\b([a-z_]+)\[([^\]\n]*)\]", re.I)
_NEGATION = re.compile(r"\b(?:never|don't|do not|dont|avoid|not|instead of|rather than|no need to)\b", re.I)
_CLAUSE = re.compile(r"[.;!?](?=\s|$)")


@dataclass(frozen=True)
class Command:
    """A command a text names: normalised (lower case, single spaces), its verb, whether it
    sits in a negated clause, and whether it is written ``verb[argument]``."""

    text: str
    verb: str
    negated: bool
    bracketed: bool


def normalise_command(text: str) -> str:
    """Lower case, single spaces, no trailing punctuation; ALFWorld's old ``put X in/on Y``
    as the ``move X to Y`` its engine speaks."""
    text = " ".join(text.lower().split()).strip(" .,:;!?")
    m = re.match(r"^put (.+?) (?:in/on|in|on|into|onto) (.+)$", text)
    return f"move {m.group(1)} to {m.group(2)}" if m else text


def commands_in(text: str) -> list[Command]:
    """The commands a text quotes (in quotes or backticks, or ``verb[...]``), each with
    whether it sits in a negated clause. A quoted span counts as a command only when its
    first word is an action verb (:data:`ACTION_WORDS`); quoted objects, names and search
    queries are not commands, and an apostrophe inside a word ("don't") opens no quote."""
    found: list[Command] = []
    start = 0
    for clause_end in [m.start() for m in _CLAUSE.finditer(text)] + [len(text)]:
        clause = text[start:clause_end + 1]
        spans: list[tuple[int, str, bool]] = []
        for m in _QUOTED.finditer(clause):
            inner = next(g for g in m.groups() if g is not None).strip()
            spans.append((m.start(), inner, bool(BRACKETED.fullmatch(inner))))
        for m in BRACKETED.finditer(clause):
            if not any(s <= m.start() < s + len(t) + 2 for s, t, _ in spans):
                spans.append((m.start(), m.group(0), True))
        for pos, inner, bracketed in sorted(spans):
            if bracketed:
                verb = BRACKETED.fullmatch(inner).group(1).lower()  # type: ignore[union-attr]
            else:
                words = inner.lower().split()
                if not words or words[0] not in ACTION_WORDS or len(words) > 10:
                    continue  # an object, a name or a query: not a command
                verb = words[0]
            negated = bool(_NEGATION.search(clause[:pos]))
            found.append(Command(normalise_command(inner), verb, negated, bracketed))
        start = clause_end + 1
    return found


@dataclass(frozen=True)
class Grammar:
    """An env's command grammar, as far as the audit checks it.

    Attributes:
        verbs: the first words of its commands.
        bracketed: commands are written ``verb[argument]`` (WebShop's ``click[...]``).
        numbered_objects: objects are named with a number (ALFWorld's ``drawer 7``), so a
            numbered object absent from the source records' worlds is absent.
        ids: a regular expression for item ids (the shop's product ids), which an
            abstraction may only name when a source record shows them.
    """

    verbs: frozenset[str]
    bracketed: bool = False
    numbered_objects: bool = False
    ids: str | None = None

    @classmethod
    def of(cls, verbs: Iterable[str], **style: Any) -> Grammar:
        return cls(frozenset(verbs), **style)

    def to_dict(self) -> dict[str, Any]:
        return {"verbs": sorted(self.verbs), "bracketed": self.bracketed, "numbered_objects": self.numbered_objects,
                "ids": self.ids}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Grammar:
        return cls(frozenset(map(str, data.get("verbs") or ())), bool(data.get("bracketed")),
                   bool(data.get("numbered_objects")), data.get("ids") or None)
