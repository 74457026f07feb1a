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

from ap_gym.report.claims import Claim, claims_in
from ap_gym.report.labels import Label
from ap_gym.types import WorldFacts

__all__ = ["CLAIM_TYPES", "SEES", "Claim", "GroundedLabeller", "claims_in"]

#: The error types this labeller checks (a flag's reason starts with one of them).
CLAIM_TYPES = ("location", "precondition", "order", "overgeneralised", "universal", "absent", "contradicted")

#: What each engine's facts let the labeller check (the rest stays unclassified).
SEES: dict[str, tuple[str, ...]] = {
    "textworld": ("location", "precondition", "order", "overgeneralised", "universal", "absent", "contradicted"),
    "alfworld": ("location", "precondition", "order", "overgeneralised", "universal", "absent", "contradicted"),
    "shop": ("order", "overgeneralised"),
    "webshop": (),
    "scienceworld": (),
}

_SAME_STEP = {"pick up": "take", "get": "take", "grab": "take", "fetch": "take", "retrieve": "take",
              "collect": "take", "place": "move", "put": "move", "insert": "move", "drop": "move", "bring": "move",
              "carry": "move", "deliver": "move", "return": "move", "warm": "heat", "microwave": "heat",
              "chill": "cool", "fridge": "cool", "wash": "clean", "rinse": "clean", "cut": "slice", "chop": "slice",
              "dice": "slice", "toggle": "use", "turn on": "use", "choose": "select"}


# ---------------------------------------------------------------------- matching
#: Everyday names for the engines' names (an ALFWorld "sink" is its "sinkbasin").
SYNONYMS = {"sink": "sinkbasin", "stove": "stoveburner", "burner": "stoveburner", "counter": "countertop",
            "trash can": "garbagecan", "trash": "garbagecan", "bin": "garbagecan", "garbage can": "garbagecan",
            "tv": "television", "refrigerator": "fridge", "freezer": "fridge", "oven": "microwave", "couch": "sofa",
            "nightstand": "sidetable", "bedside table": "sidetable", "tub": "bathtubbasin", "bathtub": "bathtubbasin",
            "desk lamp": "desklamp", "lamp": "desklamp|floorlamp", "towel": "handtowel|towel"}


def _base(name: str) -> str:
    """A name without its instance number ("mug 1" -> "mug")."""
    return re.sub(r" \d+$", "", name)


def _singular(word: str) -> str:
    if word.endswith("ives") and len(word) > 5:  # knives -> knife
        return word[:-3] + "fe"
    if word.endswith("lves") and len(word) > 5:  # shelves -> shelf
        return word[:-3] + "f"
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(("ches", "shes", "xes", "sses", "toes")):
        return word[:-2]
    return word[:-1] if word.endswith("s") and not word.endswith(("ss", "us", "is")) and len(word) > 3 else word


def _matches(phrase: str, names: Iterable[str]) -> list[str]:
    """World names ``phrase`` can mean: the instance it names ("drawer 3"), else every name
    of its kind ("key" -> "old key", "red key"; "drawers" -> "drawer 1", "drawer 2"), read
    as one word where the world writes it so ("dish sponge" -> "dishsponge 1"), or as the
    engine's name for it ("sink" -> "sinkbasin 1")."""
    names = list(names)
    phrase = " ".join(_singular(w) for w in phrase.split())
    for candidate in (phrase, *SYNONYMS.get(_base(phrase), "").split("|")):
        if not candidate:
            continue
        number = re.search(r" (\d+)$", phrase)
        if candidate != phrase and number:
            candidate = f"{candidate} {number.group(1)}"
        found = _matches_one(candidate, names)
        if found:
            return found
    return []


def _matches_one(phrase: str, names: list[str]) -> list[str]:
    exact = [n for n in names if n == phrase or n.replace(" ", "") == phrase.replace(" ", "")]
    if exact or re.search(r" \d+$", phrase):
        if exact or not re.search(r" \d+$", phrase):
            return exact
        base, number = phrase.rsplit(" ", 1)
        return [n for n in names if _base(n).replace(" ", "") == base.replace(" ", "") and n.endswith(" " + number)]
    compact = phrase.replace(" ", "")
    kind = [n for n in names if _base(n) == phrase or _base(n).replace(" ", "") == compact]
    if kind:
        return kind
    head = phrase.split()[-1]
    return [n for n in names if _base(n).split()[-1] == head and all(w in _base(n).split() for w in phrase.split())]


def _has_kind(phrase: str, names: Iterable[str]) -> bool:
    """Whether the world has anything of ``phrase``'s kind (any instance number)."""
    return bool(_matches(re.sub(r" \d+$", "", phrase), names))


