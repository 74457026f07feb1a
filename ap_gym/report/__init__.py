"""``ap-gym report``: the paper's tables and figures from result files only.

Writes into ``<run>/report/`` (or ``out``): ``report.md`` with every table
(:mod:`~ap_gym.report.tables`), each table also as a numeric CSV, and the figures
(:mod:`~ap_gym.report.plots`): ``curves.png`` (held-out success, LLM calls and trajectory
length against iteration) and ``success_vs_cost.png``.

Several runs are reported side by side, never merged (:mod:`~ap_gym.report.data`). The
report states the embedder of each run, the stand-ins, the labeller of the audit, and
which methods chose among admissible commands (ap-gym's ``choose``, not the paper's
generating agent).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ap_gym.report import plots, tables
from ap_gym.report.data import DEFAULT_METHOD, Results, collect
from ap_gym.report.tables import Table

__all__ = ["DEFAULT_METHOD", "Results", "Table", "collect", "report_tables", "write_report"]

AUDIT_INTRO = (
    "What a flag measures: the labeller named below found, in an abstraction, an invented command, an object no "
    "source record shows, a command that failed every time it was issued, or (where the run recorded the engine's "
    "facts of its training tasks: TextWorld, ALFWorld, the Shop) a claim the world contradicts: a wrong location, "
    "precondition or order, a failure over-generalised, one task's fact stated for its family. Not flagged means "
    "not flagged, never correct. The card under this table gives the labeller's precision and recall per error "
    "type on a set written after its rules were frozen, and which types it cannot see. The paper's gap compares "
    "stored abstractions with and without a flagged parent; with an admission filter that depends on the flag it "
    "is biased, so the estimates count every synthesis invocation (seeded items are parents, never invocations), "
    "admitted or rejected, each with its 95 % interval (Wilson; Newcombe for gaps): q (exposed to a flagged "
    "parent), alpha (flagged given exposed), beta (flagged given not), the gap alpha - beta, the same gap "
    "stratified by task family (Mantel-Haenszel with Newcombe-style bounds), eta (admission of a flagged exposed "
    "output) and the joint rate of exposed, flagged and admitted outputs. These are associations: stratifying by "
    "family removes confounding across families only; within a family (harder tasks retrieving harder tasks' "
    "abstractions) or over a run whose error rate drifts, the stratified gap can exclude 0 with no copying at all "
    "(benchmarks/recovery.py). With `audit: {randomise_exposure: p}` the run withholds each synthesis call's "
    "retrieved parents by a recorded coin, and the randomised gap (shown minus withheld, among calls whose task "
    "retrieved a flagged abstraction) is a causal estimate. A pruned abstraction counts as not admitted.")


def labeller_card(labeller: str) -> str:
    """What is measured of the labeller (``labeller.json``, written by benchmarks/grounded_card.py)."""
    import json
    from importlib import resources

    if "Judge" in labeller or not labeller.startswith("EnvironmentLabeller"):
        return (f"{labeller}: with a judge or a labeller of your own, its precision and recall are not measured here; "
                "measure them with benchmarks/grounded_card.py (or benchmarks/audit_labeller.py --judge SPEC).")
    card = json.loads((resources.files("ap_gym.report") / "labeller.json").read_text())
    types = "; ".join(f"{t}: recall {c['recall']}, precision of its flags {c['precision']} (n={c['n']})"
                      for t, c in card["types"].items() if c["n"] or c["flagged_as_type"])
    unseen = ", ".join(card.get("cannot_see", [])) or "none"
    misses = "; ".join(f"{t}: " + " / ".join(repr(m) for m in ms[:2]) for t, ms in card.get("misses", {}).items() if ms)
    if misses:
        types += f". What it missed there, per type: {misses}"
    measured = card.get("labeller", "EnvironmentLabeller or GroundedLabeller")
    scope = "" if "GroundedLabeller" in labeller else (
        f" These settings recorded no worlds (worlds.jsonl), so only the rules ran, not the grounded checks: the "
        f"figures below are of {measured} and this labeller's recall is at most theirs.")
    return (f"{labeller}:{scope} {measured} was measured once on {card['n']} abstractions ({card['erroneous']} "
            f"erroneous) of {card['set']}: precision {card['precision']}, recall {card['recall']}. Per error type: "
            f"{types}. Cannot see (no engine facts): {unseen}; on ScienceWorld and the official WebShop only the "
            "grammar, absent and contradicted rules run.")


def report_tables(r: Results, labeller: Any = None, audit: bool = True, judge: Any = None,
                  mode: str = "rules") -> list[Table]:
    """Every table of the report, in order (the audit last, unless ``audit`` is off)."""
    name = r.methods[r.flagship].name if r.flagship else DEFAULT_METHOD
    found: list[Table | None] = [tables.table1(r), tables.table1(r, infra_as_failure=True), tables.denominators(r),
                                 tables.calls(r), tables.per_family(r), tables.modes(r, name),
                                 tables.discard_vs_persist(r, name), *tables.setting_stats(r), tables.same_task(r)]
    if audit:
        table, unreadable, used = tables.audit_table(r, labeller, judge, mode)
        notes = [AUDIT_INTRO, *(f"Labeller: {labeller_card(u)}" for u in used)]
        if unreadable:
            notes += ["Settings whose memory could not be read (not audited):", *unreadable]
        found.append(Table("audit", "Error-reproduction audit", table.header, table.rows, "\n\n".join(notes),
                           table.data_header, table.data)
                     if table is not None else Table("audit", "Error-reproduction audit", [], [],
                                                     "\n\n".join([*notes, "No method in these runs stored "
                                                                              "abstractions."])))
    return [t for t in found if t is not None]


def unfinished(runs: Sequence[str | Path]) -> list[str]:
    """A warning per run that is not finished (still running, or stopped before its end):
    what a report of it shows is partial, and it says so first."""
    from ap_gym.protocol.results import run_state

    out = []
    for run in runs:
        state, why = run_state(run)
        if state != "finished":
            out.append(f"**This run is not finished: {run} is {state} ({why}).** Every table below is of the "
                       "episodes written so far, not of the whole run.")
    return out


def _head(r: Results) -> list[str]:
    evals = r.evals
    infra = sum(x.head.infrastructure_failure for x in evals)
    embedders = "; ".join(f"{run}: {e}" for run, e in r.embedders.items())
    warnings = unfinished(r.runs)
    head = ["# ap-gym report", "", *(line for w in warnings for line in (w, "")), *r.descriptions, "",
            f"Runs: {', '.join(str(p) for p in r.runs)} (reported side by side; a label two runs share is shown "
            f"once per run). Held-out episodes: {len(evals)}, infrastructure failures among them: {infra}. "
            f"Embedder: {embedders} (the bandit's rho = 0.7 is on the paper's embedder's similarity scale; another "
            "embedder has another).", "",
            reading_notes(), ""]
    return head


def reading_notes() -> str:
    """How to read every table: what success is, what the spreads are over, and what the
    marks (†, ‡, §) mean; the report and the viewer's copy of its tables both print it."""
    return ("Success is the benchmark's own definition; a step-limit truncation and a prompt the model refused are "
            "failures. Means and standard deviations are over seeds at each setting's final iteration. "
            f"{tables.IDENTICAL_MARK} marks a method whose seeds gave identical results (greedy decoding), so its "
            f"± 0.0 is not a measured spread; {tables.CHOOSE_MARK} marks a method whose agent chose among admissible "
            "commands by log-likelihood (ap-gym's `choose`), not the paper's agent, which generates its action; "
            f"{tables.CONSTRAINED_MARK} marks one that chose by greedy decoding under a choice grammar "
            "(`choose_method: constrained`): another decision rule than the argmax of log-likelihoods, so another "
            "agent than the same method chosen exactly.")


