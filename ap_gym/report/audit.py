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

from ap_gym.protocol.results import load_abstractions, load_benchmark, load_records
from ap_gym.text import (
    ACTION_WORDS,
    Command,
    Grammar,
    commands_in,
    failed_action,
    normalise_command,
)

__all__ = ["AnyOf", "AuditRow", "EnvironmentLabeller", "Invocation", "JudgeLabeller", "Label", "Labeller",
           "SettingAudit", "SourceRecord", "audit", "audit_labelled", "audit_setting", "describe_labeller",
           "rejected_invocations"]

_NUMBERED = re.compile(r"\b([a-z]+) (\d+)\b", re.I)
_FUNCTION_WORDS = {"to", "from", "with", "in", "on", "into", "the", "a", "an", "at", "under", "of", "for", "by",
                   "around", "up", "down", "out", "onto", "off", "some", "your", "my", "and", "then", "it"}


@dataclass(frozen=True)
class SourceRecord:
    """A record an abstraction was synthesised from, as the labeller reads it."""

    instruction: str
    steps: tuple[tuple[str, str], ...]  # (action, observation)
    success: bool

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
        return cls(str(get("instruction", "")), tuple(steps), bool(get("success", False)))

    def text(self) -> str:
        return " ".join([self.instruction, *(f"{a} {o}" for a, o in self.steps)]).lower()


@dataclass(frozen=True)
class Label:
    """A labeller's verdict: flagged or not, and why (one reason per rule that fired)."""

    flagged: bool
    reasons: tuple[str, ...] = ()


class Labeller(Protocol):
    """Labels one abstraction given its source records (possibly none)."""

    def __call__(self, text: str, sources: Sequence[SourceRecord] = ()) -> Label: ...


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
        commands = commands_in(text)
        grammar = self.grammar
        if grammar is not None:
            for c in commands:
                if c.verb not in grammar.verbs or (grammar.bracketed and not c.bracketed):
                    reasons.append(f"grammar: {c.text!r} is not a command of this benchmark")
        if sources:
            world = " ".join(s.text() for s in sources)
            reasons += self._absent(text, commands, world)
            reasons += self._contradicted(commands, sources)
        return Label(bool(reasons), tuple(dict.fromkeys(reasons)))

    def _absent(self, text: str, commands: list[Command], world: str) -> list[str]:
        grammar = self.grammar or Grammar(frozenset())
        out = []
        if grammar.numbered_objects:
            for name, number in _NUMBERED.findall(text):
                obj = f"{name.lower()} {number}"
                if obj not in world:
                    out.append(f"absent: {obj!r} is in no source record's world")
        if grammar.ids:
            for item in re.findall(grammar.ids, text, re.I):
                if item.lower() not in world:
                    out.append(f"absent: item {item} is in no source record")
        if grammar.bracketed:
            for c in commands:
                target = c.text[c.text.index("[") + 1:-1].strip() if c.verb == "click" and "[" in c.text else None
                if target and f"[{target}]" not in world and target not in world:
                    out.append(f"absent: no source record shows a {target!r} button")
            return out
        for c in commands:
            if grammar.numbered_objects or c.bracketed:
                continue
            words = [w for w in re.findall(r"[a-z]+", c.text)[1:] if w not in _FUNCTION_WORDS]
            missing = [w for w in words if w not in world and w not in ACTION_WORDS]
            if missing:
                out.append(f"absent: {c.text!r} names {', '.join(missing)}, in no source record's world")
        return out

    @staticmethod
    def _contradicted(commands: list[Command], sources: Sequence[SourceRecord]) -> list[str]:
        out = []
        for c in commands:
            results = [(s.success, failed_action(o)) for s in sources for a, o in s.steps
                       if normalise_command(a) == c.text]
            if not results:
                continue
            if not c.negated and all(failed for _, failed in results):
                out.append(f"contradicted: {c.text!r} failed every time the source records issued it")
            if c.negated and any(success and not failed for success, failed in results):
                out.append(f"contradicted: forbids {c.text!r}, which a successful source record used")
        return out


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
        labels = [lab(text, sources) for lab in self.labellers]
        return Label(any(x.flagged for x in labels), tuple(r for x in labels for r in x.reasons))


