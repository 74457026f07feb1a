"""The report's view of one or more runs: every episode line, tagged with its method and setting.

A *setting* is a benchmark with a backbone (``alfworld @ Llama-4-Scout``); a policy that
uses no model (``random``, ``walkthrough``: the registry's needs, recorded by the run) has
the benchmark alone, and its results stand in every backbone's column of that benchmark.
A *method* is a policy label, and runs are never merged: when two runs hold the same
label, each is a method of its own, ``label [run]``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from ap_gym.protocol.results import EpisodeHeader, load_config, load_headers, load_stand_ins
from ap_gym.types import Termination

__all__ = ["DEFAULT_METHOD", "Method", "Results", "Row", "collect"]

#: The policy (registry name) the report compares against every other one.
DEFAULT_METHOD = "anti_persistence"


@dataclass(frozen=True)
class Method:
    """A method of the report: one policy label of one run."""

    key: str
    label: str
    run: str
    spec: dict[str, Any]
    model_free: bool

    @property
    def name(self) -> str:
        """The policy's registry name."""
        return str(self.spec.get("name", self.label))


@dataclass(frozen=True)
class Row:
    """An episode's header as the report sees it: with its run, its method (a policy label
    of that run) and its column (``setting``: benchmark @ backbone)."""

    head: EpisodeHeader
    run: str
    method: str
    setting: str


@dataclass
class Results:
    """What every table reads (see the module docstring)."""

    runs: list[Path]
    lines: list[Row]
    methods: dict[str, Method]
    stand_ins: dict[str, str]
    embedders: dict[str, str]
    flagship: str | None = None
    descriptions: list[str] = field(default_factory=list)

    @cached_property
    def evals(self) -> list[Row]:
        return [x for x in self.lines if x.head.phase == "eval"]

    @cached_property
    def final_all(self) -> list[Row]:
        """Held-out lines of each setting's final iteration, infrastructure failures included."""
        last: dict[tuple[str, str, int], int] = {}
        for x in self.evals:
            key = (x.setting, x.method, x.head.seed)
            last[key] = max(last.get(key, -1), x.head.iteration)
        return [x for x in self.evals if x.head.iteration == last[(x.setting, x.method, x.head.seed)]]

    @cached_property
    def final(self) -> list[Row]:
        """:attr:`final_all` without infrastructure failures (the denominators every mean uses)."""
        return [x for x in self.final_all if x.head.termination is not Termination.INFRA]

    @cached_property
    def order(self) -> list[str]:
        """Method keys, the flagship first."""
        return sorted({x.method for x in self.evals}, key=lambda m: (m != self.flagship, m))

    @cached_property
    def settings(self) -> list[str]:
        """The table's columns: the settings with a model (or, when no method used one, the benchmarks)."""
        with_model = {x.setting for x in self.evals if not self.methods[x.method].model_free}
        covered = {s.split(" @ ")[0] for s in with_model}
        alone = {x.setting for x in self.evals if self.methods[x.method].model_free} - covered
        return sorted(with_model | alone)

    def key(self, setting: str, method: str) -> str:
        """Where ``method``'s results for the column ``setting`` are filed."""
        return setting.split(" @ ")[0] if self.methods[method].model_free else setting

    def per_seed(self, rows: Sequence[Row], fn: Callable[[list[Row]], float]
                 ) -> dict[tuple[str, str], list[float]]:
        """(column, method) -> ``fn`` of each seed's lines, in seed order."""
        groups: dict[tuple[str, str, int], list[Row]] = defaultdict(list)
        for x in rows:
            groups[(x.setting, x.method, x.head.seed)].append(x)
        by_key: dict[tuple[str, str], list[float]] = defaultdict(list)
        for (s, m, _), xs in sorted(groups.items()):
            by_key[(s, m)].append(fn(xs))
        return {(s, m): by_key[(self.key(s, m), m)] for s in self.settings for m in self.order
                if (self.key(s, m), m) in by_key}


def _run_names(runs: Sequence[Path]) -> dict[Path, str]:
    names = {r: r.name for r in runs}
    if len(set(names.values())) < len(runs):  # two runs of one name: their paths tell them apart
        names = {r: str(r) for r in runs}
    return names


def collect(runs: Sequence[str | Path], method: str = DEFAULT_METHOD) -> Results:
    """Every line of ``runs``, tagged with ``run``, ``method`` and ``setting``."""
    paths = [Path(r) for r in runs]
    names = _run_names(paths)
    metas = {r: load_config(r) for r in paths}
    holders: dict[str, list[Path]] = defaultdict(list)
    for r in paths:
        for p in metas[r]["config"]["policies"]:
            holders[p["label"]].append(r)
    methods: dict[tuple[Path, str], Method] = {}
    for r in paths:
        needs = metas[r].get("policies") or {}
        for p in metas[r]["config"]["policies"]:
            key = p["label"] if len(holders[p["label"]]) == 1 else f"{p['label']} [{names[r]}]"
            model_free = "backbone" not in (needs.get(p["label"]) or {}).get("needs", ["backbone"])
            methods[(r, p["label"])] = Method(key, p["label"], names[r], p, model_free)
    lines = []
    for r in paths:
        backbone = metas[r].get("backbone")
        identity = backbone.get("identity") if isinstance(backbone, dict) else (backbone or "none")
        for h in load_headers(r):
            m = methods[(r, h.policy)]
            model = None if m.model_free else (h.backbone or identity)
            lines.append(Row(h, str(r), m.key, f"{h.benchmark} @ {model}" if model else h.benchmark))
    stand_ins: dict[str, str] = {}
    for r in paths:
        stand_ins.update(load_stand_ins(r))
    by_key = {m.key: m for m in methods.values()}
    flagship = _flagship(list(by_key.values()), method)
    embedders = {names[r]: str(metas[r].get("embedder") or metas[r]["config"].get("embedder") or "?") for r in paths}
    descriptions = [d.strip() for r in paths if (d := metas[r]["config"].get("description"))]
    return Results(paths, lines, by_key, stand_ins, embedders, flagship, descriptions)


def _flagship(methods: list[Method], name: str) -> str | None:
    """The method under test: the label named ``name``, else the first method of that policy
    without options."""
    for m in methods:
        if m.label == name:
            return m.key
    plain = [m.key for m in methods if m.name == name and not m.spec.get("options")]
    return plain[0] if plain else None
