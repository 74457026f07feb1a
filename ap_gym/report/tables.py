"""The report's tables, one function each, each returning a :class:`Table`.

``ap-gym report`` writes them (Markdown in ``report.md``, numbers in CSV), and ``ap-gym
view`` shows the same objects: a table is computed in one place. Markdown cells read
``mean ± std`` over seeds; every CSV is numeric, long-format, with the mean and the
standard deviation in columns of their own.
"""

from __future__ import annotations

import csv
import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ap_gym.protocol.results import Rates
from ap_gym.report.data import Results, Row
from ap_gym.report.stats import mean_std, paired_stats
from ap_gym.types import Decisions, Termination

__all__ = ["PAPER_BASELINES", "TABLE7_SIZE", "Table", "audit_table", "calls", "denominators", "discard_vs_persist",
           "identical_seeds", "modes", "per_family", "same_task", "setting_stats", "table1"]

#: The paper's baselines (registry names) that ap-gym has: the Holm family of the
#: setting-level statistics. The paper's Table 7 has seven; its sources name four of them
#: (trajectory, abstraction, joint, Reflexion), and AutoRefine ran in six settings.
PAPER_BASELINES = ("trajectory", "abstraction", "joint", "reflexion", "autorefine")
TABLE7_SIZE = 7
CHOOSE_MARK = "†"
IDENTICAL_MARK = "‡"
CONSTRAINED_MARK = "§"
#: The audit's estimates, in the table's order (see :meth:`~ap_gym.report.audit.AuditRow.estimates`).
ESTIMATES = ("q", "alpha", "beta", "gap", "stratified_gap", "randomised_gap", "eta", "joint")


@dataclass(frozen=True)
class Table:
    """A table: its name (the CSV's file stem), a title, Markdown rows and numeric CSV rows.

    ``rows`` are what a person reads (``mean ± std``); ``data`` (with ``data_header``) the
    numbers, one value a cell, for a spreadsheet; without them the CSV is ``rows``.
    """

    name: str
    title: str
    header: list[str]
    rows: list[list[Any]]
    intro: str = ""
    data_header: list[str] = field(default_factory=list)
    data: list[list[Any]] = field(default_factory=list)

    def markdown(self, note: str = "") -> str:
        def fmt(v: Any) -> str:
            if isinstance(v, float):
                return "n/a" if math.isnan(v) else f"{v:.3g}" if abs(v) < 1e-2 and v != 0 else f"{v:.2f}"
            return str(v)

        lines = [f"## {self.title}", ""] + ([self.intro, ""] if self.intro else [])
        if self.header:
            lines += ["| " + " | ".join(self.header) + " |", "|" + "---|" * len(self.header)]
            lines += ["| " + " | ".join(fmt(v) for v in r) + " |" for r in self.rows]
        return "\n".join(lines + ([""] + [note] if note else []))

    def write_csv(self, directory: Path) -> Path:
        path = directory / f"{self.name}.csv"
        with open(path, "w", newline="") as f:
            csv.writer(f).writerows([self.data_header, *self.data] if self.data_header else [self.header, *self.rows])
        return path


def _pm(values: Sequence[float], scale: float = 1.0, digits: int = 1, mark: str = "") -> str:
    mu, sd = mean_std(values)
    if len(values) == 1:  # one seed has no spread: "± 0.0" would read as a measured one
        return "-" if math.isnan(mu) else f"{scale * mu:.{digits}f} (1 seed){mark}"
    return "-" if math.isnan(mu) else f"{scale * mu:.{digits}f} ± {scale * sd:.{digits}f}{mark}"


def _name(r: Results, method: str) -> str:
    """A method's row name, marked when it chose among admissible commands (ap-gym's agent)."""
    modes = {x.head.decisions.action_mode for x in r.final if x.method == method}
    constrained = any(x.head.decisions.choice_method == "constrained" for x in r.final if x.method == method)
    return f"{method} {CHOOSE_MARK}" + (f"{CONSTRAINED_MARK}" if constrained else "") if "choose" in modes else method


