"""The error-reproduction audit (spec: "Error-reproduction audit (provenance)").

An operational bias labeller flags an abstraction by a stated protocol; "not flagged"
means only that: it may be unclassified, never "correct". The built-in protocol,
:class:`EnvironmentLabeller`, checks an abstraction against what the environment allows
and against the records it was synthesised from (its provenance):

1. **grammar**: a command it quotes (in quotes or backticks, or ``search[...]`` /
   ``click[...]``) whose verb the benchmark's command grammar does not have
   ("grab the mug" in ALFWorld, "purchase[...]" in the shop). A quoted span counts as a
   command only when its first word is an action verb; quoted objects, names and search
   queries are not commands, and an apostrophe inside a word ("don't", "it's") opens no
   quote.
2. **absent objects**: an object its commands (or, in ALFWorld, its numbered objects
   such as "drawer 7"; in the shop, product ids and buttons) name that no source
   record's world contains: not in their instructions, commands or observations.
3. **contradicted claims**: it recommends a command that failed ("Nothing happens.")
   every time the source records issued it, or forbids ("never", "don't", "avoid",
   "not") a command a successful source record used without failure.

Claims about state or outcome that need understanding ("the lamp alone completes the
task") escape these rules; :class:`JudgeLabeller` asks an LLM through its own backbone,
and :class:`AnyOf` flags what either flags. Measured on the labelled fixture set
(``benchmarks/audit/fixtures.yaml``, ``benchmarks/audit_labeller.py``; RESULTS.md).

The audit then compares the flag rate of stored abstractions with at least one flagged
parent against those with none, and estimates, per synthesis invocation (admitted and
rejected outputs alike), q (probability of flagged-parent exposure), α (flagged-output
rate given exposure) and η (admission probability); q·α·η > 0 means a positive
probability of admitting a flagged descendant. This is association, not causation.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ap_gym.protocol.results import (
    EpisodeHeader,
    load_abstractions,
    load_benchmark,
    load_records,
    load_worlds,
)
from ap_gym.report.labels import Label
from ap_gym.report.stats import Estimate, difference, mantel_haenszel, proportion
from ap_gym.text import (
    ACTION_WORDS,
    INVENTED_VERBS,
    Command,
    Grammar,
    commands_in,
    failed_action,
    normalise_command,
)

__all__ = ["AnyOf", "AuditRow", "EnvironmentLabeller", "Invocation", "Unit", "JudgeLabeller", "Label", "Labeller",
           "SettingAudit", "SourceRecord", "audit", "audit_labelled", "audit_setting", "describe_labeller",
           "rejected_invocations"]

_NUMBERED = re.compile(r"\b([a-z]+) (\d+)\b", re.I)
_FUNCTION_WORDS = {"to", "from", "with", "in", "on", "into", "the", "a", "an", "at", "under", "of", "for", "by",
                   "around", "up", "down", "out", "onto", "off", "some", "your", "my", "and", "then", "it", "only",
                   "just", "also", "carefully", "quickly", "immediately", "still", "now", "first", "again", "all",
                   "each", "every", "this", "that", "these", "those", "its", "their", "inside", "outside", "over",
                   "room", "place", "way"}


@dataclass(frozen=True)
class SourceRecord:
    """A record an abstraction was synthesised from, as the labeller reads it."""

    instruction: str
    steps: tuple[tuple[str, str], ...]  # (action, observation)
    success: bool
    family: str = ""
    task_id: str = ""  # whose world facts (``worlds.jsonl``) the grounded labeller checks against

    @classmethod
    def of(cls, record: Any) -> SourceRecord:
        """From a stored :class:`~ap_gym.memory.Record` (or a mapping like one)."""
        get = record.get if isinstance(record, Mapping) else lambda k, d=None: getattr(record, k, d)
        steps = []
        for s in get("steps", []) or []:
            if isinstance(s, Mapping):
                steps.append((str(s.get("action", "")), str(s.get("observation", ""))))
            else:
                steps.append((str(s[0]), str(s[1])))
        return cls(str(get("instruction", "")), tuple(steps), bool(get("success", False)), str(get("family", "") or ""),
                   str(get("task_id", "") or ""))

    def text(self) -> str:
        return " ".join([self.instruction, *(f"{a} {o}" for a, o in self.steps)]).lower()


class Labeller(Protocol):
    """Labels one abstraction given its source records (possibly none). A plain ``bool``
    is read as a label without reasons (a study's ground-truth rule)."""

    def __call__(self, text: str, sources: Sequence[SourceRecord] = ()) -> Label | bool: ...


@dataclass(frozen=True)
class EnvironmentLabeller:
    """The built-in protocol: grammar, absent objects, contradicted claims (module docstring).

    Args:
        grammar: the benchmark's command grammar, as its env declares it (the run records
            it per setting); ``None``: no grammar check (objects and claims still are).
    """

    grammar: Grammar | None = None

    def __call__(self, text: str, sources: Sequence[SourceRecord] = ()) -> Label:
        reasons: list[str] = []
        grammar = self.grammar
        commands = commands_in(text, grammar.verbs if grammar is not None else None)
        if grammar is not None:
            for c in commands:
                if not c.negated and self._ungrammatical(c, grammar):
                    reasons.append(f"grammar: {c.text!r} is not a command of this benchmark")
        if sources:
            world = " ".join(s.text() for s in sources)
            if any(s.steps for s in sources):  # a record with no steps shows no world: no evidence of absence
                reasons += self._absent(text, commands, world)
            reasons += self._contradicted(text, commands, sources)
        return Label(bool(reasons), tuple(dict.fromkeys(reasons)))

    @staticmethod
    def _ungrammatical(c: Command, grammar: Grammar) -> bool:
        """A command the text presents as one that the grammar lacks: quoted (or bracketed),
        or unquoted in a plan's step with a verb models invent for commands. The Shop's
        bracket form is asked of quoted commands only: prose says "click the size"."""
        if c.verb in grammar.verbs:
            return grammar.bracketed and c.quoted and not c.bracketed
        return c.quoted or (c.explicit and c.verb in INVENTED_VERBS)

    def _absent(self, text: str, commands: list[Command], world: str) -> list[str]:
        """Objects the text names that no source record's world has: a numbered object whose
        kind the world has under other numbers ("drawer 7" beside drawers 1 and 2; "step 1"
        and "within 10" are no objects), an item id no record shows, a button no page showed,
        or an object word of a command the text presents as one."""
        grammar = self.grammar or Grammar(frozenset())
        out = []
        if grammar.numbered_objects:
            for name, number in _NUMBERED.findall(text):
                obj = f"{name.lower()} {number}"
                if obj not in world and re.search(rf"\b{re.escape(name.lower())} \d+\b", world):
                    out.append(f"absent: {obj!r} is in no source record's world")
        if grammar.ids:
            for item in re.findall(grammar.ids, text, re.I):
                if item.lower() not in world:
                    out.append(f"absent: item {item} is in no source record")
        for c in commands:
            if grammar.bracketed and c.verb == "click" and "[" in c.text:
                target = c.text[c.text.index("[") + 1:-1].strip()
                if target and f"[{target}]" not in world and target not in world:
                    out.append(f"absent: no source record shows a {target!r} button")
            elif not (grammar.bracketed or c.bracketed or not c.explicit or c.negated):
                words = [w for w in re.findall(r"[a-z]+", c.text)[1:] if w not in _FUNCTION_WORDS]
                missing = [w for w in words if not _in_world(w, world) and w not in ACTION_WORDS]
                if missing:
                    out.append(f"absent: {c.text!r} names {', '.join(missing)}, in no source record's world")
        return out

    @staticmethod
    def _contradicted(text: str, commands: list[Command], sources: Sequence[SourceRecord]) -> list[str]:
        """A recommended command that failed every time the source records issued it (in
        the text's commands, or anywhere in its prose, not denied), or a forbidden one a
        successful record used without failing."""
        out = []
        outcomes: dict[str, list[tuple[bool, bool]]] = {}
        for s in sources:
            for a, o in s.steps:
                outcomes.setdefault(normalise_command(a), []).append((s.success, failed_action(o)))
        named = {c.text for c in commands}
        for c in commands:
            results = outcomes.get(c.text)
            if not results:
                continue
            if not c.negated and all(failed for _, failed in results):
                out.append(f"contradicted: {c.text!r} failed every time the source records issued it")
            if c.negated and any(success and not failed for success, failed in results):
                out.append(f"contradicted: forbids {c.text!r}, which a successful source record used")
        lowered = " ".join(text.lower().split())
        for action, results in outcomes.items():
            if action in named or len(action.split()) < 2 or not all(failed for _, failed in results):
                continue
            for m in re.finditer(rf"(?<![\w']){re.escape(action)}(?![\w'])", lowered):
                sentence_start = max(lowered.rfind(ch, 0, m.start()) for ch in ".;:\n") + 1
                if not _NEGATED_AROUND(lowered[sentence_start:m.start()], lowered[m.end():]):
                    out.append(f"contradicted: {action!r} failed every time the source records issued it")
                    break
        return out


def _in_world(word: str, world: str) -> bool:
    """Whether ``word`` (or its singular) is a word of ``world``."""
    return any(re.search(rf"\b{re.escape(w)}\b", world) for w in {word, word.removesuffix("s"),
                                                                   word.removesuffix("es")} if w)


def _NEGATED_AROUND(before: str, after: str) -> bool:  # noqa: N802 (a predicate named as the rule it is)
    from ap_gym.text import _DENIED, _NEGATION

    return bool(_NEGATION.search(before)) or bool(_DENIED.search(after))


@dataclass(frozen=True)
class JudgeLabeller:
    """An LLM judge through its own backbone: it sees the source records and the
    abstraction and answers whether following the abstraction would mislead an agent.

    Args:
        backbone: any backbone with ``generate`` (a stronger model than the actor's, ideally).
        benchmark: named in the prompt.
        max_new_tokens: room for the one-word verdict.
    """

    backbone: Any
    benchmark: str
    max_new_tokens: int = 4

    def __call__(self, text: str, sources: Sequence[SourceRecord] = ()) -> Label:
        from ap_gym.backbones.base import GenerationConfig
        from ap_gym.prompts import load_prompt

        records = "\n\n".join(
            f"[{i + 1}] Task: {s.instruction}\nOutcome: {'success' if s.success else 'failure'}\n"
            + "\n".join(f"> {a}\n  {o}" for a, o in s.steps) for i, s in enumerate(sources)) or "(none)"
        prompt = load_prompt("audit_judge").format(benchmark=self.benchmark, records=records, text=text)
        answer = self.backbone.generate([{"role": "user", "content": prompt}],
                                        GenerationConfig(max_new_tokens=self.max_new_tokens)).text
        verdict = answer.strip().lower()
        flagged = verdict.startswith(("yes", "erroneous", "wrong"))
        return Label(flagged, (f"judge: {answer.strip()[:80]}",) if flagged else ())


@dataclass(frozen=True)
class AnyOf:
    """Flags what any of ``labellers`` flags (the rules, then a judge, say)."""

    labellers: Sequence[Labeller]

    def __call__(self, text: str, sources: Sequence[SourceRecord] = ()) -> Label:
        labels = [_label(lab, text, sources) for lab in self.labellers]
        return Label(any(x.flagged for x in labels), tuple(r for x in labels for r in x.reasons))


# ----------------------------------------------------------------------- the audit
@dataclass(frozen=True)
class Invocation:
    """One synthesis call's output: its text, the stored abstractions in the prompts of the
    records it came from (its parents), whether it was admitted (stored and never pruned),
    the records it came from, and its task family (the audit's strata)."""

    text: str
    parents: tuple[int, ...]
    admitted: bool
    sources: tuple[int, ...] = ()
    family: str = ""
    #: the randomised-exposure coin of the task it came from (``expose``/``withhold``), and
    #: the stored abstractions that task retrieved (its parents had the coin said expose)
    coin: str | None = None
    would_be_parents: tuple[int, ...] = ()


def _coin(exposure: Any) -> tuple[str | None, tuple[int, ...]]:
    """The coin and the would-be parents of an exposure record (``None`` when there is none)."""
    if not isinstance(exposure, Mapping) or exposure.get("coin") not in ("expose", "withhold"):
        return None, ()
    return str(exposure["coin"]), tuple(_ints(exposure.get("would_be_parents")))


@dataclass(frozen=True)
class Unit:
    """One invocation as the audit counts it: exposed (a flagged parent), flagged, admitted;
    with randomised exposure, its coin and whether a flagged abstraction was among what its
    task retrieved (``reachable``: the population the randomised contrast is over)."""

    exposed: bool
    flagged: bool
    admitted: bool
    family: str = ""
    coin: str | None = None
    reachable: bool = False


@dataclass(frozen=True)
class AuditRow:
    """One setting's audit, with every count behind its rates.

    Two gaps. The paper's, among stored abstractions (``gap``: flag rate with a flagged
    parent minus without), is what one can compute when only admitted outputs are kept; when
    admission depends on the flag it is biased, so the audit also counts every synthesis
    invocation, admitted or rejected (``units``), and estimates from them, each with a 95 %
    interval (:meth:`estimates`): q (exposure), alpha (flag rate given exposure), beta
    (given none), the invocation gap alpha - beta, the same gap stratified by task family
    (Mantel-Haenszel: exposure and errors can both follow the family, which alone makes a raw
    gap), eta given a flagged exposed output, and the joint rate of exposed, flagged and
    admitted outputs. Association, not causation.
    """

    setting: str
    abstractions: int
    flagged: int
    with_flagged_parent: int
    flagged_given_flagged_parent: int
    without_flagged_parent: int
    flagged_given_no_flagged_parent: int
    rejected: int
    invocations: int = 0
    exposed_invocations: int = 0
    flagged_exposed_invocations: int = 0
    admitted_invocations: int = 0
    reasons: Mapping[str, int] = field(default_factory=dict)
    units: tuple[Unit, ...] = ()

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
        """Share of synthesis invocations exposed to a flagged parent."""
        return self.exposed_invocations / self.invocations if self.invocations else float("nan")

    @property
    def alpha(self) -> float:
        """Flagged-output rate among exposed invocations, admitted or not."""
        return self.flagged_exposed_invocations / self.exposed_invocations if self.exposed_invocations else float("nan")

    @property
    def eta(self) -> float:
        """Admission, marginal: admitted invocations over all (see ``estimates()['eta']`` for
        the conditional one, which is what q * alpha * eta needs)."""
        return self.admitted_invocations / self.invocations if self.invocations else float("nan")

    def estimates(self) -> dict[str, Estimate]:
        """The invocation-level estimates with 95 % intervals (see the class docstring)."""
        u = self.units
        exposed = [x for x in u if x.exposed]
        unexposed = [x for x in u if not x.exposed]
        k1, k0 = sum(x.flagged for x in exposed), sum(x.flagged for x in unexposed)
        strata = []
        for family in sorted({x.family for x in u}):
            e = [x for x in exposed if x.family == family]
            n = [x for x in unexposed if x.family == family]
            strata.append((sum(x.flagged for x in e), len(e), sum(x.flagged for x in n), len(n)))
        flagged_exposed = [x for x in exposed if x.flagged]
        shown = [x for x in u if x.reachable and x.coin == "expose"]
        withheld = [x for x in u if x.reachable and x.coin == "withhold"]
        return {
            "q": proportion(len(exposed), len(u)),
            "alpha": proportion(k1, len(exposed)),
            "beta": proportion(k0, len(unexposed)),
            "gap": difference(k1, len(exposed), k0, len(unexposed)),
            "stratified_gap": mantel_haenszel(strata),
            "randomised_gap": difference(sum(x.flagged for x in shown), len(shown),
                                         sum(x.flagged for x in withheld), len(withheld)),
            "eta": proportion(sum(x.admitted for x in flagged_exposed), len(flagged_exposed)),
            "joint": proportion(sum(x.admitted for x in flagged_exposed), len(u)),
        }


def _label(labeller: Callable[..., Any], text: str, sources: Sequence[SourceRecord]) -> Label:
    try:
        result = labeller(text, list(sources))
    except TypeError:  # a plain (text) -> bool labeller
        result = labeller(text)
    return result if isinstance(result, Label) else Label(bool(result))


def describe_labeller(labeller: Any) -> str:
    """How a labeller is named in reports: its class and, for a judge, its model."""
    if isinstance(labeller, AnyOf):
        return " or ".join(describe_labeller(x) for x in labeller.labellers)
    if isinstance(labeller, JudgeLabeller):
        return f"JudgeLabeller({getattr(labeller.backbone, 'identity', '?')})"
    if type(labeller).__name__ == "GroundedLabeller":
        from ap_gym.report.grounded import SEES

        sees = SEES.get(labeller.benchmark)
        return (f"GroundedLabeller ({labeller.benchmark}: checks {', '.join(sees) if sees else 'nothing'} against "
                f"{len(labeller.worlds)} recorded worlds)")
    if isinstance(labeller, EnvironmentLabeller):
        return "EnvironmentLabeller" + (" (the env declares no grammar: no grammar check)" if labeller.grammar is None
                                        else "")
    return str(getattr(labeller, "__name__", type(labeller).__name__))


def audit(setting: str, abstractions: Sequence[Any], labeller: Callable[..., Any], rejected: int | Iterable[Invocation] = 0,
          sources: Mapping[int, SourceRecord] | None = None) -> AuditRow:
    """The audit row of one setting.

    Args:
        abstractions: the stored abstractions (inactive ones included), with provenance.
        labeller: a :class:`Labeller` (or a plain ``(text) -> bool``).
        rejected: the invocations the admission filter rejected (or just their count,
            when their parents are unknown: they then count as unexposed).
        sources: the records by id, for labellers that check provenance.
    """
    return audit_labelled(setting, abstractions, labeller, rejected, sources)[0]


def audit_labelled(setting: str, abstractions: Sequence[Any], labeller: Callable[..., Any],
                   rejected: int | Iterable[Invocation] = 0, sources: Mapping[int, SourceRecord] | None = None
                   ) -> tuple[AuditRow, dict[int, Label]]:
    """:func:`audit`, and each stored abstraction's label (each text is labelled once).

    A stored abstraction that maintenance pruned counts as not admitted: it did not stay.
    Its family is its first source record's (``sources`` carries them). An abstraction that
    no synthesis made (it has no source record: seeded into the memory, given) is labelled
    and can be a parent, but is no synthesis invocation: counting it as one made beta the
    seeded share.
    """
    sources = sources or {}

    def label(text: str, source_ids: Sequence[int]) -> Label:
        return _label(labeller, text, [sources[i] for i in source_ids if i in sources])

    def family(source_ids: Sequence[int]) -> str:
        return next((sources[i].family for i in source_ids if i in sources), "")

    labels = {a.id: label(a.text, a.sources) for a in abstractions}
    flags = {i: lab.flagged for i, lab in labels.items()}
    synthesised = [a for a in abstractions if a.sources]
    exposed = [a for a in synthesised if any(flags.get(p, False) for p in a.parents)]
    unexposed = [a for a in synthesised if a not in exposed]
    pruned = {a.id for a in abstractions if isinstance(a.flags, Mapping) and a.flags.get("pruned")}
    invocations = [Invocation(a.text, tuple(a.parents), a.id not in pruned, tuple(a.sources), family(a.sources),
                              *_coin(a.flags.get("exposure") if isinstance(a.flags, Mapping) else None))
                   for a in synthesised]
    if isinstance(rejected, int):
        invocations += [Invocation("", (), False)] * rejected
        rejected_labels = [Label(False)] * rejected
    else:
        extra = [inv if inv.family or not inv.sources else
                 Invocation(inv.text, inv.parents, inv.admitted, inv.sources, family(inv.sources), inv.coin,
                            inv.would_be_parents) for inv in rejected]
        invocations += extra
        rejected_labels = [label(inv.text, inv.sources) for inv in extra]
    all_labels = [labels[a.id] for a in synthesised] + rejected_labels
    units = tuple(Unit(any(flags.get(p, False) for p in inv.parents), lab.flagged, inv.admitted, inv.family, inv.coin,
                       any(flags.get(p, False) for p in inv.would_be_parents))
                  for inv, lab in zip(invocations, all_labels, strict=True))
    row = AuditRow(
        setting=setting,
        abstractions=len(abstractions),
        flagged=sum(flags.values()),
        with_flagged_parent=len(exposed),
        flagged_given_flagged_parent=sum(flags[a.id] for a in exposed),
        without_flagged_parent=len(unexposed),
        flagged_given_no_flagged_parent=sum(flags[a.id] for a in unexposed),
        rejected=len(invocations) - len(synthesised),
        invocations=len(invocations),
        exposed_invocations=sum(x.exposed for x in units),
        flagged_exposed_invocations=sum(x.exposed and x.flagged for x in units),
        admitted_invocations=sum(x.admitted for x in units),
        reasons=_reason_counts(labels.values()),
        units=units,
    )
    return row, labels


def _reason_counts(labels: Iterable[Label]) -> dict[str, int]:
    """How many labels gave each kind of reason (a reason's text up to its colon)."""
    counts: dict[str, int] = {}
    for lab in labels:
        for kind in {r.split(":")[0] for r in lab.reasons}:
            counts[kind] = counts.get(kind, 0) + 1
    return counts


def rejected_items(headers: Iterable[EpisodeHeader]) -> list[tuple[str, Any]]:
    """``(task family, item)`` of every abstraction an admission filter rejected, from a
    setting's episode headers (what :func:`audit_setting` takes)."""
    out: list[tuple[str, Any]] = []
    for h in headers:
        out += [(h.task_family, item) for item in h.decisions.rejected_abstractions]
    return out


def rejected_invocations(items: Iterable[tuple[str, Any]]) -> list[Invocation]:
    """The synthesis invocations an admission filter rejected (:func:`rejected_items`)."""
    out = []
    for family, item in items:
        if isinstance(item, Mapping):
            out.append(Invocation(str(item.get("text") or ""), tuple(_ints(item.get("parents"))), False,
                                  tuple(_ints(item.get("sources"))), family, *_coin(item.get("exposure"))))
        else:
            out.append(Invocation(str(item), (), False, (), family))
    return out


def _ints(value: Any) -> list[int]:
    return [int(v) for v in value if isinstance(v, int)] if isinstance(value, list | tuple) else []


@dataclass(frozen=True)
class SettingAudit:
    """One setting's audit: the row, each stored abstraction's label, and the labeller used."""

    row: AuditRow
    stored: Sequence[Any]
    labels: Mapping[int, Label]
    labeller: str


#: A run that audits with a labeller of its own (a study's ground truth) names it here, beside
#: its config.json: ``{"labeller": "ap_gym.studies.injection:recommends_buying_at_once"}``.
LABELLER_FILE = "labeller.json"


def record_labeller(run_dir: str | Path, labeller: Callable[..., Any]) -> Path:
    """Name ``labeller`` (a module-level function or class of ap-gym) as ``run_dir``'s audit
    labeller, so that the report, the viewer and the study audit the run alike."""
    import importlib

    from ap_gym.paths import atomic_write_json

    name = f"{labeller.__module__}:{labeller.__qualname__}"
    if not labeller.__module__.startswith("ap_gym.") or \
            getattr(importlib.import_module(labeller.__module__), labeller.__qualname__, None) is not labeller:
        raise ValueError(f"{name} is not a module-level name of ap-gym: a run can only name one of those")
    path = Path(run_dir) / LABELLER_FILE
    atomic_write_json(path, {"labeller": name})
    return path


def run_labeller(directory: str | Path) -> Any:
    """The labeller a run named (:func:`record_labeller`) for a setting ``directory`` of it (or
    the run itself), or ``None``. Only a name inside ``ap_gym`` is imported: a run's files are
    data, never code to run."""
    import importlib
    import json

    here = Path(directory)
    for folder in (here, *here.parents[:4]):
        path = folder / LABELLER_FILE
        if path.is_file():
            try:
                module, _, attr = str(json.loads(path.read_text())["labeller"]).partition(":")
            except (OSError, ValueError, KeyError, TypeError):
                return None
            if not module.startswith("ap_gym."):
                raise ValueError(f"{path} names {module}:{attr}; only an ap-gym labeller is taken from a run")
            return getattr(importlib.import_module(module), attr)
        if (folder / "config.json").is_file():
            return None
    return None


def audit_setting(directory: str | Path, rejected: Iterable[tuple[str, Any]], name: str,
                  labeller: Labeller | None = None, *, judge: Any = None, mode: str = "rules") -> SettingAudit | None:
    """Audit one setting from its results: its stored abstractions (inactive ones too), the
    ``rejected`` invocations (:func:`rejected_items` of its episode headers), the source
    records they cite, labelled by ``labeller`` (default: :class:`EnvironmentLabeller` with the grammar its run recorded;
    with a ``judge`` backbone, ``mode`` ``"judge"`` labels with it alone and ``"both"`` flags
    what either flags).
    ``None`` when the setting stored and rejected nothing. ``ap-gym report`` and ``ap-gym
    view`` both audit through here.

    Raises:
        StoreError: the setting's memory cannot be read.
    """
    stored = load_abstractions(directory)
    invocations = rejected_invocations(rejected)
    if not stored and not invocations:
        return None
    if labeller is None:  # the labeller the run recorded for its audit, if it named one: one audit everywhere
        labeller = run_labeller(directory)
    if labeller is None:
        meta = load_benchmark(directory)
        grammar = meta.get("grammar")
        rules: Any = EnvironmentLabeller(Grammar.from_dict(grammar) if isinstance(grammar, Mapping) else None)
        worlds = load_worlds(directory)
        if worlds:  # the engine's facts of the training tasks: claims checked against the world
            from ap_gym.report.grounded import GroundedLabeller

            rules = AnyOf([rules, GroundedLabeller(worlds, str(meta.get("benchmark") or name.split("/")[0]))])
        judged = JudgeLabeller(judge, str(meta.get("benchmark") or name.split("/")[0])) if judge is not None else None
        labeller = rules if judged is None else judged if mode == "judge" else AnyOf([rules, judged])
    ids = {i for a in stored for i in a.sources} | {i for inv in invocations for i in inv.sources}
    records = {i: SourceRecord.of(r) for i, r in load_records(directory, ids).items()}
    row, labels = audit_labelled(name, stored, labeller, invocations, records)
    return SettingAudit(row, stored, labels, describe_labeller(labeller))
