"""The claim reader: an abstraction's prose parsed into typed, checkable claims.

An abstraction states facts about a world in the many ways models write ("Key insight: mugs
tend to sit in the sinkbasin in these kitchens", "Lesson learned: heating it before you take
it never works", numbered plans, hedged rules). The grounded labeller
(:mod:`ap_gym.report.grounded`) can only check what it can read, so reading is done here,
in three passes, each one a reason an earlier word-list labeller missed errors:

1. **Normalise a sentence.** List markers, step labels and style prefixes ("Key insight:",
   "Lesson learned:", "Tip:") go; hedges ("usually", "tends to", "most likely", "you'll
   spot") go; a *scope qualifier* ("in these kitchens", "in heat tasks", "in rooms like
   this one", "in this house") is cut out of the sentence and kept as the claim's scope,
   so it no longer sticks to the name it follows ("cabinet in these kitchens" named
   nothing and the claim was never settled).
2. **Read typed claims** from the normalised sentence: location, precondition (and its
   denial: "no key is needed to open the trunk"), order ("A before B", "first A, then B",
   "A first and B afterwards", "after A, B", a numbered plan's steps on one object),
   over-generalisation ("X never works", "X is impossible", "don't bother with X"),
   outcome ("X worked", "X does the trick"), and universality as a flag on any claim
   ("always", "every", "in these rooms", "in cool tasks").
3. **Clean each term**: quantifiers ("both", "one of the"), relative clauses ("the key you
   need"), trailing company ("on the countertop with the salt shaker", "next to the
   sponge") and a part's owner ("the freezer compartment of the microwave" is the
   microwave) are cut, so a term is a name the world may know.

Matching a term to a world's names (compounds such as "dish sponge" -> "dishsponge",
plurals, kinds and instances) is the labeller's job, since it needs the world.

A maintained parser was weighed: spaCy's English pipelines are not served by the package
registry this project installs from (only unofficial mirrors, pinned to other spaCy
versions), so the reader is rules, measured on a labelled set written after it was frozen
(``benchmarks/grounded_card.py``; the card is ``ap_gym/report/labeller.json``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ap_gym.text import list_marker

__all__ = ["Claim", "claims_in", "sentences"]


@dataclass(frozen=True)
class Claim:
    """One checkable claim of an abstraction.

    Attributes:
        kind: ``location`` (``x`` starts at ``y``; ``y`` may list alternatives with ``|``;
            ``negated``: it does not),
            ``precondition`` (``verb`` on ``x`` needs ``y``; ``negated``: does not need it),
            ``order`` (step ``x`` comes before step ``y``), ``overgeneralised`` (command
            ``x`` never works; ``negated`` when the text forbids rather than denies it),
            ``outcome`` (command ``x`` works).
        x: the object, the first step, or the command.
        y: the holder, the tool, or the second step.
        verb: a precondition's action; ``"start"`` for a location said to hold at the start
            ("already", "initially"), so a plan's putting it there does not bear it out.
        universal: stated for every task ("always", "in these rooms", "in heat tasks").
        negated: see ``kind``.
        sentence: the normalised sentence it was read from.
    """

    kind: str
    x: str
    y: str = ""
    verb: str = ""
    universal: bool = False
    sentence: str = ""
    negated: bool = False


# ---------------------------------------------------------------------- normalising
_PREFIX = re.compile(
    r"^(?:(?:key |main |important |general |useful )?(?:insight|lesson(?: learned| learnt)?|takeaway|tip|hint|note|rule|"
    r"observation|strategy|reminder|remember|advice|pro tip|heuristic|fact|summary|plan|guidance|principle|"
    r"what (?:worked|failed|i learned)|learned|learnt|rule of thumb|best practice|pattern|finding|conclusion)s?\s*(?:\d+\s*)?[:\-]\s*)+")
#: A line's list marker (text's, plus "#" headings); "first" and "then" stay: they make order claims.
_MARKER = re.compile(r"^\s*" + list_marker("#") + r"\s*")
#: Scope qualifiers: a claim stated for every task of a family.
_SCOPE_ALL = re.compile(
    r",?\s*\b(?:in|across|for|throughout|within) (?:all |every |each |any |such |most |these |those |the other )"
    r"(?:of (?:the|these) )?(?:[a-z]+ )?(?:kitchens?|rooms?|houses?|homes?|bathrooms?|bedrooms?|living rooms?|games?|"
    r"tasks?|levels?|worlds?|episodes?|apartments?|layouts?|scenes?|places|environments?|maps?|runs?|cases?)\b"
    r"|,?\s*\bin (?:[a-z]+ ){0,2}(?:tasks|games|episodes)\b"
    r"|,?\s*\bin (?:[a-z]+ )?(?:kitchens|rooms|houses|homes|bathrooms|bedrooms|apartments|worlds|layouts)"
    r"(?: like (?:this|these)(?: one| ones)?)?\b"
    r"|,?\s*\b(?:every time|each time|without exception|no matter what|in general|as a rule|everywhere)\b")
_SCOPE_ONE = re.compile(
    r",?\s*\b(?:in|for|within|around) (?:this|our|my|your) (?:particular |current |same )?(?:kitchen|room|house|home|"
    r"bathroom|bedroom|living room|game|task|level|world|episode|apartment|layout|scene|place|environment|map|run)\b"
    r"(?: here)?")
_UNIVERSAL_WORDS = re.compile(r"\b(?:always|every|all|each|invariably|without exception|any game|any task|"
                              r"in general|as a rule|everywhere|whenever)\b")
_HEDGE = re.compile(
    r"\b(?:usually|typically|normally|generally|mostly|often|frequently|probably|likely|most likely|more likely|"
    r"possibly|perhaps|maybe|apparently|presumably|definitely|certainly|clearly|obviously|actually|really|"
    r"basically|simply|just|already|also|still|always|invariably|consistently|reliably|"
    r"i think|i believe|it seems|it appears|it turns out|in my experience|from experience|as far as i can tell)\b,?\s*")
_TEND = re.compile(r"\b(?:tends?|seems?|appears?|happens?|is likely|are likely|is known|are known|is meant|are meant|"
                   r"is supposed|are supposed|is expected|are expected|is bound|are bound) to ")
_SPOT = re.compile(r"^(?:you(?:'ll| will| can| should| may| might| would)?|we(?:'ll| will| can)?|one can|i) "
                   r"(?:find|spot|see|notice|discover|come across|locate|get) ")
_PARTICIPLE = r"(?:found|kept|located|stored|placed|sitting|lying|resting|waiting|hidden|hiding|tucked(?: away)?|" \
              r"stashed|left|standing|positioned|situated|set|put away|sat)"


def _lines(text: str) -> list[str]:
    """The text's lines, a plan written inline ("1) take ... 2) heat ...") one step a line."""
    out = []
    for line in text.splitlines():
        if len(re.findall(r"(?:^|\s)(?:\(?\d{1,2}\)|step \d{1,2}:)\s", line, re.I)) >= 2:
            out += [p for p in re.split(r"\s+(?=\(?\d{1,2}\)\s|step \d{1,2}:\s)", line, flags=re.I) if p.strip()]
        else:
            out.append(line)
    return out