def _mode(decided: Decisions) -> str:
    """The action mode, with how ``choose`` chose (scored, or a constrained generation)."""
    mode = decided.action_mode or "-"
    method = decided.choice_method
    return f"{mode} ({method})" if mode == "choose" and method else mode


def identical_seeds(r: Results) -> dict[tuple[str, str], bool]:
    """(column, method) -> whether its seeds (two or more) gave the same held-out results."""
    by: dict[tuple[str, str], dict[int, list[tuple[Any, ...]]]] = defaultdict(lambda: defaultdict(list))
    for x in r.final_all:
        by[(x.setting, x.method)][x.head.seed].append(
            (x.head.task_id, bool(x.head.success), x.head.score, x.head.num_steps, x.head.termination))
    same = {key: len(s) > 1 and len({tuple(sorted(v)) for v in s.values()}) == 1 for key, s in by.items()}
    return {(s, m): same.get((r.key(s, m), m), False) for s in r.settings for m in r.order}


def _rate(xs: list[Row], infra_as_failure: bool) -> float:
    rates = Rates.of(x.head for x in xs)
    value = rates.rate_all if infra_as_failure else rates.rate
    return math.nan if value is None else value


def table1(r: Results, infra_as_failure: bool = False) -> Table:
    """Final held-out success per method and setting, and the mean over settings (the headline)."""
    success = r.per_seed(r.final_all, lambda xs: _rate(xs, infra_as_failure))
    same = identical_seeds(r)
    rows, data = [], []
    for m in r.order:
        cells, means = [], []
        for s in r.settings:
            values = [v for v in success.get((s, m), []) if not math.isnan(v)]
            cells.append(_pm(values, 100, mark=f" {IDENTICAL_MARK}" if same.get((s, m)) else ""))
            if values:
                mu, sd = mean_std(values)
                means.append(mu)
                data.append([m, s, round(100 * mu, 4), round(100 * sd, 4), len(values)])
        rows.append([_name(r, m), *cells, f"{100 * statistics.fmean(means):.1f}" if means else "-"])
    which = "infrastructure failures counted as failures" if infra_as_failure else \
        "infrastructure failures left out (every other failure counted)"
    return Table("final_success_all" if infra_as_failure else "final_success",
                 f"Table 1{'b' if infra_as_failure else ''}: final held-out success (%), {which}",
                 ["method", *r.settings, "mean over settings"], rows,
                 "One column per benchmark @ backbone; the last is the mean over them (the paper's headline). "
                 "Mean ± std over seeds.",
                 ["method", "setting", "success_mean", "success_std", "seeds"], data)


def denominators(r: Results) -> Table:
    """Per method and setting: episodes, each kind of ending, and both success rates."""
    same = identical_seeds(r)
    rows, data = [], []
    for m in r.order:
        for s in r.settings:
            mine = [x for x in r.final_all if x.method == m and x.setting == r.key(s, m)]
            if not mine:
                continue
            rates = Rates.of(x.head for x in mine)
            rejected = sum(x.head.termination is Termination.PROMPT_REJECTED for x in mine)
            seeds = len({x.head.seed for x in mine})
            rows.append([_name(r, m), s, seeds, rates.episodes, rates.infrastructure_failures, rejected,
                         "no valid episode" if rates.rate is None else f"{100 * rates.rate:.1f}",
                         f"{100 * (rates.rate_all or 0):.1f}",
                         "identical" if same.get((s, m)) else ("-" if seeds < 2 else "differ")])
            data.append([m, s, seeds, rates.episodes, rates.infrastructure_failures, rejected, rates.successes,
                         rates.rate, rates.rate_all])
    return Table("denominators", "Denominators (final iteration, all seeds pooled)",
                 ["method", "setting", "seeds", "episodes", "infrastructure failures", "prompts rejected",
                  "success excl. infrastructure failures (%)", "success counting them (%)", "seeds' results"], rows,
                 "A prompt the model refused (context overflow) is the method's failure, counted in both rates; only "
                 "failures of the infrastructure (server down, timeouts, engine crash) are left out of the first.",
                 ["method", "setting", "seeds", "episodes", "infrastructure_failures", "prompts_rejected", "successes",
                  "success_rate", "success_rate_counting_infrastructure"], data)


