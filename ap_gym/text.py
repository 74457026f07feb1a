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

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ACTION_WORDS", "FAILED_FEEDBACK", "GOAL_VERBS", "INVENTED_VERBS", "Command", "Grammar", "commands_in", "count_tokens", "cut_tokens",
           "failed_action", "normalise_command", "guidance_rules", "search_folded"]

#: Feedback that says an action did nothing, in the benchmarks' own words.
FAILED_FEEDBACK = re.compile(
    r"nothing happens|you can't|you cannot|can't see|don't see|not a verb|didn't understand|don't understand"
    r"|no known action|not clear how|invalid action|unknown action|not possible|isn't possible|ambiguous request"
    r"|you need to|that's not|isn't open|not open|no such|not available|requires (?:a|an|the|some) |you'll need|"
    r"you will need|first you need|is locked", re.I)


def failed_action(observation: str) -> bool:
    """Whether an observation is the feedback of an action that did nothing."""
    return search_folded(FAILED_FEEDBACK, observation[:300])


@functools.lru_cache(maxsize=64)
def _case_sensitive_twin(pattern: re.Pattern[str]) -> re.Pattern[str] | None:
    if not pattern.flags & re.IGNORECASE or pattern.pattern != pattern.pattern.lower():
        return None
    return re.compile(pattern.pattern, pattern.flags & ~re.IGNORECASE)


def search_folded(pattern: re.Pattern[str], text: str) -> bool:
    """Whether ``pattern`` occurs in ``text``, as ``pattern.search``, in a tenth of the time for
    the refusal patterns every step is read with. Python's ``re`` tries each alternative of a
    case-insensitive pattern case-insensitively at every position (about 60-80 µs on the
    300 characters of an observation that a step reads, a good part of what a wrapped
    TextWorld step adds); for a pattern written in lower case and ASCII text, lower-casing
    the text and matching case-sensitively gives the same answer. Other patterns and text
    take ``pattern.search``."""
    twin = _case_sensitive_twin(pattern)
    if twin is not None and text.isascii():
        return twin.search(text.lower()) is not None
    return pattern.search(text) is not None


_TOKEN = re.compile(r"\w+|[^\w\s]")


def count_tokens(text: str) -> int:
    """Words and punctuation marks: a tokenizer-free proxy for a budget (BPE tokenizers
    give about 1.3 times as many), the same for every backbone so that prompts compare."""
    return len(_TOKEN.findall(text))


def cut_tokens(text: str, tokens: int) -> str:
    """``text`` cut to about ``tokens`` (whole words; ``[...]`` marks a cut)."""
    if tokens <= 0:
        return ""
    out: list[str] = []
    used = 0
    for w in text.split():
        used += count_tokens(w)
        if used > tokens:
            return " ".join(out) + " [...]"
        out.append(w)
    return text