def _plan_steps(plan: Sequence[str]) -> list[tuple[str, list[str]]]:
    """Each plan step as (verb, its words)."""
    out = []
    for step in plan:
        words = step.lower().split()
        verb = " ".join(words[:2]) if words[:2] in (["go", "to"], ["pick", "up"], ["look", "at"], ["turn", "on"]) \
            else words[0] if words else ""
        out.append((_SAME_STEP.get(verb, verb), words))
    return out


_GENERIC = {"it", "them", "to", "in", "on", "from", "with", "into", "onto", "out", "of", "off", "up", "at", "thing",
            "item", "object", "stuff", "anything", "something", "everything", "one", "all", "any", "every", "back",
            "there", "here", "inside", "using", "by", "you", "your", "its", "their", "down", "away", "first"}


def _in_plan(action: str, plan: Sequence[str]) -> list[int]:
    """Indices of plan steps that do ``action`` (its verb, and its object's words, read as
    one word where the step writes them so: "dish sponge" is "dishsponge")."""
    words = action.split()
    verb = " ".join(words[:2]) if words[:2] in (["go", "to"], ["pick", "up"], ["look", "at"], ["turn", "on"]) \
        else words[0] if words else ""
    rest = [_singular(w) for w in words[len(verb.split()):] if w not in _GENERIC]
    verb = _SAME_STEP.get(verb, verb)
    found = []
    for i, (v, step) in enumerate(_plan_steps(plan)):
        if v != verb:
            continue
        bases = {_singular(w) for w in step}
        joined = "".join(step)
        if all(w in bases or w.isdigit() or _joined(w, rest, joined) or
               (len(w) >= 4 and any(b.endswith(w) for b in bases)) for w in rest[:2]):
            found.append(i)
    return found


def _joined(word: str, rest: list[str], joined: str) -> bool:
    """Whether ``word`` is part of a two-word name the step writes as one ("dish" of "dish sponge")."""
    i = rest.index(word)
    pairs = [rest[i - 1] + word] if i > 0 else []
    pairs += [word + rest[i + 1]] if i + 1 < len(rest) else []
    return any(p in joined for p in pairs)


def _object_words(action: str) -> set[str]:
    return {_singular(w) for w in action.split()[1:] if w.isalpha() and w not in _GENERIC}


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
        # the names the family's worlds know, once per text (not once per claim)
        vocabulary = frozenset(n for w in own + others for n in (*w.objects, *w.where))
        out: list[tuple[str, Claim]] = []
        for claim in claims_in(text):
            verdict = self._verdict(claim, own, others, sources, vocabulary)
            if verdict is not None:
                out.append((verdict, claim))
        for name in _absent_numbers(text, own):
            out.append((f"absent: {name!r} is in no source task's world ({own[0].engine})", Claim("absent", name)))
        return out

    def _verdict(self, claim: Claim, own: list[WorldFacts], others: list[WorldFacts],
                 sources: Sequence[Any], vocabulary: frozenset[str]) -> str | None:
        if claim.kind == "overgeneralised":
            return self._overgeneralised(claim, own, others, sources)
        if claim.kind == "outcome":
            return _outcome(claim, sources)
        if claim.kind == "location" and not claim.universal:
            absent = _absent(claim, own, vocabulary)
            if absent:
                return absent
        check = {"location": _location if not claim.negated else _not_at, "precondition": _precondition,
                 "order": _order}[claim.kind]
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
    def _overgeneralised(claim: Claim, own: list[WorldFacts], others: list[WorldFacts],
                         sources: Sequence[Any]) -> str | None:
        """A command said never to work (or forbidden) that works: it failed in a source
        record but worked in another, or it is a step of a winning plan (the source task's
        own, or, for "never works", one of the family's), or it opens a holder the engine
        says is closed and needs no key."""
        from ap_gym.text import failed_action

        if re.search(r"\b(?:closed|locked|shut)\b", claim.x):
            return None  # "you can't take it from a closed fridge": true of a closed holder, and not checked
        steps = [(a.lower(), o) for s in sources for a, o in getattr(s, "steps", ())]
        tried = [i for i, (a, _) in enumerate(steps) if _in_plan(claim.x, [a])]
        worked = [i for i in tried if not failed_action(steps[i][1])]
        if tried and not worked and claim.negated:
            return ""  # "don't X" after X failed every time here: advice the records bear out
        planned = [w.task_id for w in (own if claim.negated else own + others) if _in_plan(claim.x, w.plan)]
        opens = claim.x.split()[0] == "open" and any(
            _matches(claim.x.split(" ", 1)[1], w.needs.get("closed", ())) and not any(
                k.startswith(("unlock ", "open ")) and _matches(claim.x.split(" ", 1)[1], [k.split(" ", 1)[1]])
                for k in w.needs) for w in own)
        holder = re.split(r" (?:from|out of|in|into|to|on|inside) ", claim.x, maxsplit=1)
        openable = claim.x.split()[0] in ("take", "get", "grab", "pick", "move", "put", "place") and len(holder) > 1 and \
            any(_matches(holder[1], w.needs.get("closed", ())) for w in own)
        if worked or planned or opens or (openable and not claim.negated):
            where = ("a source record" if worked else f"the winning plan of {planned[0]}" if planned
                     else "the engine: it is closed, not locked" if opens
                     else "the engine: it works once the holder is opened")
            said = "is forbidden" if claim.negated else "is said never to work"
            return f"overgeneralised: {claim.x!r} {said}, but it works ({where})"
        return "" if tried else None