def sentences(text: str) -> list[str]:
    """``text`` as normalised sentences: lower case, no list markers, style prefixes or
    quotes, one space."""
    out = []
    for line in _lines(text):
        line = _MARKER.sub("", line, count=1)
        for part in re.split(r"(?<=[.!?;])\s+|\s+(?:—|--)\s+|(?<=:)\s+(?=[A-Z\d])", line):
            s = " ".join(part.lower().replace("`", "").replace("\u2019", "'").replace('"', "").replace("**", "")
                         .replace("\u201c", "").replace("\u201d", "").split())
            s = _PREFIX.sub("", _MARKER.sub("", s, count=1)).strip(" .;:!?")
            if s:
                out.append(s)
    return out


def _core(sentence: str) -> tuple[str, bool]:
    """A sentence without its scope qualifiers and hedges, and whether it is stated for every
    task."""
    universal = bool(_SCOPE_ALL.search(sentence)) or bool(_UNIVERSAL_WORDS.search(sentence))
    s = _SCOPE_ALL.sub("", sentence)
    s = _SCOPE_ONE.sub("", s)
    s = re.sub(r"\b(?:tends?|seems?|appears?|happens?|is likely|are likely|is known|are known) to be\b", "is", s)
    s = _TEND.sub("", s)
    s = re.sub(r"\bpick (it|them|(?:the |a |an )?[a-z]+(?: [a-z]+)?) up\b", r"pick up \1", s)
    s = _HEDGE.sub("", s)
    s = re.sub(r"\b(?:one|some|any|each|either|both) of (?:the |these |those |its |their )?", "the ", s)
    s = re.sub(r"\b(?:both|all|two|three|several|many|most|the two|the three)\s+(?=[a-z])", "", s)
    return " ".join(s.split()).strip(" ,"), universal


