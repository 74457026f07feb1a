"""Labels grounded in the world's true state: an abstraction's checkable claims, checked
against what the engine knows of its source tasks (:class:`~ap_gym.types.WorldFacts`, which
the protocol records per training task in ``worlds.jsonl``).

:class:`EnvironmentLabeller` reads the records an abstraction came from, so it sees a
failed command repeated word for word and a command the benchmark lacks. The paper's own
error types are claims about the world, written in prose; this labeller extracts them and
checks each against the engine's facts:

* **location**: "the mug is usually in the cabinet", "find the key in the drawer", "go to
  the fridge to get the lettuce": is the object (an instance such as "mug 1", or any of its
  kind) at that holder when the task starts, or put there by the winning plan?
* **precondition**: "you need the blue key to unlock the chest", "heat the egg with the
  stoveburner", "slicing requires a knife": does the engine require that, or something
  else (the chest's own key, the microwave)?
* **order**: "take the apple before opening the fridge", "first A, then B": on one
  object, does the winning plan do them in the opposite order?
* **overgeneralised**: "opening the drawer never works": the command failed in a source
  record, but it worked in another record or is a step of a winning plan of the family.
* **universal**: "the key is always in the drawer": true of the source task, false in
  another task of the family.

A claim the facts cannot settle (an object or action the engine says nothing about; a
benchmark whose engine gives no facts, such as ScienceWorld here) stays unchecked, and an
abstraction with no checked claim is unclassified: never "correct". What each engine
lets this see is :data:`SEES`; the labeller's measured precision and recall per error type
is the card ``ap_gym/report/labeller.json`` (``benchmarks/grounded_card.py``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ap_gym.report.labels import Label
from ap_gym.types import WorldFacts

__all__ = ["CLAIM_TYPES", "SEES", "Claim", "GroundedLabeller", "claims_in"]

#: The error types this labeller checks (a flag's reason starts with one of them).
CLAIM_TYPES = ("location", "precondition", "order", "overgeneralised", "universal")

#: What each engine's facts let the labeller check (the rest stays unclassified).
SEES: dict[str, tuple[str, ...]] = {
    "textworld": ("location", "precondition", "order", "overgeneralised", "universal"),
    "alfworld": ("location", "precondition", "order", "overgeneralised", "universal"),
    "shop": ("order", "overgeneralised"),
    "webshop": (),
    "scienceworld": (),
}

_ART = r"(?:the |a |an |some |any |your |its )?"
_PHRASE = r"[a-z][a-z0-9\-]*(?: [a-z0-9][a-z0-9\-]*){0,3}?"
_END = r"(?=$|[.,;:!?)]| to | and | so | or | before | after | then | which | where | when | if | unless | first| only)"
_HOLDER = rf"(?P<y>{_PHRASE})"
_THING = rf"(?P<x>{_PHRASE})"
_ADVERB = r"(?:usually |always |often |typically |normally |generally |mostly |sometimes |probably |likely )?"

_LOCATION = [
    re.compile(rf"\b{_ART}{_THING} (?:is|are|was|were|can be|may be|will be|should be) {_ADVERB}"
               rf"(?:found |kept |located |stored |placed |sitting |lying )?(?:in|on|inside|at|under|on top of) "
               rf"{_ART}{_HOLDER}{_END}"),
    re.compile(rf"\b{_ART}{_THING} (?:sits|lies|rests|waits|lives|stays) {_ADVERB}(?:in|on|inside|at|under) "
               rf"{_ART}{_HOLDER}{_END}"),
    re.compile(rf"\b(?:find|get|grab|fetch|look for|search for|locate|pick up|collect) {_ART}{_THING} "
               rf"(?:in|on|inside|from|at|under) {_ART}{_HOLDER}{_END}"),
    re.compile(rf"\bgo to {_ART}{_HOLDER} (?:to|and) (?:get|find|take|grab|fetch|pick up|collect) {_ART}{_THING}{_END}"),
    re.compile(rf"\b{_ART}(?P<y>{_PHRASE}) (?:has|holds|contains) {_ART}{_THING}{_END}"),
]
_OR = re.compile(rf",? or (?:in |on |inside |at |under )?{_ART}(?P<alt>{_PHRASE}){_END}")
#: Words before a location that make it a goal or a hypothesis, not a claim about the start.
_GOAL = re.compile(r"\b(?:make sure|ensure|so that|until|once|after|when|goal|task is|must be|should be|needs to be|"
                   r"need to be|has to be|have to be|want|wants|put|place|move|bring|carry|if|whether|check)\b[^.;]*$")

_ACTIONS = r"heating|warming|cooling|chilling|cleaning|washing|rinsing|cutting|slicing|chopping|dicing|unlocking|" \
           r"opening|cooking|heat|warm|cool|chill|clean|wash|rinse|cut|slice|chop|dice|unlock|open|cook"
_PRECONDITION = [
    re.compile(rf"\b(?P<verb>{_ACTIONS})s? {_ART}{_THING}? ?(?:requires|needs|takes|calls for) "
               rf"{_ART}{_HOLDER}{_END}"),
    re.compile(rf"\b(?:need|needs|require|requires|must use|have to use|has to use|should use|must have|"
               rf"need to use|need to have) {_ART}{_HOLDER} (?:to|for|in order to) (?P<verb>{_ACTIONS})(?:ing)? "
               rf"{_ART}{_THING}{_END}"),
    re.compile(rf"\buse {_ART}{_HOLDER} to (?P<verb>{_ACTIONS}) {_ART}{_THING}{_END}"),
    re.compile(rf"\b(?P<verb>{_ACTIONS}) {_ART}{_THING} (?:with|using|in) {_ART}{_HOLDER}{_END}"),
    re.compile(rf"\b{_ART}{_HOLDER} (?P<verb>opens|unlocks|heats|cools|cleans|cuts|slices) {_ART}{_THING}{_END}"),
    re.compile(rf"\b{_ART}{_HOLDER} (?:is needed|is required|is necessary) (?:to|for) (?P<verb>{_ACTIONS})(?:ing)? "
               rf"{_ART}{_THING}{_END}"),
]
_VERB = {"warm": "heat", "chill": "cool", "wash": "clean", "rinse": "clean", "opens": "open", "unlocks": "unlock",
         "heats": "heat", "cools": "cool", "cleans": "clean", "cuts": "cut", "slices": "slice"}

_STEP = r"(?:go to|take|pick up|get|grab|put|place|move|open|close|heat|cool|clean|slice|cut|unlock|examine|use|" \
        r"turn on|toggle|cook|chop|dice|insert|drop|eat|look at|click)"
_ORDER = [
    re.compile(rf"\b(?P<a>{_STEP} [^.;,]+?) before (?P<b>(?:{_STEP}|[a-z]+ing) [^.;,]+?){_END}"),
    re.compile(rf"\bfirst,? (?P<a>{_STEP} [^.;,]+?),? (?:and )?then,? (?P<b>{_STEP} [^.;,]+?){_END}"),
    re.compile(rf"\b(?P<b>{_STEP} [^.;,]+?) (?:only )?after (?P<a>(?:{_STEP}|[a-z]+ing) [^.;,]+?){_END}"),
]
_GERUND = {"going to": "go to", "taking": "take", "picking up": "pick up", "putting": "put", "placing": "place",
           "moving": "move", "opening": "open", "closing": "close", "heating": "heat", "cooling": "cool",
           "cleaning": "clean", "slicing": "slice", "cutting": "cut", "unlocking": "unlock", "using": "use",
           "cooking": "cook", "chopping": "chop", "dicing": "dice", "examining": "examine", "clicking": "click",
           "warming": "warm", "chilling": "chill", "washing": "wash", "rinsing": "rinse",
           "getting": "get", "grabbing": "grab", "inserting": "insert", "dropping": "drop", "eating": "eat"}
_SAME_STEP = {"pick up": "take", "get": "take", "grab": "take", "place": "move", "put": "move", "insert": "move"}

_NEVER = [
    re.compile(rf"\b(?:never|don't|do not|no point in|it is useless to|it's useless to|there is no need to) "
               rf"(?:try to |bother to |bother |try )?(?P<cmd>{_STEP} [^.;,]+?){_END}"),
    re.compile(rf"\b(?P<cmd>(?:{_STEP}|[a-z]+ing) [^.;,]+?) (?:never works|does not work|doesn't work|won't work|always fails|"
               rf"is impossible|is useless|cannot work|never succeeds|is not possible){_END}"),
    re.compile(rf"\byou (?:cannot|can't|can not) (?P<cmd>{_STEP} [^.;,]+?){_END}"),
]
_UNIVERSAL = re.compile(r"\b(?:always|every|all|each|in any|any game|every game|every task|all tasks|all games|"
                        r"invariably|without exception)\b")
#: Holders that are no place of the world.
_NO_PLACE = {"hand", "hands", "inventory", "front", "place", "way", "order", "mind", "game", "task", "world", "room",
             "step", "steps", "sight", "view", "the", "it", "them", "there", "here", "time", "turn", "end", "case",
             "plan", "list", "state", "reach", "general", "fact", "most", "particular", "addition", "trouble"}
_NOT_THING = {"it", "they", "this", "that", "there", "which", "what", "item", "items", "object", "objects", "thing",
              "things", "everything", "something", "nothing", "task", "goal", "agent", "you", "target", "one"}


@dataclass(frozen=True)
class Claim:
    """One checkable claim of an abstraction: its type, its terms, and the sentence it is in."""

    kind: str
    x: str
    y: str = ""
    verb: str = ""
    universal: bool = False
    sentence: str = ""


def _sentences(text: str) -> list[str]:
    parts = re.split(r"(?<=[.!?;])\s+|\n+|(?<=:)\s+(?=[A-Z\-*\d])", text)
    return [" ".join(p.lower().replace("`", "").replace("'", "'").replace('"', "").split()) for p in parts if p.strip()]


def _clean(phrase: str) -> str:
    words = [w for w in phrase.strip(" .,;:").split() if w not in ("the", "a", "an", "some", "any", "your", "its")]
    while words and words[-1] in ("first", "there", "here", "too", "also", "again", "now", "then", "only"):
        words.pop()
    return " ".join(words)


def claims_in(text: str) -> list[Claim]:
    """The checkable claims of ``text`` (see the module docstring), in order."""
    out: list[Claim] = []
    for sentence in _sentences(text):
        universal = bool(_UNIVERSAL.search(sentence))
        for pattern in _LOCATION:
            for m in pattern.finditer(sentence):
                x, y = _clean(m.group("x")), _clean(m.group("y"))
                if not x or not y or x.split()[-1] in _NOT_THING or y.split()[-1] in _NO_PLACE:
                    continue
                if _GOAL.search(sentence[:m.start("x")]) and not m.group(0).startswith(("find", "get", "look", "go to")):
                    continue
                at = m.end("y")
                while (alt := _OR.match(sentence, at)) is not None:  # "on a countertop or in a cabinet": either
                    y, at = y + "|" + _clean(alt.group("alt")), alt.end("alt")
                out.append(Claim("location", x, y, universal=universal, sentence=sentence))
        for pattern in _PRECONDITION:
            for m in pattern.finditer(sentence):
                verb = _GERUND.get(m.group("verb"), m.group("verb"))
                verb = _VERB.get(verb, verb)
                x = _clean(m.group("x") or "")
                y = _clean(m.group("y"))
                if y and y.split()[-1] not in _NOT_THING and y not in _NO_PLACE:
                    out.append(Claim("precondition", x, y, verb=verb, universal=universal, sentence=sentence))
        for pattern in _ORDER:
            for m in pattern.finditer(sentence):
                a, b = _step(m.group("a")), _step(m.group("b"))
                if a and b:
                    out.append(Claim("order", a, b, universal=universal, sentence=sentence))
        for pattern in _NEVER:
            for m in pattern.finditer(sentence):
                command = _step(m.group("cmd"))
                if command:
                    out.append(Claim("overgeneralised", command, universal=universal, sentence=sentence))
    return list(dict.fromkeys(out))


def _step(phrase: str) -> str:
    """An action phrase as a plan step would read: verb first, articles and pronouns kept
    out ("heating it" -> "heat")."""
    phrase = " ".join(phrase.lower().split()).strip(" .,;:")
    for gerund, verb in _GERUND.items():
        if phrase.startswith(gerund + " ") or phrase == gerund:
            phrase = verb + phrase[len(gerund):]
            break
    words = [w for w in phrase.split() if w not in ("the", "a", "an", "some", "your", "its")]
    return " ".join(words)


# ---------------------------------------------------------------------- matching
def _base(name: str) -> str:
    """A name without its instance number ("mug 1" -> "mug")."""
    return re.sub(r" \d+$", "", name)


def _singular(word: str) -> str:
    if word.endswith("ives") and len(word) > 5:  # knives, shelves stay as they read: knife
        return word[:-3] + "fe"
    if word.endswith("lves") and len(word) > 5:  # shelves -> shelf
        return word[:-3] + "f"
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(("ches", "shes", "xes", "sses")):
        return word[:-2]
    return word[:-1] if word.endswith("s") and not word.endswith("ss") and len(word) > 3 else word


def _matches(phrase: str, names: Iterable[str]) -> list[str]:
    """World names ``phrase`` can mean: the instance it names ("drawer 3"), else every name
    of its kind ("key" -> "old key", "red key"; "drawers" -> "drawer 1", "drawer 2")."""
    phrase = " ".join(_singular(w) for w in phrase.split())
    names = list(names)
    exact = [n for n in names if n == phrase]
    if exact or re.search(r" \d+$", phrase):
        return exact
    head = phrase.split()[-1]
    kind = [n for n in names if _base(n) == phrase]
    return kind or [n for n in names if _base(n).split()[-1] == head and
                    all(w in _base(n).split() for w in phrase.split())]


def _plan_steps(plan: Sequence[str]) -> list[tuple[str, list[str]]]:
    """Each plan step as (verb, its words)."""
    out = []
    for step in plan:
        words = step.lower().split()
        verb = " ".join(words[:2]) if words[:2] in (["go", "to"], ["pick", "up"], ["look", "at"], ["turn", "on"]) \
            else words[0] if words else ""
        out.append((_SAME_STEP.get(verb, verb), words))
    return out


def _in_plan(action: str, plan: Sequence[str]) -> list[int]:
    """Indices of plan steps that do ``action`` (its verb, and its object's words)."""
    words = action.split()
    verb = " ".join(words[:2]) if words[:2] in (["go", "to"], ["pick", "up"], ["look", "at"], ["turn", "on"]) \
        else words[0] if words else ""
    verb = _SAME_STEP.get(verb, verb)
    rest = [_singular(w) for w in words[len(verb.split()):] if w not in ("it", "them", "to", "in", "on", "from",
                                                                          "with", "into", "onto")]
    found = []
    for i, (v, step) in enumerate(_plan_steps(plan)):
        if v != verb:
            continue
        bases = {_singular(w) for w in step}
        if all(w in bases or w.isdigit() for w in rest[:2]):
            found.append(i)
    return found


def _object_words(action: str) -> set[str]:
    return {_singular(w) for w in action.split()[1:] if w.isalpha() and w not in
            ("to", "in", "on", "from", "with", "into", "onto", "up", "it", "them", "at")}


# ---------------------------------------------------------------------- labeller
@dataclass(frozen=True)
class GroundedLabeller:
    """Flags an abstraction whose checkable claims the world's facts contradict.

    Args:
        worlds: task id -> :class:`~ap_gym.types.WorldFacts` (a setting's ``worlds.jsonl``).
        benchmark: named in the reasons, and what :data:`SEES` says it can check.
    """

    worlds: Mapping[str, WorldFacts] = field(default_factory=dict)
    benchmark: str = ""

    def __call__(self, text: str, sources: Sequence[Any] = ()) -> Label:
        reasons = [r for r, _ in self.check(text, sources) if r]
        return Label(bool(reasons), tuple(dict.fromkeys(reasons)))

    def check(self, text: str, sources: Sequence[Any] = ()) -> list[tuple[str, Claim]]:
        """Every claim with its verdict: a reason when the facts contradict it, ``""`` when
        they bear it out; unchecked claims are left out."""
        own = [self.worlds[t] for t in dict.fromkeys(getattr(s, "task_id", "") for s in sources) if t in self.worlds]
        if not own:
            return []
        families = {w.family for w in own}
        others = [w for t, w in self.worlds.items() if w.family in families and w not in own]
        out: list[tuple[str, Claim]] = []
        for claim in claims_in(text):
            verdict = self._verdict(claim, own, others, sources)
            if verdict is not None:
                out.append((verdict, claim))
        return out

    def _verdict(self, claim: Claim, own: list[WorldFacts], others: list[WorldFacts],
                 sources: Sequence[Any]) -> str | None:
        if claim.kind == "overgeneralised":
            return self._overgeneralised(claim, own + others, sources)
        check = {"location": _location, "precondition": _precondition, "order": _order}[claim.kind]
        results = [r for r in (check(claim, w) for w in own) if r is not None]
        if not results:
            return None
        if not all(results):  # false in a source task's own world
            return f"{claim.kind}: {_say(claim)} is false in the source task's world ({own[0].engine})"
        if claim.universal:
            elsewhere = [w.task_id for w in others if check(claim, w) is False]
            if elsewhere:
                return (f"universal: {_say(claim)} holds in the source task but not in {len(elsewhere)} other task(s) "
                        f"of its family (e.g. {elsewhere[0]})")
        return ""

    @staticmethod
    def _overgeneralised(claim: Claim, worlds: list[WorldFacts], sources: Sequence[Any]) -> str | None:
        """A command said never to work that failed in a source record, yet worked in
        another record or is a step of a winning plan of the family."""
        from ap_gym.text import failed_action

        steps = [(a.lower(), o) for s in sources for a, o in getattr(s, "steps", ())]
        tried = [i for i, (a, _) in enumerate(steps) if _in_plan(claim.x, [a])]
        if not tried or not any(failed_action(steps[i][1]) for i in tried):
            return None  # no failure to over-generalise from: not this error
        worked = any(not failed_action(steps[i][1]) for i in tried)
        planned = [w.task_id for w in worlds if _in_plan(claim.x, w.plan)]
        if worked or planned:
            where = "a source record" if worked else f"the winning plan of {planned[0]}"
            return f"overgeneralised: {claim.x!r} failed once but works ({where})"
        return ""


def _say(claim: Claim) -> str:
    if claim.kind == "location":
        return f"'{claim.x}' at '{claim.y}'"
    if claim.kind == "precondition":
        return f"'{(claim.verb + ' ' + claim.x).strip()}' needs '{claim.y}'"
    return f"'{claim.x}' before '{claim.y}'"


def _location(claim: Claim, world: WorldFacts) -> bool | None:
    """True: some instance of the object starts at (or the plan puts it at) such a holder;
    False: the object is in this world and none is; None: the world does not say."""
    things = _matches(claim.x, world.where)
    if not things:
        return None
    holders = {h for y in claim.y.split("|") for h in
               (_matches(y, world.objects) or _matches(y, {h for v in world.where.values() for h in v}))}
    if not holders:  # the object is in this world, and no such holder is: it is not there
        return False
    if any(set(world.where[t]) & holders for t in things):
        return True
    for verb, words in _plan_steps(world.plan):  # where the plan puts it is where it ends up: not a false claim
        if verb in ("move", "put") and any(t in " ".join(words) for t in things) and \
                any(h in " ".join(words) for h in holders):
            return True
    return False


def _precondition(claim: Claim, world: WorldFacts) -> bool | None:
    """True/False: the engine requires (not) that for the action; None: it does not say."""
    keys = []
    if claim.x:
        keys = [f"{claim.verb} {n}" for n in _matches(claim.x, world.objects) if f"{claim.verb} {n}" in world.needs]
    needed = [n for k in keys for n in world.needs[k]] or list(world.needs.get(claim.verb, ()))
    if not needed:
        return None
    tools = _matches(claim.y, world.objects) or [claim.y]
    return any(t == n or _base(t) == _base(n) or _base(n).endswith(_base(t)) for t in tools for n in needed)


def _order(claim: Claim, world: WorldFacts) -> bool | None:
    """False when the plan does both on one object and the claimed second comes first."""
    a, b = _in_plan(claim.x, world.plan), _in_plan(claim.y, world.plan)
    if not a or not b:
        return None
    pronoun = any(w in ("it", "them") for w in (claim.x + " " + claim.y).split())  # "before heating it"
    shared = _object_words(claim.x) & _object_words(claim.y) or pronoun or \
        not _object_words(claim.y) or not _object_words(claim.x)
    if not shared:
        return None
    return min(a) < max(b)
