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

Two more sources of confounding that stratifying by family cannot remove:

* **within a family** (``hard_share``, ``hard_rate``, ``same_difficulty``): a share of each
  family's tasks is hard, with a higher base error rate, and retrieval draws a hard task's
  parents from other hard tasks (their abstractions more often flagged);
* **drift** (``drift``): the base error rate grows over the run, so late invocations are
  both more error-prone and more often exposed (flagged abstractions accumulate).

And the remedy: **randomised exposure** (``randomise``): each invocation's task flips a
recorded coin; with that probability the parents its retrieval found are withheld from its
prompt (no exposure, no copying). Among the invocations whose retrieval held a flagged
abstraction, the coin's two arms differ only by the coin, so their difference in flag rate
estimates the effect of exposure whatever confounds exposure observationally; its truth is
the mean of compliance * copy * (1 - beta) over those invocations (0 without copying).

Checks (``benchmarks/recovery.py`` runs them at full size; the tests at CI size):

* **recovery**: equal base rates, copying planted; over many seeds the 95 % intervals of
  alpha and of the gap cover the truth in about 95 % of seeds;
* **confounded nulls** (by family, within a family, by drift): no copying at all; the
  observational gaps are positive, the family-stratified one too on the last two, and the
  randomised gap's interval holds 0 in about 95 % of seeds; with copying planted, the
  randomised gap finds it.
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

__all__ = ["Truth", "coverage", "simulate", "simulate_with_truth", "stratified_truth"]


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
    #: within-family confounding: the share of hard tasks, their base rate, and how often
    #: a hard task's parents come from hard tasks (0: no hard tasks)
    hard_share: float = 0.0
    hard_rate: float = 0.6
    same_difficulty: float = 0.9
    #: the base rate's growth from the first invocation to the last
    drift: float = 0.0
    #: the chance that an invocation's retrieved parents are withheld (randomised exposure)
    randomise: float = 0.0

    def alpha(self, family: int) -> float:
        """P(flagged | exposed) in ``family``."""
        beta = self.base_rates[family]
        return self.compliance * self.copy * (1 - beta) + beta

    def base_rate(self, family: int, hard: bool, t: int) -> float:
        """The base error rate of an invocation: its family's (or the hard tasks'), drifted."""
        beta = self.hard_rate if hard else self.base_rates[family]
        return min(1.0, beta + self.drift * t / max(1, self.invocations - 1))

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
    hard: dict[int, bool] = field(default_factory=dict)
    rejected: list[Invocation] = field(default_factory=list)
    #: per invocation whose retrieval held a flagged parent: its true effect of exposure
    reachable_effects: list[float] = field(default_factory=list)

    def store(self, flagged: bool, family: int, sources: Sequence[int] = (), parents: Sequence[int] = (),
              hard: bool = False, exposure: dict[str, Any] | None = None) -> int:
        text = ("wrong" if flagged else "right") + f" rule {len(self.flagged)}"
        aid = self.abstractions.add(text=text, kind="rule", embedding=_unit(family), iteration=0,
                                    sources=sources, parents=parents,
                                    flags={"exposure": exposure} if exposure is not None else None)
        self.flagged[aid] = flagged
        self.hard[aid] = hard
        self.by_family.setdefault(family, []).append(aid)
        return aid

    def parents_for(self, family: int, hard: bool) -> list[int]:
        out = []
        for _ in range(self.truth.parents):
            pool = self.by_family[family] if self.rng.random() < self.truth.same_family else list(self.flagged)
            if self.truth.hard_share > 0 and self.rng.random() < self.truth.same_difficulty:
                pool = [a for a in pool if self.hard[a] == hard] or pool  # retrieval finds tasks like this one
            out.append(self.rng.choice(pool))
        return sorted(set(out))

    def invoke(self, family: int, t_index: int) -> None:
        t, rng = self.truth, self.rng
        hard = t.hard_share > 0 and rng.random() < t.hard_share  # no draw without hard tasks: the old worlds stay
        beta = t.base_rate(family, hard, t_index)
        retrieved = self.parents_for(family, hard)
        coin = None
        if t.randomise > 0:
            coin = "withhold" if rng.random() < t.randomise else "expose"
            if any(self.flagged[p] for p in retrieved):
                self.reachable_effects.append(t.compliance * t.copy * (1 - beta))
        parents = [] if coin == "withhold" else retrieved
        exposed = any(self.flagged[p] for p in parents)
        carried = exposed and rng.random() < t.compliance  # the agent followed the flagged parent
        flagged = (carried and rng.random() < t.copy) or rng.random() < beta
        record = self.trajectories.add(task_id=f"task/{family}", family=f"family{family}", instruction="a task",
                                       steps=[], success=not flagged, score=None, embedding=_unit(family),
                                       iteration=0, abstraction_ids=parents)
        exposure = {"coin": coin, "would_be_parents": retrieved} if coin is not None else None
        if rng.random() < (t.admit_flagged if flagged else t.admit_clean):
            self.store(flagged, family, [record], parents, hard, exposure)
        else:
            text = ("wrong" if flagged else "right") + " rejected"
            self.rejected.append(Invocation(text, tuple(parents), False, (record,), f"family{family}",
                                            coin, tuple(retrieved)))