# ---------------------------------------------------------------------- terms
_ART = r"(?:the |a |an |some |any |your |its |their |this |that |these |those )?"
_WORD = r"[a-z][a-z0-9\-]*"
_PHRASE = rf"{_WORD}(?: (?!(?:and|or|but|so|then|to|before|after|with|from|in|on|at|by|if|when|once|while|until|" \
          rf"because|since|where|which|that|who|is|are|was|were|be|it|them|first|next)\b)[a-z0-9][a-z0-9\-]*){{0,4}}?"
_END = r"(?=$|[.,;:!?()\[\]]| - | to | and | so | or | but | before | after | then | which | where | when | if | " \
       r"unless | first| only| once | until | because | since | as | while | with | next to | beside | near | " \
       r"along | together | by | from | for | that | instead| rather| too| here| there| now| inside| nearby| again| " \
       r"afterwards| later)"
_NUMBER = r"(?: \d+)?"
#: Words that end a term: what follows is its company, not its name.
_TERM_CUT = re.compile(r" (?:you|we|i|that|which|who|needed|required|in question|mentioned|itself|themselves)\b.*$")
_QUANT = ("so", "and", "but", "then", "because", "since", "while", "as", "or", "the", "a", "an", "some", "any", "your", "its", "their", "this", "that", "these", "those", "both", "all",
          "each", "every", "one", "two", "three", "several", "many", "other", "another", "same", "right", "correct",
          "nearest", "closest", "first", "second")
#: States a thing is in, not part of its name ("a closed fridge" is the fridge).
_STATE = ("closed", "open", "opened", "locked", "unlocked", "empty", "full", "dirty", "hot", "cold", "warm", "cool",
          "sliced", "heated", "cooled", "cleaned", "washed", "chilled", "nearby", "other", "visible", "same")
_TRAIL = ("first", "there", "here", "too", "also", "again", "now", "then", "only", "already", "afterwards", "later",
          "itself", "instead", "directly", "immediately", "right", "away", "up", "out", "down", "back")
#: Terms that name no object ("it", "the target").
NOT_THING = frozenset({"it", "they", "them", "this", "that", "there", "which", "what", "item", "items", "object",
                       "objects", "thing", "things", "everything", "something", "nothing", "anything", "task", "goal",
                       "agent", "you", "target", "one", "ones", "stuff", "step", "steps", "way", "answer", "action",
                       "actions", "command", "commands", "time", "i", "we", "he", "she", "place", "spot"})
#: Holders that are no place of the world.
NO_PLACE = frozenset({"hand", "hands", "inventory", "front", "place", "way", "order", "mind", "game", "task", "world",
                      "room", "step", "steps", "sight", "view", "the", "it", "them", "there", "here", "time", "turn",
                      "end", "case", "plan", "list", "state", "reach", "general", "fact", "most", "particular",
                      "addition", "trouble", "advance", "total", "practice", "theory", "spot", "house",
                      "home", "level", "episode", "process", "short", "sequence", "row", "vain", "doubt"})


def term(phrase: str) -> str:
    """A claim's term as a name: articles, quantifiers, relative clauses, company and a
    part's owner dealt with ("the freezer compartment of the microwave" -> "microwave")."""
    p = " ".join(phrase.lower().split()).strip(" .,;:!?'")
    if re.match(r"(?:if|whether|unless|when|once|until|in case) ", p):
        return ""  # a hypothesis or a condition, not a name
    p = _TERM_CUT.sub("", p)
    owner = re.match(rf"^(?:the |a )?(?:{_WORD} )?(?:compartment|part|top|side|shelf|bottom|inside|door|drawer|corner|"
                     rf"back|front|edge|surface|interior) of (?:the |a |an )?", p)
    if owner:
        p = p[owner.end():]
    p = re.split(r" (?:with|next to|beside|near|along with|together with|from|by|behind|under|on top of|besides|"
                 r"alongside|among|between|for|of the|of a|except|unless|if|when|while|where|so|because) ", p)[0]
    words = p.split()
    while words and (words[0] in _QUANT or words[0] in _STATE):
        words.pop(0)
    while words and words[-1] in _TRAIL:
        words.pop()
    return " ".join(words)


def _ok_thing(x: str) -> bool:
    return bool(x) and x.split()[-1] not in NOT_THING and len(x.split()) <= 5


def _ok_place(y: str) -> bool:
    return bool(y) and y.split()[-1] not in NO_PLACE and y.split()[-1] not in NOT_THING and len(y.split()) <= 5


# ---------------------------------------------------------------------- location
_BE = r"(?:is|are|was|were|can be|may be|will be|should be|could be|might be|would be|'s|'re|" \
      r"start|starts|begins|begin|remains|remain|stays|stay|lives|live|sits|sit|lies|lie|rests|rest|waits|wait|hangs|" \
      r"hang|turns up|turn up|shows up|show up|appears|appear)"
