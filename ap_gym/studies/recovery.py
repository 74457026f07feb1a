"""Can the audit recover a planted truth, and does it stay silent on a null?

The error-reproduction audit (:mod:`ap_gym.report.audit`) estimates, from provenance,
how often synthesis exposed to a flagged parent writes a flagged output again. An
instrument that cannot fail proves nothing, so this module simulates provenance with a
known ground truth and runs the audit's own code on it:

* families of tasks, each with a base error rate beta_f (a synthesis writes a flagged
  output with it, exposed or not);
* each synthesis invocation comes from a record whose prompt showed ``parents`` stored
  abstractions, drawn from the task's own family with probability ``same_family`` (as
  retrieval by similarity does); the invocation is *exposed* when a parent is flagged;
* the agent followed a flagged parent with probability ``compliance``, and synthesis
  from such a record copies the error with probability ``copy``;
* the output is admitted (stored, becoming a possible parent) with a probability that
  depends on its flag (``admit_flagged``, ``admit_clean``): an admission filter.

So alpha* = P(flagged | exposed) = compliance * copy * (1 - beta) + beta within a family,
and the gap alpha* - beta* = compliance * copy * (1 - beta). The stores are the real SQLite
stores (:mod:`ap_gym.memory`), the labeller reads the ground-truth flag, and the estimates
are :meth:`~ap_gym.report.audit.AuditRow.estimates`.

Two checks (``benchmarks/recovery.py`` runs them at full size; the tests at CI size):

* **recovery**: equal base rates, copying planted; over many seeds the 95 % intervals of
  alpha and of the gap cover the truth in about 95 % of seeds;
* **confounded null**: base rates that differ by family, no copying at all; the raw gap is
  positive (exposure and errors both follow the family), the family-stratified gap's
  interval holds 0 in about 95 % of seeds, and with copying planted it excludes 0.
"""

from __future__ import annotations

import random
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ap_gym.memory import AbstractionStore, MemoryDB, TrajectoryStore
from ap_gym.report.audit import AuditRow, Invocation, SourceRecord, audit_labelled

__all__ = ["Truth", "coverage", "simulate", "stratified_truth"]


@dataclass(frozen=True)
class Truth:
    """The simulation's parameters (see the module docstring)."""

    base_rates: tuple[float, ...] = (0.1, 0.1, 0.1, 0.1)
    compliance: float = 0.8
    copy: float = 0.9
    admit_flagged: float = 0.4
    admit_clean: float = 0.9
    parents: int = 2
    same_family: float = 0.9
    seeds_per_family: int = 6
    invocations: int = 400

    def alpha(self, family: int) -> float:
        """P(flagged | exposed) in ``family``."""
        beta = self.base_rates[family]
        return self.compliance * self.copy * (1 - beta) + beta

    def gap(self, family: int) -> float:
        return self.alpha(family) - self.base_rates[family]

    @property
    def equal_rates(self) -> bool:
        return len(set(self.base_rates)) == 1


@dataclass
class _World:
    truth: Truth
    rng: random.Random
    trajectories: TrajectoryStore
    abstractions: AbstractionStore
    flagged: dict[int, bool] = field(default_factory=dict)
    by_family: dict[int, list[int]] = field(default_factory=dict)
    rejected: list[Invocation] = field(default_factory=list)

    def store(self, flagged: bool, family: int, sources: Sequence[int] = (), parents: Sequence[int] = ()) -> int:
        text = ("wrong" if flagged else "right") + f" rule {len(self.flagged)}"
        aid = self.abstractions.add(text=text, kind="rule", embedding=_unit(family), iteration=0,
                                    sources=sources, parents=parents)
        self.flagged[aid] = flagged
        self.by_family.setdefault(family, []).append(aid)
        return aid

    def parents_for(self, family: int) -> list[int]:
        out = []
        for _ in range(self.truth.parents):
            pool = self.by_family[family] if self.rng.random() < self.truth.same_family else list(self.flagged)
            out.append(self.rng.choice(pool))
        return sorted(set(out))

    def invoke(self, family: int) -> None:
        t, rng = self.truth, self.rng
        parents = self.parents_for(family)
        exposed = any(self.flagged[p] for p in parents)
        carried = exposed and rng.random() < t.compliance  # the agent followed the flagged parent
        flagged = (carried and rng.random() < t.copy) or rng.random() < t.base_rates[family]
        record = self.trajectories.add(task_id=f"task/{family}", family=f"family{family}", instruction="a task",
                                       steps=[], success=not flagged, score=None, embedding=_unit(family),
                                       iteration=0, abstraction_ids=parents)
        if rng.random() < (t.admit_flagged if flagged else t.admit_clean):
            self.store(flagged, family, [record], parents)
        else:
            text = ("wrong" if flagged else "right") + " rejected"
            self.rejected.append(Invocation(text, tuple(parents), False, (record,), f"family{family}"))