def _score(xs: list[Row]) -> float:
    scored = [100 * x.head.score / x.head.max_score for x in xs if x.head.score is not None and x.head.max_score]
    return statistics.fmean(scored) if scored else math.nan


def calls(r: Results) -> Table:
    """Table 6: LLM calls, tokens and trajectory length per held-out task, with their spread over seeds."""
    stats: dict[str, Callable[[list[Row]], float]] = {
        "calls": lambda xs: statistics.fmean(x.head.usage.llm_calls for x in xs),
        "acting": lambda xs: statistics.fmean(x.head.usage.calls_for("acting") for x in xs),
        "other": lambda xs: statistics.fmean(x.head.usage.llm_calls - x.head.usage.calls_for("acting")
                                             for x in xs),
        "tokens": lambda xs: statistics.fmean(x.head.usage.tokens for x in xs),
        "steps": lambda xs: statistics.fmean(x.head.num_steps for x in xs),
        "score": _score,
    }
    per = {k: r.per_seed(r.final, fn) for k, fn in stats.items()}
    keys = ("calls", "acting", "other", "tokens", "steps", "score")
    rows, data = [], []
    for m in r.order:
        for s in r.settings:
            if (s, m) not in per["calls"]:
                continue
            mine = [x for x in r.final if x.method == m and x.setting == r.key(s, m)]
            mode = "/".join(sorted({_mode(x.head.decisions) for x in mine}))
            parse = statistics.fmean(x.head.parse_failures for x in mine)
            v = {k: per[k][(s, m)] for k in per}
            rows.append([_name(r, m), s, mode, _pm(v["calls"], digits=2), _pm(v["acting"], digits=2),
                         _pm(v["other"], digits=2), _pm(v["tokens"], digits=0), _pm(v["steps"]),
                         _pm([x for x in v["score"] if not math.isnan(x)]), parse])
            data.append([m, s, mode, *(round(x, 4) for k in keys
                                       for x in mean_std([y for y in v[k] if not math.isnan(y)])), parse])
    if len(r.settings) > 1:  # each setting's mean over seeds, then their mean (± std over settings)
        for m in r.order:
            covered = [s for s in r.settings if (s, m) in per["calls"]]
            if not covered:
                continue
            means = {k: [mean_std([y for y in per[k][(s, m)] if not math.isnan(y)])[0] for s in covered] for k in per}
            means = {k: [y for y in v if not math.isnan(y)] for k, v in means.items()}
            rows.append([_name(r, m), f"mean over settings ({len(covered)})", "", _pm(means["calls"], digits=2),
                         _pm(means["acting"], digits=2), _pm(means["other"], digits=2), _pm(means["tokens"], digits=0),
                         _pm(means["steps"]), _pm(means["score"]), ""])
            data.append([m, "mean over settings", "", *(round(x, 4) for k in keys for x in mean_std(means[k])), ""])
    return Table("llm_calls", "Table 6: LLM calls, trajectory length and score per held-out task (final iteration)",
                 ["method", "setting", "action mode", "LLM calls", "acting", "synthesis+reflection+maintenance+admission",
                  "tokens", "steps", "score (% of max)", "parse failures"], rows,
                 "Mean ± std over seeds of each seed's mean per task; 'mean over settings': the mean (± std) of the "
                 "settings' means. Tokens: prompt and completion tokens of every LLM call (a call's cost differs by "
                 "design: a synthesis call reads whole records).",
                 ["method", "setting", "action_mode", "llm_calls_mean", "llm_calls_std", "acting_mean", "acting_std",
                  "other_calls_mean", "other_calls_std", "tokens_mean", "tokens_std", "steps_mean", "steps_std",
                  "score_mean", "score_std", "parse_failures"], data)