_PREP = r"(?:in|on|inside|at|under|underneath|beneath|on top of|within|into|onto|in the middle of|atop|upon)"
_THING = rf"(?P<x>{_PHRASE}{_NUMBER})"
_HOLDER = rf"(?P<y>{_PHRASE}{_NUMBER})"
_LOCATION = [
    re.compile(rf"\b{_ART}{_THING} (?:{_BE} (?:{_PARTICIPLE} )?|{_PARTICIPLE} ){_PREP} {_ART}{_HOLDER}{_END}"),
    re.compile(rf"\b(?:find|get|grab|fetch|look for|search for|locate|pick up|collect|take|spot|see|retrieve|"
               rf"look in|check) {_ART}{_THING} (?:{_PARTICIPLE} )?(?:in|on|inside|from|at|under|out of|off) {_ART}{_HOLDER}"
               rf"{_END}"),
    re.compile(rf"\b(?:go to|head to|walk to|visit|check|open|search|look in|look at|start at|start with) {_ART}{_HOLDER} "
               rf"(?:to|and|for) (?:get |find |take |grab |fetch |pick up |collect |retrieve )?{_ART}{_THING}{_END}"),
    re.compile(rf"\b{_ART}{_HOLDER} (?:has|holds|contains|keeps|stores|houses) {_ART}{_THING}{_END}"),
    re.compile(rf"\bthere (?:is|are|'s) {_ART}{_THING} (?:{_PARTICIPLE} )?{_PREP} {_ART}{_HOLDER}{_END}"),
    re.compile(rf"\b(?:in|on|inside|under) {_ART}{_HOLDER},? (?:there (?:is|are) |you(?:'ll| will)? (?:find|see) )"
               rf"{_ART}{_THING}{_END}"),
]
#: "The vase is never on the shelf": a holder a thing is said not to start at.
_NOT_AT = re.compile(rf"\b{_ART}{_THING} (?:is|are|was|were|can|will|does|do)(?: not|n't| never| rarely| not ever)"
                     rf"(?: be)?(?: {_PARTICIPLE})? {_PREP} {_ART}{_HOLDER}{_END}")
_OR = re.compile(rf",? (?:or|and/or) (?:(?:in|on|inside|at|under) )?{_ART}(?P<alt>{_PHRASE}{_NUMBER}){_END}")
#: Words before a location that make it a goal, an instruction or a hypothesis, not a claim
#: about where things start.
_GOAL = re.compile(r"\b(?:make sure|ensure|so that|until|once|after|when|goal|task is|must be|needs to be|"
                   r"need to be|has to be|have to be|want|wants|put|place|move|bring|carry|drop|leave|set|return|"
                   r"if|whether|check if|check whether|unless|instead of|rather than|not|n't|never|no)\b[^.;]*$")


#: Words that say a location is where a thing starts, not where a plan leaves it.
_START = re.compile(r"\b(?:already|at the start|at first|initially|to begin with|starts?|from the start|originally)\b")


def _locations(core: str, universal: bool, sentence: str) -> list[Claim]:
    out = []
    for i, pattern in enumerate(_LOCATION):
        for m in pattern.finditer(core):
            x, y = term(m.group("x")), term(m.group("y"))
            if not _ok_thing(x) or not _ok_place(y) or x == y:
                continue
            if i in (0, 4, 5) and _GOAL.search(core[:m.start("x")]):
                continue
            if i == 0 and re.search(r"\b(?:put|place|move|bring|carry|drop|leave|return)\b", core[:m.start("x")]):
                continue
            at = m.end("y")
            holders = [y]
            while (alt := _OR.match(core, at)) is not None:  # "on a countertop or in a cabinet": either
                if _ok_place(term(alt.group("alt"))):
                    holders.append(term(alt.group("alt")))
                at = alt.end("alt")
            start = bool(_START.search(sentence))
            out.append(Claim("location", x, "|".join(holders), verb="start" if start else "", universal=universal,
                             sentence=sentence))
    for m in _NOT_AT.finditer(core):
        x, y = term(m.group("x")), term(m.group("y"))
        if _ok_thing(x) and _ok_place(y) and x != y and not _GOAL.search(core[:m.start("x")]):
            out.append(Claim("location", x, y, verb="start", universal=universal, sentence=sentence, negated=True))
    return out


# ---------------------------------------------------------------------- preconditions
_ACT = r"heat|warm|cool|chill|clean|wash|rinse|cut|slice|chop|dice|unlock|open|cook|fry|roast|grill|bake|boil|" \
       r"freeze|light|turn on|toggle|examine|look at|read"