def _outcome(claim: Claim, sources: Sequence[Any]) -> str | None:
    """A command said to work that failed every time the source records issued it."""
    from ap_gym.text import failed_action

    tried = [o for s in sources for a, o in getattr(s, "steps", ()) if _in_plan(claim.x, [a.lower()])]
    if not tried:
        return None
    if all(failed_action(o) for o in tried):
        return f"contradicted: {claim.x!r} is said to work, but it failed every time the source records issued it"
    return ""


def _absent(claim: Claim, own: list[WorldFacts], vocabulary: frozenset[str]) -> str | None:
    """An object or holder the claim places in this world that the world does not have,
    though the benchmark knows such things (a name no world of the family has may be the
    reader's misreading, and stays unchecked; ``vocabulary``: every name the family's worlds
    have)."""
    for term in (claim.x, *claim.y.split("|")):
        if not term or not _has_kind(term, vocabulary):
            continue
        if not any(_matches(term, (*w.objects, *w.where)) for w in own):
            return f"absent: {term!r} is in no source task's world ({own[0].engine})"
    return None


def _absent_numbers(text: str, own: list[WorldFacts]) -> list[str]:
    """Numbered names ("drawer 7") whose kind the world has under other numbers only."""
    names = {n for w in own for n in (*w.objects, *w.where)}
    out = []
    for kind, number in re.findall(r"\b([a-z]+) (\d{1,2})\b", text.lower()):
        if kind in ("step", "steps", "within", "than", "about", "to", "of", "in", "take", "over", "under", "after"):
            continue
        name = f"{kind} {number}"
        same = [n for n in names if _base(n) == kind]
        if same and name not in names:
            out.append(name)
    return list(dict.fromkeys(out))


def _say(claim: Claim) -> str:
    if claim.kind == "location":
        return f"'{claim.x}' {'not ' if claim.negated else ''}at '{claim.y}'"
    if claim.kind == "precondition":
        need = "does not need" if claim.negated else "needs"
        return f"'{(claim.verb + ' ' + claim.x).strip()}' {need} '{claim.y}'"
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
        rooms = {"kitchen", "bathroom", "bedroom", "room", "house", "home", "floor", "apartment"}
        return None if all(y.split()[-1] in rooms for y in claim.y.split("|")) else False  # a world without rooms
    if any(set(world.where[t]) & holders for t in things):
        return True
    for verb, words in _plan_steps(world.plan if claim.verb != "start" else ()):
        # where the plan puts it is where it ends up: not a false claim, unless said to be there at the start
        if verb in ("move", "put") and any(t in " ".join(words) for t in things) and \
                any(h in " ".join(words) for h in holders):
            return True
    return False


def _not_at(claim: Claim, world: WorldFacts) -> bool | None:
    """A denied location: true where the object is in this world and none starts there."""
    result = _location(claim, world)
    return None if result is None else not result


def _precondition(claim: Claim, world: WorldFacts) -> bool | None:
    """True/False: the engine requires (not) that for the action (or, for a denial, does
    not require it); None: it does not say."""
    keys = []
    if claim.x:
        keys = [f"{claim.verb} {n}" for n in _matches(claim.x, world.objects) if f"{claim.verb} {n}" in world.needs]
    needed = [n for k in keys for n in world.needs[k]] or list(world.needs.get(claim.verb, ()))
    if not needed:
        if claim.negated and claim.x and claim.verb in ("open", "unlock") and \
                _matches(claim.x, world.needs.get("closed", ())):
            return True  # a closed holder no key opens: it needs nothing
        return None
    tools = _matches(claim.y, world.objects) or [claim.y.replace(" ", "")] + SYNONYMS.get(claim.y, "").split("|")
    hit = any(t and (t == n or _base(t) == _base(n) or _base(n).endswith(_base(t)) or _base(t).endswith(_base(n)))
              for t in tools for n in needed)
    return not hit if claim.negated else hit


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