# ----------------------------------------------------------------------- the audit
@dataclass(frozen=True)
class Invocation:
    """One synthesis call's output: its text, the stored abstractions in the prompts of the
    records it came from (its parents), and whether it was admitted (stored)."""

    text: str
    parents: tuple[int, ...]
    admitted: bool
    sources: tuple[int, ...] = ()


@dataclass(frozen=True)
class AuditRow:
    """One setting's audit, with every count behind its rates."""

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
        """Admission probability: admitted invocations over all."""
        return self.admitted_invocations / self.invocations if self.invocations else float("nan")


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
    """:func:`audit`, and each stored abstraction's label (each text is labelled once)."""
    sources = sources or {}

    def label(text: str, source_ids: Sequence[int]) -> Label:
        return _label(labeller, text, [sources[i] for i in source_ids if i in sources])

    labels = {a.id: label(a.text, a.sources) for a in abstractions}
    flags = {i: lab.flagged for i, lab in labels.items()}
    exposed = [a for a in abstractions if any(flags.get(p, False) for p in a.parents)]
    unexposed = [a for a in abstractions if a not in exposed]
    invocations = [Invocation(a.text, tuple(a.parents), True, tuple(a.sources)) for a in abstractions]
    if isinstance(rejected, int):
        invocations += [Invocation("", (), False)] * rejected
        rejected_labels = [Label(False)] * rejected
    else:
        extra = list(rejected)
        invocations += extra
        rejected_labels = [label(inv.text, inv.sources) for inv in extra]
    all_labels = [labels[a.id] for a in abstractions] + rejected_labels
    inv_exposed = [(inv, lab) for inv, lab in zip(invocations, all_labels, strict=True)
                   if any(flags.get(p, False) for p in inv.parents)]
    reasons: dict[str, int] = {}
    for lab in labels.values():
        for kind in {r.split(":")[0] for r in lab.reasons}:
            reasons[kind] = reasons.get(kind, 0) + 1
    row = AuditRow(
        setting=setting,
        abstractions=len(abstractions),
        flagged=sum(flags.values()),
        with_flagged_parent=len(exposed),
        flagged_given_flagged_parent=sum(flags[a.id] for a in exposed),
        without_flagged_parent=len(unexposed),
        flagged_given_no_flagged_parent=sum(flags[a.id] for a in unexposed),
        rejected=len(invocations) - len(abstractions),
        invocations=len(invocations),
        exposed_invocations=len(inv_exposed),
        flagged_exposed_invocations=sum(lab.flagged for _, lab in inv_exposed),
        admitted_invocations=len(abstractions),
        reasons=reasons,
    )
    return row, labels


def rejected_invocations(lines: Iterable[Mapping[str, Any]]) -> list[Invocation]:
    """The synthesis invocations an admission filter rejected, from a setting's episode lines."""
    out = []
    for x in lines:
        info = x.get("policy_info")
        for item in (info.get("rejected_abstractions") or []) if isinstance(info, Mapping) else []:
            if isinstance(item, Mapping):
                out.append(Invocation(str(item.get("text") or ""), tuple(_ints(item.get("parents"))), False,
                                      tuple(_ints(item.get("sources")))))
            else:
                out.append(Invocation(str(item), (), False))
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


def audit_setting(directory: str | Path, lines: Iterable[Mapping[str, Any]], name: str,
                  labeller: Labeller | None = None) -> SettingAudit | None:
    """Audit one setting from its results: its stored abstractions (inactive ones too), the
    rejected invocations in its episode ``lines``, the source records they cite, labelled by
    ``labeller`` (default: :class:`EnvironmentLabeller` with the grammar its run recorded).
    ``None`` when the setting stored and rejected nothing. ``ap-gym report`` and ``ap-gym
    view`` both audit through here.

    Raises:
        StoreError: the setting's memory cannot be read.
    """
    stored = load_abstractions(directory)
    rejected = rejected_invocations(lines)
    if not stored and not rejected:
        return None
    if labeller is None:
        grammar = load_benchmark(directory).get("grammar")
        labeller = EnvironmentLabeller(Grammar.from_dict(grammar) if isinstance(grammar, Mapping) else None)
    ids = {i for a in stored for i in a.sources} | {i for inv in rejected for i in inv.sources}
    records = {i: SourceRecord.of(r) for i, r in load_records(directory, ids).items()}
    row, labels = audit_labelled(name, stored, labeller, rejected, records)
    return SettingAudit(row, stored, labels, describe_labeller(labeller))