_ACTING = r"heating|warming|cooling|chilling|cleaning|washing|rinsing|cutting|slicing|chopping|dicing|unlocking|" \
          r"opening|cooking|frying|roasting|grilling|baking|boiling|freezing|lighting|turning on|toggling|examining|" \
          r"looking at|reading"
_NEED = r"(?:requires|require|needs|need|takes|take|calls for|call for|demands|demand|depends on|is done with|" \
        r"are done with|is done in|are done in|is done using|works with|only works with|only works in|works only with|" \
        r"happens in|happens at|must be done with|must be done in|has to be done with|has to be done in|is possible with)"
_USE = r"(?:need|needs|require|requires|must use|have to use|has to use|should use|must have|need to use|need to have|" \
       r"want|use|can use|'ll need|will need|must go to|have to go to|need to go to|go to|head to)"
_PRECONDITION = [
    re.compile(rf"\b(?P<verb>{_ACTING}) {_ART}(?P<x>{_PHRASE}{_NUMBER})? ?{_NEED} {_ART}{_HOLDER}{_END}"),
    re.compile(rf"\b(?P<verb>{_ACT})(?:s|es)? {_ART}(?P<x>{_PHRASE}{_NUMBER})? ?{_NEED} {_ART}{_HOLDER}{_END}"),
    re.compile(rf"\bto (?P<verb>{_ACT}) {_ART}(?P<x>{_PHRASE}{_NUMBER})?,? (?:you |one |we )?{_USE} {_ART}{_HOLDER}"
               rf"{_END}"),
    re.compile(rf"\b(?:you |one |we )?{_USE} {_ART}{_HOLDER} (?:to|for|in order to|when you) (?P<verb>{_ACT}|{_ACTING})"
               rf"(?: {_ART}(?P<x>{_PHRASE}{_NUMBER}))?{_END}"),
    re.compile(rf"(?:^|, |; |and |then )(?P<verb>{_ACT}) {_ART}(?P<x>{_PHRASE}{_NUMBER}) (?:with|using|in|at|on|by) "
               rf"{_ART}{_HOLDER}{_END}"),
    re.compile(rf"\b{_ART}(?P<x>{_PHRASE}{_NUMBER}) (?:only )?(?:can be |could be |is |are |must be |has to be |"
               rf"have to be |should be |gets )?(?P<verb>opens|unlocks|opened|unlocked|heated|cooled|cleaned|washed|"
               rf"sliced|cut|chilled|warmed|rinsed|cooked|fried|roasted|grilled|chopped|diced) (?:only )?(?:with|using|"
               rf"by using|in|at|on|by) {_ART}{_HOLDER}{_END}"),
    re.compile(rf"\b{_ART}{_HOLDER} (?P<verb>opens|unlocks|heats|cools|cleans|cuts|slices|chills|warms|washes|cooks|"
               rf"fries|roasts|grills) (?!with |using |by |in |on )(?:{_ART})(?P<x>{_PHRASE}{_NUMBER}){_END}"),
    re.compile(rf"\b{_ART}{_HOLDER} (?:is|are) (?:needed|required|necessary|essential|the tool|what you need|the way) "
               rf"(?:to|for|when) (?P<verb>{_ACT}|{_ACTING})(?: {_ART}(?P<x>{_PHRASE}{_NUMBER}))?{_END}"),
    re.compile(rf"\b(?:you |one )?(?:can only|can|should|must|have to) (?P<verb>{_ACT}) {_ART}(?P<x>{_PHRASE}{_NUMBER}) "
               rf"(?:with|using|in|at|on) {_ART}{_HOLDER}{_END}"),
]
#: Denials: the action does not need the tool.
_NO_NEED = [
    re.compile(rf"\b(?:no|without (?:a|an|the|any)|without) {_HOLDER} (?:is |are )?(?:needed|required|necessary)? ?"
               rf"(?:to|for) (?P<verb>{_ACT}|{_ACTING})(?: {_ART}(?P<x>{_PHRASE}{_NUMBER}))?{_END}"),
    re.compile(rf"\b(?:you )?(?:can|could) (?P<verb>{_ACT}) {_ART}(?P<x>{_PHRASE}{_NUMBER}) without {_ART}{_HOLDER}{_END}"),
    re.compile(rf"\b(?:you )?(?:do not|don't|never) (?:need|require|have to use|need to use) {_ART}{_HOLDER} "
               rf"(?:to|for) (?P<verb>{_ACT}|{_ACTING})(?: {_ART}(?P<x>{_PHRASE}{_NUMBER}))?{_END}"),
    re.compile(rf"\b(?P<verb>{_ACT}|{_ACTING}) {_ART}(?P<x>{_PHRASE}{_NUMBER})? ?(?:does not|doesn't|do not|don't|"
               rf"never) (?:need|require|take) {_ART}{_HOLDER}{_END}"),
    re.compile(rf"\b{_ART}{_HOLDER} (?:is|are) (?:not needed|not required|unnecessary|only decoration|just decoration|"
               rf"useless|irrelevant|not necessary)(?: (?:to|for) (?P<verb>{_ACT}|{_ACTING})(?: {_ART}"
               rf"(?P<x>{_PHRASE}{_NUMBER}))?)?{_END}"),
]
VERB = {"opened": "open", "unlocked": "unlock", "heated": "heat", "cooled": "cool", "cleaned": "clean",
        "washed": "clean", "sliced": "slice", "chilled": "cool", "warmed": "heat", "rinsed": "clean", "cooked": "cook",
        "fried": "cook", "roasted": "cook", "grilled": "cook", "chopped": "slice", "diced": "slice",
        "warm": "heat", "chill": "cool", "wash": "clean", "rinse": "clean", "opens": "open", "unlocks": "unlock",
        "heats": "heat", "cools": "cool", "cleans": "clean", "cuts": "cut", "slices": "slice", "chills": "cool",
        "warms": "heat", "washes": "clean", "chop": "slice", "dice": "slice", "cooks": "cook", "fries": "cook",
        "roasts": "cook", "grills": "cook", "fry": "cook", "roast": "cook", "grill": "cook", "bake": "cook",
        "boil": "heat", "freeze": "cool", "toggle": "turn on", "light": "turn on", "look at": "examine",
        "read": "examine"}


