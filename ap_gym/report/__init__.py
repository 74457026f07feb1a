"""``ap-gym report``: the paper's tables and figures from result files only.

Writes into ``<run>/report/`` (or ``out``): ``report.md`` with every table, each table
also as CSV, and ``curves.png`` (held-out success and LLM calls against iteration, one
panel per setting, mean over seeds with a ±1 std band).

A *setting* is a benchmark with a backbone; a *method* is a policy label. Tables:
final-iteration held-out success (mean ± std over seeds) per method and setting and
its mean over settings (the headline); LLM calls per held-out task (acting and
synthesis/reflection/maintenance) and trajectory length; success per task family; the
Anti-Persistence mode usage; discard versus persist; setting-level statistics
(exploratory); the error-reproduction audit for methods that store abstractions.
"""

from __future__ import annotations

import csv
import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ap_gym.errors import StoreError
from ap_gym.protocol.results import (
    load_abstractions,
    load_config,
    load_episodes,
    load_records,
    load_stand_ins,
    setting_dirs,
    setting_key,
)
from ap_gym.report.audit import EnvironmentLabeller, Invocation, SourceRecord, audit
from ap_gym.report.stats import paired_stats

__all__ = ["DEFAULT_METHOD", "collect", "write_report"]

#: The policy (registry name) the report compares against every other one.
DEFAULT_METHOD = "anti_persistence"
#: The paper's baselines (registry names): the Holm family of the setting-level statistics.
#: Other labels (no_memory, ablations) are compared too, outside that family.
PAPER_BASELINES = ("trajectory", "abstraction", "joint", "reflexion", "autorefine")


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    if not values:
        return math.nan, math.nan
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def collect(runs: Sequence[str | Path]) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Held-out and training lines of every run, each tagged with its setting, and the
    policy specs by label."""
    lines, specs = [], {}
    for run in runs:
        run = Path(run)
        meta = load_config(run)
        backbone = meta.get("backbone")
        ident = backbone.get("identity") if isinstance(backbone, dict) else (backbone or "none")
        for p in meta["config"]["policies"]:
            specs[p["label"]] = p
        for x in load_episodes(run):  # a run with several backbones files each line under its label
            x["setting"] = f"{x['benchmark']} @ {x.get('backbone') or ident}"
            x["run"] = str(run)
            lines.append(x)
    return lines, specs


def _table(path: Path, header: list[str], rows: list[list[Any]]) -> str:
    with open(path.with_suffix(".csv"), "w", newline="") as f:
        csv.writer(f).writerows([header, *rows])

    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return "n/a" if math.isnan(v) else f"{v:.3g}" if abs(v) < 1e-2 and v != 0 else f"{v:.2f}"
        return str(v)

    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(fmt(v) for v in r) + " |" for r in rows]
    return "\n".join(out)


def _flagship(specs: dict[str, dict[str, Any]], method: str) -> str | None:
    """The label of the method under test: the label named ``method``, else the first label
    of that policy without options."""
    if method in specs:
        return method
    plain = [label for label, p in specs.items() if p.get("name") == method and not p.get("options")]
    return plain[0] if plain else None


def write_report(runs: Sequence[str | Path], out: str | Path | None = None, benchmark_labeller: bool = True,
                 method: str = DEFAULT_METHOD) -> Path:
    """Write the report of ``runs``; ``method`` (a policy name) is compared against the others."""
    lines, specs = collect(runs)
    flagship = _flagship(specs, method)
    out = Path(out) if out else Path(runs[0]) / "report"
    out.mkdir(parents=True, exist_ok=True)
    stand_ins: dict[str, str] = {}
    for run in runs:
        stand_ins.update(load_stand_ins(run))
    all_evals = [x for x in lines if x["phase"] == "eval"]
    evals = [x for x in all_evals if x["termination"] != "infrastructure_failure"]
    infra = sum(1 for x in lines if x["termination"] == "infrastructure_failure")
    final_it: dict[tuple[str, str, int], int] = {}
    for x in all_evals:
        key = (x["setting"], x["policy"], x["seed"])
        final_it[key] = max(final_it.get(key, -1), x["iteration"])
    final_all = [x for x in all_evals if x["iteration"] == final_it[(x["setting"], x["policy"], x["seed"])]]
    final = [x for x in final_all if x["termination"] != "infrastructure_failure"]
    settings = sorted({x["setting"] for x in all_evals})
    methods = sorted({x["policy"] for x in all_evals}, key=lambda m: (m != flagship, m))

    def per_seed(rows: list[dict[str, Any]], fn: Any) -> dict[tuple[str, str], list[float]]:
        groups: dict[tuple[str, str, int], list[dict[str, Any]]] = defaultdict(list)
        for x in rows:
            groups[(x["setting"], x["policy"], x["seed"])].append(x)
        out_: dict[tuple[str, str], list[float]] = defaultdict(list)
        for (s, m, _), xs in sorted(groups.items()):
            out_[(s, m)].append(fn(xs))
        return out_

    success = per_seed(final, lambda xs: statistics.fmean(x["success"] for x in xs))
    acting = per_seed(final, lambda xs: statistics.fmean(x["usage"]["calls"].get("acting", 0) for x in xs))
    other = per_seed(final, lambda xs: statistics.fmean(x["usage"]["llm_calls"] - x["usage"]["calls"].get("acting", 0) for x in xs))
    steps = per_seed(final, lambda xs: statistics.fmean(x["num_steps"] for x in xs))
    identical = _identical_seeds(final_all)
    used = sorted({s.split(" @ ")[0] for s in settings} & set(stand_ins))
    note = ("" if not used else "Stand-ins: " + "; ".join(f"**{b}**: {stand_ins[b]}" for b in used) + ".")

    def table(path: Path, header: list[str], rows: list[list[Any]]) -> str:
        text = _table(path, header, rows)
        return f"{text}\n\n{note}" if note else text

    md = ["# ap-gym report", "", f"Runs: {', '.join(str(r) for r in runs)}. Held-out episodes: {len(all_evals)}, "
          f"of which infrastructure failures: {len(all_evals) - len(evals)}; infrastructure failures in all phases: "
          f"{infra}.", "",
          "Success is the benchmark's own definition; a step-limit truncation is a failure. "
          "Means and standard deviations are over seeds at each setting's final iteration, over the episodes that "
          "did not end in an infrastructure failure (the denominators table gives both counts and the rate with "
          "those failures counted as failures). ‡ marks a method whose seeds gave identical held-out results "
          "(greedy decoding: the seed reaches no sampling), so its ± 0.0 is not a measured spread.", ""]
    if note:
        md += [note, ""]
    descriptions = [load_config(run)["config"].get("description") for run in runs]
    md[1:1] = ["", *[d.strip() for d in descriptions if d]] if any(descriptions) else []

    rows = []
    for m in methods:
        cells, means = [], []
        for s in settings:
            mu, sd = _mean_std(success.get((s, m), []))
            mark = " ‡" if identical.get((s, m)) else ""
            cells.append(f"{100 * mu:.1f} ± {100 * sd:.1f}{mark}" if not math.isnan(mu) else "-")
            if not math.isnan(mu):
                means.append(mu)
        rows.append([m, *cells, f"{100 * statistics.fmean(means):.1f}" if means else "-"])
    md += ["## Table 1: final held-out success (%)", "",
           "One column per benchmark @ backbone; the last column is the mean over them (the paper's headline).", "",
           table(out / "final_success", ["method", *settings, "mean over settings"], rows), ""]

    rows = []
    for m in methods:
        for s in settings:
            mine = [x for x in final_all if x["setting"] == s and x["policy"] == m]
            if not mine:
                continue
            failed = sum(x["termination"] == "infrastructure_failure" for x in mine)
            wins = sum(bool(x["success"]) for x in mine)
            valid = len(mine) - failed
            seeds = len({x["seed"] for x in mine})
            rows.append([m, s, seeds, len(mine), failed, f"{100 * wins / valid:.1f}" if valid else "no valid episode",
                         f"{100 * wins / len(mine):.1f}", "identical" if identical.get((s, m)) else
                         ("-" if seeds < 2 else "differ")])
    md += ["## Denominators (final iteration, all seeds pooled)", "",
           table(out / "denominators", ["method", "setting", "seeds", "episodes", "infrastructure failures",
                                        "success excl. them (%)", "success counting them as failures (%)",
                                        "seeds' results"], rows), ""]

    rows = []
    for m in methods:
        for s in settings:
            if (s, m) in success:
                a, o, st = (_mean_std(d[(s, m)])[0] for d in (acting, other, steps))
                mine = [x for x in final if x["setting"] == s and x["policy"] == m]
                modes = "/".join(sorted({x["policy_info"].get("action_mode") or "-" for x in mine}))
                failures = statistics.fmean(x.get("parse_failures", 0) for x in mine)
                rows.append([m, s, modes, a + o, a, o, st, failures])
    md += ["## LLM calls and trajectory length per held-out task (final iteration)", "",
           table(out / "llm_calls", ["method", "setting", "action mode", "LLM calls", "acting",
                                      "synthesis+reflection+maintenance+admission", "steps", "parse failures"], rows), ""]

    fam: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for x in final:
        fam[(x["setting"].split(" @ ")[0], x["task_family"], x["policy"])].append(float(x["success"]))
    families = sorted({(b, f) for b, f, _ in fam})
    rows = [[b, f, *[(f"{100 * statistics.fmean(fam[(b, f, m)]):.0f} (n={len(fam[(b, f, m)])})" if fam.get((b, f, m)) else "-")
                     for m in methods]] for b, f in families]
    md += ["## Success per task family (%, final iteration, all seeds)", "", table(out / "per_family", ["benchmark", "family", *methods], rows), ""]

    ap_labels = [m for m in methods if specs.get(m, {}).get("name") == method]
    mode_names = sorted({x["policy_info"]["mode"] for x in lines if x["policy_info"].get("mode")})
    if ap_labels and mode_names:
        rows = []
        for m in ap_labels:
            for phase in ("train", "eval"):
                counts = Counter(x["policy_info"].get("mode") for x in lines if x["policy"] == m and x["phase"] == phase)
                total = sum(counts.values()) or 1
                rows.append([m, phase, *[f"{100 * counts.get(mode, 0) / total:.0f}%" for mode in mode_names], total])
        md += [f"## {method} mode usage", "", table(out / "modes", ["method", "phase", *mode_names, "episodes"], rows), ""]
        persist = [m for m in ap_labels if (specs[m].get("options") or {}).get("persist_guidance")]
        discard = [m for m in ap_labels if m not in persist]
        if persist and discard:
            rows = [[s, f"{100 * _mean_std(success.get((s, discard[0]), []))[0]:.1f}",
                     f"{100 * _mean_std(success.get((s, persist[0]), []))[0]:.1f}"] for s in settings]
            md += ["## Table 2: discard versus persist (final held-out success, %)", "",
                   "The same synthesis; only what happens to the guidance afterwards differs.", "",
                   table(out / "discard_vs_persist", ["setting", f"discard ({discard[0]})", f"persist ({persist[0]})"], rows), ""]

    if flagship in methods:
        ours = {s: _mean_std(success[(s, flagship)])[0] for s in settings if (s, flagship) in success}

        def of(labels: list[str]) -> dict[str, dict[str, float]]:
            return {m: {s: _mean_std(success[(s, m)])[0] for s in settings if (s, m) in success} for m in labels}

        family = [m for m in methods if m != flagship and m in PAPER_BASELINES
                  and specs.get(m, {}).get("name", m) == m]
        others = [m for m in methods if m != flagship and m not in family]
        header = ["baseline", "settings", "mean diff (pts)", "positive", "95% t-interval", "t-test p", "Holm",
                  "Wilcoxon p", "Holm"]

        def stat_rows(labels: list[str]) -> list[list[Any]]:
            return [[r.baseline, r.n, r.mean_diff, f"{r.positive}/{r.n}",
                     "n/a" if math.isnan(r.ci_low) else f"[{r.ci_low:.1f}, {r.ci_high:.1f}]",
                     r.t_p, r.t_p_holm, r.wilcoxon_p, r.wilcoxon_p_holm] for r in paired_stats(ours, of(labels))]

        md += ["## Setting-level statistics (exploratory)", "",
               f"Paired differences {flagship} minus baseline over settings, in points. Holm's correction within "
               f"each test family; the family is the paper's comparisons ({flagship} against each of its baselines: "
               f"{', '.join(PAPER_BASELINES)}). With few settings these are descriptive, not population claims; n/a "
               "needs at least 2 settings (and non-zero differences for Wilcoxon).", ""]
        md += [table(out / "stats", header, stat_rows(family)) if family else "No paper baseline in these runs.", ""]
        if others:
            md += ["Outside the family (no_memory, ablations; their own Holm correction, not the paper's):", "",
                   table(out / "stats_other", header, stat_rows(others)), ""]

        share = _same_task_share(lines)
        if share:
            rows = [[m, s, n, f"{100 * k / n:.0f}%"] for (s, m), (k, n) in sorted(share.items())]
            md += ["## Training retrieval that included the task's own earlier record", "",
                   "Training draws tasks with replacement, so retrieval can show a task its own earlier attempt "
                   "(similarity about 1), which held-out tasks never see. `memory: {exclude_same_task: true}` "
                   "leaves those records out while training.", "",
                   table(out / "same_task", ["method", "setting", "training episodes", "share"], rows), ""]

    if benchmark_labeller:
        md += _audit_section(runs, lines, specs, out)
    _plot(evals, settings, methods, out / "curves.png")
    md += ["## Curves", "", "![held-out success and LLM calls per iteration](curves.png)", ""]
    (out / "report.md").write_text("\n".join(md))
    return out


def _identical_seeds(final_all: list[dict[str, Any]]) -> dict[tuple[str, str], bool]:
    """(setting, method) -> whether its seeds (two or more) gave the same held-out results."""
    by: dict[tuple[str, str], dict[int, list[tuple[Any, ...]]]] = defaultdict(lambda: defaultdict(list))
    for x in final_all:
        by[(x["setting"], x["policy"])][x["seed"]].append(
            (x["task_id"], bool(x["success"]), x.get("score"), x["num_steps"], x["termination"]))
    return {key: len(seeds) > 1 and len({tuple(sorted(v)) for v in seeds.values()}) == 1 for key, seeds in by.items()}


def _same_task_share(lines: list[dict[str, Any]]) -> dict[tuple[str, str], tuple[int, int]]:
    """(setting, method) -> (training episodes whose retrieval held the task's own record, training episodes)."""
    out: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for x in lines:
        if x["phase"] == "train" and "same_task_records_retrieved" in x.get("policy_info", {}):
            cell = out[(x["setting"], x["policy"])]
            cell[0] += x["policy_info"]["same_task_records_retrieved"] > 0
            cell[1] += 1
    return {k: (v[0], v[1]) for k, v in out.items()}


def _audit_section(runs: Sequence[str | Path], lines: list[dict[str, Any]], specs: dict[str, Any], out: Path) -> list[str]:
    rows, unreadable = [], []
    for run in runs:
        for directory in setting_dirs(run):
            name = directory.relative_to(run).as_posix()
            bench = name.split("/")[0]
            try:
                stored = load_abstractions(directory)
            except StoreError as e:  # said in the report, never dropped silently
                unreadable.append(f"- {name}: {e}")
                continue
            rejected = [Invocation(str(item.get("text", "")), tuple(item.get("parents", ())), False,
                                   tuple(item.get("sources", ())))
                        if isinstance(item, dict) else Invocation(str(item), (), False)
                        for x in lines if x["run"] == str(run) and setting_key(x) == name
                        for item in x["policy_info"].get("rejected_abstractions", [])]
            if not stored and not rejected:
                continue
            ids = {i for a in stored for i in a.sources} | {i for inv in rejected for i in inv.sources}
            try:
                records = {i: SourceRecord.of(r) for i, r in load_records(directory, ids).items()}
            except StoreError as e:
                unreadable.append(f"- {name}: {e}")
                continue
            r = audit(name, stored, EnvironmentLabeller(bench), rejected, records)
            rows.append([r.setting, r.abstractions, r.flagged, f"{r.flagged_given_flagged_parent}/{r.with_flagged_parent}",
                         r.rate_exposed, f"{r.flagged_given_no_flagged_parent}/{r.without_flagged_parent}",
                         r.rate_unexposed, r.gap, f"{r.exposed_invocations}/{r.invocations}", r.q,
                         f"{r.flagged_exposed_invocations}/{r.exposed_invocations}", r.alpha,
                         f"{r.admitted_invocations}/{r.invocations}", r.eta, r.q * r.alpha * r.eta,
                         ", ".join(f"{k} {v}" for k, v in sorted(r.reasons.items())) or "-"])
    text = ["## Error-reproduction audit", "",
            "Labeller (ap_gym/report/audit.py, EnvironmentLabeller): an abstraction is *flagged* when it quotes a "
            "command outside the benchmark's grammar, names an object no source record's world has, or makes a "
            "claim its source records contradict (a recommended command that always failed there, a forbidden one "
            "a success used). Its precision and recall on a labelled fixture set are in benchmarks/RESULTS.md. "
            "Not flagged means not flagged, never correct. q, alpha and eta are per synthesis invocation, admitted "
            "and rejected outputs alike, with their counts. Association, not causation.", ""]
    if unreadable:
        text += ["Settings whose memory could not be read (not audited):", "", *unreadable, ""]
    if not rows:
        return [*text, "No method in these runs stored abstractions.", ""]
    return [*text, _table(out / "audit", ["setting", "stored", "flagged", "flagged given flagged parent", "rate",
                                          "flagged given no flagged parent", "rate", "gap", "exposed invocations", "q",
                                          "flagged exposed", "alpha", "admitted", "eta", "q*alpha*eta",
                                          "flags by rule"], rows), ""]


def _plot(evals: list[dict[str, Any]], settings: list[str], methods: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(2, max(1, len(settings)), figsize=(5.5 * max(1, len(settings)), 7), squeeze=False)
    for col, s in enumerate(settings):
        for m in methods:
            by_seed: dict[int, dict[int, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
            for x in evals:
                if x["setting"] == s and x["policy"] == m:
                    by_seed[x["seed"]][x["iteration"]].append(x)
            if not by_seed:
                continue
            iters = sorted({i for d in by_seed.values() for i in d})
            for row, fn in ((0, lambda xs: 100 * statistics.fmean(x["success"] for x in xs)),
                            (1, lambda xs: statistics.fmean(x["usage"]["llm_calls"] for x in xs))):
                values = np.array([[fn(by_seed[seed][i]) if by_seed[seed].get(i) else np.nan for i in iters] for seed in by_seed])
                mean, sd = np.nanmean(values, axis=0), np.nanstd(values, axis=0)
                ax = axes[row][col]
                ax.plot(iters, mean, marker="o", label=m)
                ax.fill_between(iters, mean - sd, mean + sd, alpha=0.2)
        from matplotlib.ticker import MaxNLocator

        for row in (0, 1):
            axes[row][col].xaxis.set_major_locator(MaxNLocator(integer=True))
        axes[0][col].set_ylim(-2, 102)
        axes[0][col].set_title(s, fontsize=9)
        axes[0][col].set_ylabel("held-out success (%)")
        axes[1][col].set_ylabel("LLM calls per task")
        axes[1][col].set_xlabel("iteration (-1: before training)" if any(i < 0 for i in iters) else "iteration")
        axes[0][col].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