def _unit(family: int) -> np.ndarray:
    v = np.zeros(4, dtype=np.float32)
    v[family % 4] = 1.0
    return v


def simulate(truth: Truth, seed: int, workdir: str | Path | None = None) -> AuditRow:
    """One seed of the simulation through the real stores and the audit; its row."""
    return simulate_with_truth(truth, seed, workdir)[0]


def simulate_with_truth(truth: Truth, seed: int, workdir: str | Path | None = None) -> tuple[AuditRow, float]:
    """:func:`simulate`, and the randomised gap's truth in this seed (the mean true effect of
    exposure over the invocations whose retrieval held a flagged parent; NaN without any)."""
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        db = MemoryDB(Path(tmp) / "memory.sqlite", embedding_dim=4, embedder="simulation")
        db.execute("PRAGMA synchronous=OFF")  # a throwaway file: no fsync per row
        world = _World(truth, random.Random(seed), TrajectoryStore(db), AbstractionStore(db))
        families = range(len(truth.base_rates))
        for family in families:  # the seeded stores: flagged at the family's own (or the hard tasks') rate
            for k in range(truth.seeds_per_family):
                hard = k < round(truth.seeds_per_family * truth.hard_share)
                world.store(world.rng.random() < truth.base_rate(family, hard, 0), family, hard=hard)
        for t in range(truth.invocations):
            world.invoke(t % len(truth.base_rates), t)
        stored = world.abstractions.all(include_inactive=True)
        ids = [i for a in stored for i in a.sources] + [i for inv in world.rejected for i in inv.sources]
        records = {r.id: SourceRecord.of(r) for r in world.trajectories.get(sorted(set(ids)))}
        row, _ = audit_labelled("simulation", stored, lambda text: text.startswith("wrong"), world.rejected, records)
        db.close()
    effects = world.reachable_effects
    return row, (float(np.mean(effects)) if effects else float("nan"))


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
    simulated = [simulate_with_truth(truth, s) for s in seeds]
    rows = [r for r, _ in simulated]
    randomised = [x for _, x in simulated]
    truths: dict[str, float] = {"eta": truth.admit_flagged}
    confounded = truth.hard_share > 0 or truth.drift > 0
    if truth.equal_rates and not confounded:  # one base rate: alpha, beta and the gap each have one truth
        truths.update(alpha=truth.alpha(0), beta=truth.base_rates[0], gap=truth.gap(0))
    elif truth.copy == 0 or truth.compliance == 0:  # a null: no effect of exposure, whatever the rates
        truths.update(gap=0.0)
    out: dict[str, Any] = {"seeds": len(rows), "truth": dict(truths)}
    strat = [0.0 if truth.copy == 0 or truth.compliance == 0 else
             (float("nan") if confounded else stratified_truth(truth, r)) for r in rows]
    out["truth"]["stratified_gap"] = float(np.nanmean(strat)) if not all(np.isnan(strat)) else None
    if truth.randomise > 0:
        out["truth"]["randomised_gap"] = float(np.nanmean(randomised)) if not all(np.isnan(randomised)) else None
    estimates_by_seed = [r.estimates() for r in rows]
    per_seed = {"stratified_gap": strat, "randomised_gap": randomised}
    for name in ("alpha", "beta", "gap", "stratified_gap", "randomised_gap", "eta", "q", "joint"):
        pairs = [(e[name], per_seed[name][k] if name in per_seed else truths.get(name))
                 for k, e in enumerate(estimates_by_seed) if not np.isnan(e[name].value)]
        entry: dict[str, Any] = {"mean": float(np.mean([e.value for e, _ in pairs])) if pairs else None,
                                 "excludes_zero": sum(e.excludes_zero() for e, _ in pairs) / max(1, len(pairs))}
        known = [(e, x) for e, x in pairs if x is not None and not np.isnan(x)]
        if known:
            entry["coverage"] = sum(e.covers(x) for e, x in known) / len(known)
        out[name] = entry
    return out