def _verb(word: str) -> str:
    word = GERUND.get(word, word)
    return VERB.get(word, word)


def _preconditions(core: str, universal: bool, sentence: str) -> list[Claim]:
    out = []
    for negated, patterns in ((False, _PRECONDITION), (True, _NO_NEED)):
        for m in (m for p in patterns for m in p.finditer(core)):
            verb = _verb(m.group("verb") or "") if m.groupdict().get("verb") else ""
            x = term(m.group("x") or "") if m.groupdict().get("x") else ""
            y = term(m.group("y"))
            if x and x.split()[-1] in NOT_THING:
                x = ""
            if not _ok_place(y) or not verb or y in ("it", "them") or \
                    (not negated and re.match(r"(?:no|without|not) ", m.group("y"))):
                continue
            out.append(Claim("precondition", x, y, verb=verb, universal=universal, sentence=sentence, negated=negated))
    return out


# ---------------------------------------------------------------------- steps, order
STEP = r"(?:go to|take|pick up|get|grab|put|place|move|open|close|heat|cool|clean|slice|cut|unlock|examine|use|" \
       r"turn on|toggle|cook|chop|dice|insert|drop|eat|look at|click|warm|chill|wash|rinse|lock|search|buy|select|" \
       r"choose|fetch|retrieve|collect|microwave|fridge|bring|carry|return|deliver)"
GERUND = {"going to": "go to", "taking": "take", "picking up": "pick up", "putting": "put", "placing": "place",
          "moving": "move", "opening": "open", "closing": "close", "heating": "heat", "cooling": "cool",
          "cleaning": "clean", "slicing": "slice", "cutting": "cut", "unlocking": "unlock", "using": "use",
          "cooking": "cook", "chopping": "chop", "dicing": "dice", "examining": "examine", "clicking": "click",
          "warming": "warm", "chilling": "chill", "washing": "wash", "rinsing": "rinse", "getting": "get",
          "grabbing": "grab", "inserting": "insert", "dropping": "drop", "eating": "eat", "locking": "lock",
          "searching": "search", "buying": "buy", "selecting": "select", "choosing": "choose", "fetching": "fetch",
          "retrieving": "retrieve", "collecting": "collect", "bringing": "bring", "carrying": "carry",
          "returning": "return", "delivering": "deliver", "turning on": "turn on", "toggling": "toggle",
          "looking at": "look at", "frying": "fry", "roasting": "roast", "grilling": "grill", "lighting": "light",
          "reading": "read", "boiling": "boil", "freezing": "freeze", "baking": "bake"}
_GERUNDS = "|".join(sorted(GERUND, key=len, reverse=True))
_A_STEP = rf"(?:{STEP}|{_GERUNDS})"
_SUBJ = r"(?:(?:you|we|i)(?: have| 've|'ve| had)? |(?:you|we) (?:can|should|must|do|did) )?"
_STEP_BODY = r"[^.;,]+?"
_SEND = _END[:-1] + r"| works| worked| work| fails| failed| never| is | are | was | were | will | won't| does | did | helps|" \
    r" saves| wins| makes| gets you| leads)"