def write_report(runs: Sequence[str | Path], out: str | Path | None = None, benchmark_labeller: bool = True,
                 method: str = DEFAULT_METHOD, labeller: Any = None, judge: Any = None, mode: str = "both") -> Path:
    """Write the report of ``runs``; ``method`` (a policy name) is compared against the others,
    and ``labeller`` (default: the env's grammar rules) labels abstractions for the audit
    (``benchmark_labeller=False`` leaves the audit out). A ``judge`` backbone labels too:
    alone (``mode="judge"``) or beside the rules (``"both"``)."""
    r = collect(runs, method)
    out = Path(out) if out else Path(runs[0]) / "report"
    out.mkdir(parents=True, exist_ok=True)
    used = sorted({s.split(" @ ")[0] for s in r.settings} & set(r.stand_ins))
    note = "Stand-ins: " + "; ".join(f"**{b}**: {r.stand_ins[b]}" for b in used) + "." if used else ""
    md = [*_head(r), *([note, ""] if note else [])]
    for table in report_tables(r, labeller, audit=benchmark_labeller, judge=judge, mode=mode if judge else "rules"):
        if table.header:
            table.write_csv(out)
        md += [table.markdown(note if table.name.startswith(("final_success", "denominators")) else ""), ""]
    plots.curves(r, out / "curves.png")
    plots.success_vs_cost(r, out / "success_vs_cost.png")
    md += ["## Curves", "", "![held-out success, LLM calls and steps per iteration](curves.png)", "",
           "## Success against cost", "", "![final success against LLM calls per task](success_vs_cost.png)", ""]
    (out / "report.md").write_text("\n".join(md))
    return out