def per_family(r: Results) -> Table:
    fam: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for x in r.final:
        fam[(x.head.benchmark, x.head.task_family, x.method)].append(float(x.head.success))
    families = sorted({(b, f) for b, f, _ in fam})
    rows = [[b, f, *[(f"{100 * statistics.fmean(fam[(b, f, m)]):.0f} (n={len(fam[(b, f, m)])})"
                      if fam.get((b, f, m)) else "-") for m in r.order]] for b, f in families]
    data = [[b, f, m, statistics.fmean(v), len(v)] for (b, f, m), v in sorted(fam.items())]
    return Table("per_family", "Success per task family (%, final iteration, all seeds)",
                 ["benchmark", "family", *r.order], rows, "",
                 ["benchmark", "family", "method", "success_rate", "episodes"], data)


def modes(r: Results, name: str) -> Table | None:
    """How often each mode was chosen, per method of policy ``name``, setting and phase (§4.4)."""
    labels = [m for m in r.order if r.methods[m].name == name]
    mode_names = sorted({d.mode for d in (x.head.decisions for x in r.lines) if d.mode})
    if not labels or not mode_names:
        return None
    groups: dict[tuple[str, str, str], Counter[str]] = defaultdict(Counter)
    for x in r.lines:
        decided = x.head.decisions
        if x.method in labels and decided.mode:
            key = (x.method, x.setting, x.head.phase)
            groups[key][decided.mode] += 1
            groups[key]["(fallback)"] += decided.mode_reason == "fallback"
            groups[key]["(synthesis skipped)"] += bool(decided.synthesis_skipped)
    rows, data = [], []
    for (m, s, phase), counts in sorted(groups.items()):
        total = sum(counts[k] for k in mode_names)
        rows.append([m, s, phase, *[f"{100 * counts[k] / total:.0f}%" for k in mode_names],
                     f"{100 * counts['(synthesis skipped)'] / total:.0f}%",
                     f"{100 * counts['(fallback)'] / total:.0f}%", total])
        data += [[m, s, phase, k, counts[k], counts[k] / total]
                 for k in [*mode_names, "(synthesis skipped)", "(fallback)"]]
    return Table("modes", f"{name} mode usage per setting", ["method", "setting", "phase", *mode_names,
                                                             "chosen, synthesis skipped", "by the rho fallback",
                                                             "episodes"], rows,
                 "Share of episodes in which the bandit (or the ablation) chose each mode; of them, the share whose "
                 "mode found none of the records it synthesises from, so no synthesis ran and no guidance was shown "
                 "(a 'strategic 50 %' with all of them skipped showed nothing); and how many choices the bandit made "
                 "by its global fallback (the neighbourhood's mean similarity below rho = 0.7: how much the "
                 "embedder's similarity scale decides).",
                 ["method", "setting", "phase", "mode", "episodes", "share"], data)


def _same_synthesis(r: Results, persist: str, discard: str) -> bool:
    """Whether ``discard`` is ``persist`` without ``persist_guidance``, in the same run."""
    a, b = r.methods[persist], r.methods[discard]
    options = dict(a.spec.get("options") or {})
    options.pop("persist_guidance", None)
    return a.run == b.run and options == dict(b.spec.get("options") or {})