_ORDER = [
    re.compile(rf"\b(?P<a>{_A_STEP} {_STEP_BODY})(?: first)?,? (?:before|prior to|ahead of) {_SUBJ}(?P<b>{_A_STEP} "
               rf"{_STEP_BODY}){_SEND}"),
    re.compile(rf"\bfirst,? {_SUBJ}(?P<a>{_A_STEP} {_STEP_BODY}),? (?:and )?(?:then|next|after that|afterwards|only then),? "
               rf"{_SUBJ}(?P<b>{_A_STEP} {_STEP_BODY}){_SEND}"),
    re.compile(rf"\b(?P<a>{_A_STEP} {_STEP_BODY}),? (?:and )?(?:then|next|after that|and afterwards|only then),? "
               rf"{_SUBJ}(?P<b>{_A_STEP} {_STEP_BODY}){_SEND}"),
    re.compile(rf"\b(?P<a>{_A_STEP} {_STEP_BODY}) first,? (?:and )?(?:then )?{_SUBJ}(?P<b>{_A_STEP} {_STEP_BODY})"
               rf"(?: afterwards| after that| later| next| second)?{_SEND}"),
    re.compile(rf"\b(?P<b>{_A_STEP} {_STEP_BODY}),? (?:only )?(?:after|once|when) {_SUBJ}(?P<a>{_A_STEP} {_STEP_BODY})"
               rf"{_SEND}"),
    re.compile(rf"(?:^|, |; )(?:only )?(?:after|once) {_SUBJ}(?P<a>{_A_STEP} {_STEP_BODY}),? (?:you can |you should |"
               rf"then )?(?P<b>{_A_STEP} {_STEP_BODY}){_SEND}"),
    re.compile(rf"(?:^|, |; )before {_SUBJ}(?P<b>{_A_STEP} {_STEP_BODY}),? (?:you must |you should |always |make sure to )?"
               rf"(?P<a>{_A_STEP} {_STEP_BODY}){_SEND}"),
]


def step(phrase: str) -> str:
    """An action phrase as a plan step would read: verb first, articles out ("heating it" ->
    "heat it")."""
    phrase = " ".join(phrase.lower().split()).strip(" .,;:")
    for gerund, verb in GERUND.items():
        if phrase.startswith(gerund + " ") or phrase == gerund:
            phrase = verb + phrase[len(gerund):]
            break
    phrase = re.split(r" (?:so that|so|because|since|otherwise|or else|as|if|unless|which|while|after|before|once|"
                      r"when|then|only|until|first) ", phrase)[0]
    words = [w for w in phrase.split() if w not in ("the", "a", "an", "some", "your", "its", "their", "this",
                                                    "that", "first", "again", "afterwards", "later", "then", "next")]
    return " ".join(words)


def _orders(core: str, universal: bool, sentence: str) -> list[Claim]:
    out = []
    for pattern in _ORDER:
        for m in pattern.finditer(core):
            a, b = step(m.group("a")), step(m.group("b"))
            if a and b and a != b:
                out.append(Claim("order", a, b, universal=universal, sentence=sentence))
    return out


def _plan(text: str) -> list[Claim]:
    """A numbered or bulleted plan's steps, in order, as order claims between steps on one
    object (the checker decides whether they share it)."""
    steps = []
    for line in _lines(text):
        if not _MARKER.match(line):
            continue
        body = _PREFIX.sub("", " ".join(_MARKER.sub("", line, count=1).lower().split())).strip(" .;:")
        body = re.sub(r"^(?:first|then|next|finally|afterwards|lastly|after that),?\s+", "", body)
        for piece in re.split(r",? (?:and then|then|and) (?=" + STEP + r"\b)", body):
            if re.match(rf"{STEP}\b", piece) and not piece.startswith("go to"):
                steps.append(step(piece))
    out = []
    for i, a in enumerate(steps):
        for b in steps[i + 1:]:
            if a != b:
                out.append(Claim("order", a, b, sentence="(plan)"))
    return out


# ---------------------------------------------------------------------- outcomes
_FAILS = r"(?:never works|never worked|never work|never succeeds?|does not work|doesn't work|do not work|don't work|did not work|didn't work|" \
         r"won't work|will not work|always fails|fails|failed|is impossible|are impossible|is useless|is pointless|" \
         r"is a waste of (?:time|steps)|cannot work|can't work|never succeeds|is not possible|isn't possible|" \
         r"does nothing|did nothing|do nothing|never does anything|has no effect|is not allowed|isn't allowed|" \
         r"cannot be done|can't be done|is blocked|leads nowhere|gets you nowhere|goes nowhere)"