#: Words that make a quoted span an instruction to act: the command verbs of every shipped
#: benchmark, plus the imperative verbs models write when they invent commands.
ACTION_WORDS = frozenset({
    "attach", "brew", "checkout", "detach", "drag", "jump", "kick", "lift", "melt", "plug", "remove", "scroll",
    "shake", "spray", "stir", "unplug", "activate", "add", "bake", "boil", "buy", "carry", "catch", "check", "chill", "choose", "chop", "clean", "click",
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
_NEGATION = re.compile(r"\b(?:never|don't|do not|dont|avoid|not|instead of|rather than|no need to|stop)\b", re.I)
#: Words after a command that say it does not work ("'heat pot' is not a command").
_DENIED = re.compile(r"^\W{0,3}(?:is not|isn't|does not|doesn't|did not|didn't|did nothing|won't|will not|fails|failed"
                     r"|never works|is invalid|is no command|is not valid)\b", re.I)
#: What opens a command in a quote: a button label after click/press/select is the Shop's click[label].
_BUTTON = re.compile(r"\b(?:click|press|select|hit|tap)(?:\s+(?:on|the))*\s*$", re.I)


def list_marker(bullets: str = "") -> str:
    """The pattern of a bullet, a number or a step label, the part of a list marker every
    reader of lists shares; ``bullets`` adds characters that may bullet a line (the claim
    reader adds "#" headings, and keeps "first"/"then", which make its order claims)."""
    return r"(?:[-*\u2022>" + re.escape(bullets) + r"]+|\(?\d{1,2}[.):]|step\s*\d+\s*[:.)-]?)"


#: A line's list marker or step label: what a plan puts before each command.
_MARKER = re.compile(r"^\s*(?:" + list_marker() + r"|(?:first|then|next|finally|afterwards|lastly)\b,?)\s*", re.I)
#: Where an unquoted command ends inside its clause.
_COMMAND_END = re.compile(r"\s*(?:,|\(|\bthen\b|\bbefore\b|\bafter\b|\buntil\b|\bso\b|\bwhile\b|\bif\b|\bwhen\b|"
                          r"\bbecause\b|\bsince\b|\bas soon as\b|\bto (?:make|see|get|reach|finish)\b|\bfirst\b|"
                          r"\bagain\b|\bdirectly\b|\bright away\b|\bonce\b|\bexactly\b|\bcompletes?\b|\bworks?\b|\bworked\b|\bsucceed(?:s|ed)?\b|\bfailed\b|\bfails\b|"
                          r"\bis\b|\bare\b|\bwas\b|\bdid\b|\bdoes\b|\bdo\b|\bcan\b|\bwill\b|\bwon't\b|\bshould\b|"
                          r"\bmust\b|\bhelps?\b|\bnever\b|\balone\b|\bby itself\b|\bthere\b|\bhere\b)", re.I)
#: Verbs that state an aim in prose rather than a command ("find the mug", "check the drawers").
GOAL_VERBS = frozenset({"find", "locate", "check", "explore", "inspect", "make", "ensure", "try", "keep", "remember",
                        "note", "compare", "verify", "repeat", "continue", "return", "be", "avoid", "start", "stop",
                        "skip"})
_GENERIC = ("it", "them", "the target", "the object", "the item", "items", "something", "anything", "everything",
            "each", "the one", "objects", "the product", "the dish", "the ingredients", "what", "a ", "an ", "any ",
            "every ", "all ", "the matching", "the right", "the first", "the best", "one ")
_GENERIC_NOUNS = {"destination", "receptacle", "container", "location", "target", "object", "objects", "item", "items",
                  "thing", "things", "product", "result", "results", "option", "options", "ingredient", "ingredients",
                  "dish", "appliance", "tool"}
#: Verbs models invent for commands a benchmark spells otherwise; unquoted in a plan's step,
#: they are read as commands (a prose verb such as "fill" or "read" is not).
INVENTED_VERBS = frozenset({"grab", "wash", "teleport", "melt", "microwave", "purchase", "fetch", "walk", "run",
                            "climb", "press", "push", "pull", "throw", "bake", "grill", "roast", "chill",
                            "boil", "freeze", "rinse", "travel", "navigate", "enter", "exit", "leave", "lift", "stir",
                            "shake", "drag", "kick", "jump", "scroll", "attach", "detach", "spray", "brew", "checkout",
                            "plug", "unplug", "remove"})


@dataclass(frozen=True)
class Command:
    """A command a text names: normalised (lower case, single spaces), its verb, whether it
    sits in a negated clause, whether it is written ``verb[argument]``, whether the text
    presents it as a command (``explicit``: quoted, bracketed, or a plan's step with a
    concrete object) rather than mentions it in prose, and whether it is written in
    quotes, backticks or brackets (``quoted``)."""

    text: str
    verb: str
    negated: bool
    bracketed: bool
    explicit: bool = True
    quoted: bool = True


def normalise_command(text: str) -> str:
    """Lower case, single spaces, no trailing punctuation; ALFWorld's old ``put X in/on Y``
    as the ``move X to Y`` its engine speaks."""
    text = " ".join(text.lower().split()).strip(" .,:;!?")
    m = re.match(r"^put (.+?) (?:in/on|in|on|into|onto) (.+)$", text)
    return f"move {m.group(1)} to {m.group(2)}" if m else text


def _clauses(text: str) -> list[tuple[str, bool]]:
    """The text's clauses, each with whether it stands alone as a command would: a plan's
    line or step, or what follows a colon."""
    out: list[tuple[str, bool]] = []
    for line in text.splitlines():
        marker = _MARKER.match(line)
        body = line[marker.end():] if marker else line
        for k, sentence in enumerate(re.split(r"(?<=[.!?])\s+", body)):
            for j, piece in enumerate(re.split(r"[:;]\s+", sentence)):
                if piece.strip():
                    out.append((piece, (marker is not None and k == 0 and j == 0) or j > 0 or
                                bool(_MARKER.match(piece))))
    return out


def _quoted(clause: str) -> list[tuple[int, str, bool, bool]]:
    """Quoted, backticked and bracketed spans: (position, text, bracketed, a button label)."""
    spans: list[tuple[int, str, bool, bool]] = []
    for m in _QUOTED.finditer(clause):
        inner = next(g for g in m.groups() if g is not None).strip()
        button = bool(_BUTTON.search(clause[:m.start()])) and not BRACKETED.fullmatch(inner)
        spans.append((m.start(), inner, bool(BRACKETED.fullmatch(inner)), button))
    for m in BRACKETED.finditer(clause):
        if not any(s <= m.start() < s + len(t) + 2 for s, t, _, _ in spans):
            spans.append((m.start(), m.group(0), True, False))
    return sorted(spans)


def _negated(clause: str, start: int, end: int) -> bool:
    return bool(_NEGATION.search(clause[:start])) or bool(_DENIED.search(clause[end:]))


def _unquoted(clause: str, standalone: bool, verbs: frozenset[str]) -> list[Command]:
    """The commands an unquoted clause opens with ("go up and open wardrobe": two), when it
    opens with a command verb."""
    body = _MARKER.sub("", clause, count=1) if standalone else clause
    offset = len(clause) - len(body.lstrip())
    body = body.strip()
    found: list[Command] = []
    while body:
        words = body.lower().split()
        if not words or words[0] not in verbs or words[0] in GOAL_VERBS or words[:2] == ["look", "for"]:
            break
        cut = _COMMAND_END.search(body, len(words[0]))
        head = body[:cut.start()] if cut else body
        joined = re.split(r"\s+and\s+(?=(\w+))", head, maxsplit=1)
        command = normalise_command(joined[0])
        parts = command.split()
        if not parts or len(parts) > 8:
            break
        rest = " ".join(w for w in parts[1:] if w not in ("up", "down", "on", "in", "out", "off", "at", "to"))
        concrete = not rest or not ((rest + " ").startswith(_GENERIC) or _GENERIC_NOUNS & set(rest.split()))
        end = offset + len(joined[0])
        found.append(Command(command, parts[0], _negated(clause, offset, end), False, standalone and concrete, False))
        if len(joined) < 2:
            break
        tail = head[len(joined[0]):]
        offset += len(joined[0]) + len(tail) - len(tail.lstrip()[len("and"):].lstrip())
        body = tail.strip()[len("and"):].strip()
    return found


def commands_in(text: str, verbs: frozenset[str] | None = None) -> list[Command]:
    """The commands a text names, each with whether it sits in a negated clause.

    Quoted (quotes, backticks) and ``verb[...]`` spans count when they start with an action
    verb (:data:`ACTION_WORDS`); a quoted label after click/press/select is the Shop's
    ``click[label]``; quoted objects, names and queries are not commands, and an apostrophe
    inside a word ("don't") opens no quote. Unquoted, a clause that opens with a command
    verb (``verbs``, besides :data:`ACTION_WORDS`) names the command up to where its object
    ends; it is *explicit* when the clause is a plan's line or step or follows a colon and
    names a concrete object. A command is negated by "never", "don't", "avoid", "instead
    of" ... before it, or by "is not a command", "did nothing" ... after it.
    """
    vocabulary = ACTION_WORDS | (verbs or frozenset())
    found: list[Command] = []
    for clause, standalone in _clauses(text):
        spans = _quoted(clause)
        for pos, inner, bracketed, button in spans:
            if button:
                verb, command = "click", f"click[{inner.lower()}]"
            elif bracketed:
                verb, command = BRACKETED.fullmatch(inner).group(1).lower(), inner  # type: ignore[union-attr]  # _quoted marks a span bracketed only when BRACKETED matches it
            else:
                words = inner.lower().split()
                if not words or words[0] not in ACTION_WORDS or len(words) > 10:
                    continue  # an object, a name or a query: not a command
                verb, command = words[0], inner
            found.append(Command(normalise_command(command), verb, _negated(clause, pos, pos + len(inner) + 2),
                                 bracketed or button))
        if not spans:
            found += _unquoted(clause, standalone, vocabulary)
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


def guidance_rules(text: str) -> str:
    """The rules of a guidance block, without the records it shows as context (their
    ``> command`` and indented observation lines, task and outcome lines)."""
    return "\n".join(line for line in text.splitlines()
                     if line[:1] not in (" ", "\t", ">", "[")
                     and not line.startswith(("Your task:", "Task:", "Outcome:", "Trajectory:", "...")))