def discard_vs_persist(r: Results, name: str) -> Table | None:
    """Table 2: the same synthesis, guidance discarded against persisted.

    Both arms must come from one run, with the same options but ``persist_guidance`` (the
    same tasks, seeds, backbone and synthesis): a discard arm from the main run beside a
    persist arm from another run compares two runs, not two fates of the same guidance.
    ``None`` (and no table) when no run holds such a pair."""
    labels = [m for m in r.order if r.methods[m].name == name]
    persist = [m for m in labels if (r.methods[m].spec.get("options") or {}).get("persist_guidance")]
    pairs = [(d, p) for p in persist
             for d in sorted((m for m in labels if m not in persist), key=lambda m: m != r.flagship)
             if _same_synthesis(r, p, d)][:1]
    if not pairs:
        return None
    discard, kept = pairs[0]
    success = r.per_seed(r.final_all, lambda xs: _rate(xs, False))
    rows, data = [], []
    for s in r.settings:
        a, b = success.get((s, discard), []), success.get((s, kept), [])
        if not a and not b:
            continue
        rows.append([s, _pm(a, 100), _pm(b, 100)])
        data.append([s, *(round(100 * v, 4) for v in (*mean_std(a), *mean_std(b)))])
    return Table("discard_vs_persist", "Table 2: discard versus persist (final held-out success, %)",
                 ["setting", f"discard ({discard})", f"persist ({kept})"], rows,
                 f"One run ({r.methods[kept].run}): the same tasks, seeds and synthesis; only what happens to the "
                 "guidance afterwards differs. Mean ± std over seeds.",
                 ["setting", "discard_mean", "discard_std", "persist_mean", "persist_std"], data)


def setting_stats(r: Results) -> list[Table]:
    """Paired setting-level statistics of the flagship against the paper's baselines (one
    Holm family) and against every other method (a family of their own)."""
    flagship = r.flagship
    if flagship is None or flagship not in r.order:
        return []
    success = r.per_seed(r.final_all, lambda xs: _rate(xs, False))
    mean = {k: mean_std([x for x in v if not math.isnan(x)])[0] for k, v in success.items()}
    ours = {s: mean[(s, flagship)] for s in r.settings if (s, flagship) in mean}
    family = [m for m in r.order if m != flagship and r.methods[m].name in PAPER_BASELINES
              and r.methods[m].label == r.methods[m].name]
    others = [m for m in r.order if m != flagship and m not in family]
    missing = [b for b in PAPER_BASELINES if b not in {r.methods[m].name for m in family}]
    header = ["baseline", "settings", "mean diff (pts)", "positive", "95% t-interval", "t-test p", "Holm",
              "Wilcoxon p", "Holm"]
    note = (f"Paired differences {flagship} minus baseline over settings, in points; Holm's correction within each "
            f"family. The paper's Table 7 family has {TABLE7_SIZE} baselines; this one has {len(family)} "
            f"({', '.join(family) or 'none'}): missing {', '.join(missing) or 'none of ours'}, and "
            f"{TABLE7_SIZE - len(PAPER_BASELINES)} that the paper's sources do not name. With few settings these "
            "are descriptive, not population claims; n/a needs at least 2 settings.")

    def interval(x: Any) -> str:
        if math.isnan(x.ci_low):
            return "n/a"
        return "not estimable (equal differences)" if x.ci_high <= x.ci_low else f"[{x.ci_low:.1f}, {x.ci_high:.1f}]"

    def table(name: str, title: str, labels: list[str], intro: str) -> Table:
        base = {m: {s: mean[(s, m)] for s in r.settings if (s, m) in mean} for m in labels}
        found = paired_stats(ours, base)
        rows = [[x.baseline, x.n, x.mean_diff, f"{x.positive}/{x.n}", interval(x), x.t_p, x.t_p_holm, x.wilcoxon_p,
                 x.wilcoxon_p_holm] for x in found]
        data = [[x.baseline, x.n, x.mean_diff, x.positive, *((x.ci_low, x.ci_high) if x.ci_high > x.ci_low else
                                                               (math.nan, math.nan)),
                 x.t_p, x.t_p_holm, x.wilcoxon_p, x.wilcoxon_p_holm] for x in found]
        return Table(name, title, header, rows, intro,
                     ["baseline", "settings", "mean_diff_pts", "positive", "ci_low", "ci_high", "t_p", "t_p_holm",
                      "wilcoxon_p", "wilcoxon_p_holm"], data)

    out = [table("stats", "Setting-level statistics (exploratory)", family, note)]
    if others:
        out.append(table("stats_other", "Setting-level statistics outside the paper's family", others,
                         "no_memory, ablations and repeated labels, with their own Holm correction (not the paper's)."))
    return out