_NEVER = [
    re.compile(rf"\b(?:never|don't|do not|no point in|there is no point in|there's no point in|it is useless to|"
               rf"it's useless to|there is no need to|there's no need to|no need to|avoid|stop|don't waste time|"
               rf"do not waste time|don't waste steps|do not waste steps) (?:try to |trying to |bother to |bother with |"
               rf"bother |try |trying |even try to |on )?(?P<cmd>{_A_STEP} {_STEP_BODY}){_SEND}"),
    re.compile(rf"\b(?:trying to |attempts to |attempting to )?(?P<cmd>{_A_STEP} {_STEP_BODY}) {_FAILS}{_SEND}"),
    re.compile(rf"\b(?:you |one |we )?(?:cannot|can't|can not|could not|couldn't|are unable to|is impossible to|"
               rf"it is impossible to|it's impossible to|there is no way to|there's no way to) (?P<cmd>{_A_STEP} "
               rf"{_STEP_BODY}){_SEND}"),
    re.compile(rf"\b{_ART}(?P<obj>{_PHRASE}{_NUMBER}) (?:cannot|can't|can never|will never|won't|never) be "
               rf"(?P<part>opened|taken|unlocked|heated|cooled|cleaned|sliced|cut|moved|picked up|used|examined|"
               rf"closed|reached|entered){_SEND}"),
    re.compile(rf"\b{_ART}(?P<obj>{_PHRASE}{_NUMBER}) (?:is|are) (?:locked|sealed|stuck|jammed|not openable|"
               rf"impossible to open|unopenable){_SEND}"),
]
_PART = {"opened": "open", "taken": "take", "unlocked": "unlock", "heated": "heat", "cooled": "cool",
         "cleaned": "clean", "sliced": "slice", "cut": "cut", "moved": "move", "picked up": "take", "used": "use",
         "examined": "examine", "closed": "close", "reached": "go to", "entered": "go to"}
_WORKS = re.compile(rf"\b(?P<cmd>{_A_STEP} {_STEP_BODY}) (?:works|worked|succeeds|succeeded|does the trick|did the "
                    rf"trick|is the way|is what works|gets it done|solves it|solved it|always works|wins|won)(?! with| in | on | using| at )"
                    rf"{_SEND}")
_NEGATION = re.compile(r"\b(?:never|don't|do not|not|no|avoid|stop|instead of|rather than)\b[^,;]*$")
_TRY = re.compile(rf"\b(?:try|retry|keep trying to|keep trying|repeat|just) (?P<cmd>{_A_STEP} {_STEP_BODY}){_SEND}")


def _outcomes(core: str, universal: bool, sentence: str) -> list[Claim]:
    out = []
    for i, pattern in enumerate(_NEVER):
        for m in pattern.finditer(core):
            if i == 3:
                cmd = f"{_PART[m.group('part')]} {term(m.group('obj'))}"
            elif i == 4:
                cmd = f"open {term(m.group('obj'))}"
            else:
                cmd = step(m.group("cmd"))
            if cmd and len(cmd.split()) > 1 and cmd.split()[-1] not in ("it", "them") or i in (3, 4):
                if i in (3, 4) and not _ok_thing(cmd.split(" ", 1)[1] if " " in cmd else ""):
                    continue
                out.append(Claim("overgeneralised", cmd, universal=universal, sentence=sentence, negated=i == 0))
    for pattern in (_WORKS, _TRY):
        for m in pattern.finditer(core):
            cmd = step(m.group("cmd"))
            if re.search(r"\b(?:never|not|no|doesn't|don't|didn't|won't|rarely|hardly|seldom|n't)$", cmd) or \
                    _NEGATION.search(core[:m.start("cmd")]):
                continue
            if cmd and len(cmd.split()) > 1:
                out.append(Claim("outcome", cmd, universal=universal, sentence=sentence))
    return out


def claims_in(text: str) -> list[Claim]:
    """The checkable claims of ``text`` (see the module docstring), in order, each once."""
    out: list[Claim] = []
    for sentence in sentences(text):
        core, universal = _core(sentence)
        spotted = _SPOT.sub("find ", core)
        out += _locations(spotted, universal, sentence)
        out += _preconditions(core, universal, sentence)
        out += _orders(core, universal, sentence)
        out += _outcomes(core, universal, sentence)
    out += _plan(text)
    return list(dict.fromkeys(out))