def _unit(family: int) -> np.ndarray:
    v = np.zeros(4, dtype=np.float32)
    v[family % 4] = 1.0
    return v


def simulate(truth: Truth, seed: int, workdir: str | Path | None = None) -> AuditRow:
    """One seed of the simulation through the real stores and the audit; its row."""
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        db = MemoryDB(Path(tmp) / "memory.sqlite", embedding_dim=4, embedder="simulation")
        db.execute("PRAGMA synchronous=OFF")  # a throwaway file: no fsync per row
        world = _World(truth, random.Random(seed), TrajectoryStore(db), AbstractionStore(db))
        families = range(len(truth.base_rates))
        for family in families:  # the seeded stores: flagged at the family's own rate
            for _ in range(truth.seeds_per_family):
                world.store(world.rng.random() < truth.base_rates[family], family)
        for t in range(truth.invocations):
            world.invoke(t % len(truth.base_rates))
        stored = world.abstractions.all(include_inactive=True)
        ids = [i for a in stored for i in a.sources] + [i for inv in world.rejected for i in inv.sources]
        records = {r.id: SourceRecord.of(r) for r in world.trajectories.get(sorted(set(ids)))}
        row, _ = audit_labelled("simulation", stored, lambda text: text.startswith("wrong"), world.rejected, records)
        db.close()
    return row


def stratified_truth(truth: Truth, row: AuditRow) -> float:
    """What the Mantel-Haenszel gap estimates in this seed: the families' true gaps weighted
    as the estimator weighs them (n1 n0 / N of each family's exposed and unexposed counts)."""
    weights: dict[int, float] = {}
    for f in range(len(truth.base_rates)):
        units = [u for u in row.units if u.family == f"family{f}"]
        n1 = sum(u.exposed for u in units)
        n0 = len(units) - n1
        weights[f] = n1 * n0 / len(units) if units else 0.0
    total = sum(weights.values())
    return sum(w * truth.gap(f) for f, w in weights.items()) / total if total else float("nan")


def coverage(truth: Truth, seeds: Sequence[int]) -> dict[str, Any]:
    """Per estimate, how often its 95 % interval covered the truth over ``seeds``, the mean
    estimate, and how often the interval excluded 0. The stratified gap's truth is 0 without
    copying, else :func:`stratified_truth` of the seed; alpha, beta and the gap have one
    truth when the base rates are equal."""
    rows = [simulate(truth, s) for s in seeds]
    truths: dict[str, float] = {"eta": truth.admit_flagged}
    if truth.equal_rates:
        truths.update(alpha=truth.alpha(0), beta=truth.base_rates[0], gap=truth.gap(0))
    out: dict[str, Any] = {"seeds": len(rows), "truth": dict(truths)}
    strat = [0.0 if truth.copy == 0 or truth.compliance == 0 else stratified_truth(truth, r) for r in rows]
    out["truth"]["stratified_gap"] = float(np.mean(strat))
    estimates_by_seed = [r.estimates() for r in rows]
    for name in ("alpha", "beta", "gap", "stratified_gap", "eta", "q", "joint"):
        pairs = [(e[name], strat[k] if name == "stratified_gap" else truths.get(name))
                 for k, e in enumerate(estimates_by_seed) if not np.isnan(e[name].value)]
        entry: dict[str, Any] = {"mean": float(np.mean([e.value for e, _ in pairs])) if pairs else None,
                                 "excludes_zero": sum(e.excludes_zero() for e, _ in pairs) / max(1, len(pairs))}
        if pairs and pairs[0][1] is not None:
            entry["coverage"] = sum(e.covers(t) for e, t in pairs) / len(pairs)
        out[name] = entry
    return out