def same_task(r: Results) -> Table | None:
    """Share of training episodes whose retrieval held the task's own earlier record."""
    cells: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for x in r.lines:
        same = x.head.decisions.same_task_records_retrieved
        if x.head.phase == "train" and same is not None:
            cell = cells[(x.setting, x.method)]
            cell[0] += same > 0
            cell[1] += 1
    if not cells:
        return None
    rows = [[m, s, n, f"{100 * k / n:.0f}%"] for (s, m), (k, n) in sorted(cells.items())]
    return Table("same_task", "Training retrieval that included the task's own earlier record",
                 ["method", "setting", "training episodes", "share"], rows,
                 "Training draws tasks with replacement, so retrieval can show a task its own earlier attempt "
                 "(similarity about 1), which held-out tasks never see. `memory: {exclude_same_task: true}` leaves "
                 "those records out while training.")


def audit_table(r: Results, labeller: Any = None, judge: Any = None,
                mode: str = "rules") -> tuple[Table | None, list[str], list[str]]:
    """The error-reproduction audit of every setting that stored or rejected abstractions:
    the table, the settings whose memory could not be read, and the labellers used."""
    from ap_gym.errors import StoreError
    from ap_gym.protocol.results import setting_dirs
    from ap_gym.report.audit import audit_setting, rejected_items

    rows: list[list[Any]] = []
    data: list[list[Any]] = []
    unreadable: list[str] = []
    used: set[str] = set()
    for run in r.runs:
        by_setting: dict[str, list[Row]] = defaultdict(list)
        for x in r.lines:
            if x.run == str(run):
                by_setting[x.head.setting].append(x)
        for directory in setting_dirs(run):
            name = directory.relative_to(run).as_posix()
            try:
                result = audit_setting(directory, rejected_items(x.head for x in by_setting.get(name, [])), name, labeller,
                                       judge=judge, mode=mode)
            except StoreError as e:  # said in the report, never dropped silently
                unreadable.append(f"- {name}: {e}")
                continue
            if result is None:
                continue
            used.add(result.labeller)
            a = result.row
            est = a.estimates()
            rows.append([a.setting, a.abstractions, a.flagged, a.gap, a.invocations,
                         *(str(est[k]) for k in ESTIMATES), a.eta,
                         ", ".join(f"{k} {v}" for k, v in sorted(a.reasons.items())) or "-"])
            data.append([a.setting, a.abstractions, a.flagged, a.gap, a.invocations,
                         *(v for k in ESTIMATES for v in (est[k].value, *(
                             (est[k].low, est[k].high) if est[k].estimable else (math.nan, math.nan))))])
    if not rows:
        return None, unreadable, sorted(used)
    header = ["setting", "stored", "flagged", "gap among stored (paper's)", "invocations", "q", "alpha", "beta",
              "gap (observational)", "gap stratified by family (observational)",
              "gap, randomised exposure (causal)", "eta (flagged, exposed)", "P(exposed, flagged, admitted)",
              "eta (all)", "flags by rule"]
    data_header = ["setting", "stored", "flagged", "gap_stored", "invocations",
                   *(f"{k}{suffix}" for k in ESTIMATES for suffix in ("", "_lo", "_hi"))]
    return Table("audit", "Error-reproduction audit", header, rows, data_header=data_header, data=data), \
        unreadable, sorted(used)
