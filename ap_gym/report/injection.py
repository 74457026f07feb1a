"""The injection study's tables (:mod:`ap_gym.studies.injection`), from its results only.

The study runs through the protocol, so its results are an ordinary run directory; these
tables read it through :mod:`ap_gym.protocol.results` and audit each setting with the
study's ground-truth labeller, every rate with its 95 % interval.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from ap_gym.protocol.results import EpisodeLine, load_episodes, setting_dirs
from ap_gym.report.audit import Labeller, audit_setting, rejected_items
from ap_gym.report.labels import Label
from ap_gym.report.stats import allows, difference, proportion
from ap_gym.report.tables import Table
from ap_gym.text import guidance_rules

__all__ = ["injection_tables"]


def _final(lines: list[EpisodeLine]) -> tuple[list[EpisodeLine], list[EpisodeLine]]:
    evals = [x for x in lines if x.header.phase == "eval"]
    last = max((x.header.iteration for x in evals), default=0)
    return [x for x in evals if x.header.iteration == last], [x for x in evals if x.header.iteration == -1]


def flagged(label: Label | bool) -> bool:
    """A labeller's verdict as a flag (a ``Label`` object is always truthy: read its flag)."""
    return label.flagged if isinstance(label, Label) else bool(label)


def injection_tables(run_dir: str | Path, labeller: Labeller, bought_at_once: Callable[..., bool],
                     placements: dict[str, Sequence[str]]) -> list[Table]:
    """The headline (discard against persist) and every arm's figures."""
    run_dir = Path(run_dir)
    lines = load_episodes(run_dir)
    rows, data, finals = [], [], {}
    for directory in setting_dirs(run_dir):
        label = directory.parent.name
        mine = [x for x in lines if x.header.setting == directory.relative_to(run_dir).as_posix()]
        final, before = _final(mine)
        finals[label] = final
        wins = sum(x.header.success for x in final)
        at_once = sum(bought_at_once([s.action for s in x.steps]) for x in final)
        wrong = sum(flagged(labeller(guidance_rules(x.header.decisions.guidance or ""))) for x in final)
        audit = audit_setting(directory, rejected_items(x.header for x in mine), label, labeller)
        est = audit.row.estimates() if audit is not None else {}
        rows.append([label, ", ".join(placements.get(label, ())) or "-",
                     str(proportion(sum(x.header.success for x in before), len(before))) if before else "-",
                     str(proportion(wins, len(final))), str(proportion(at_once, len(final))),
                     str(proportion(wrong, len(final))), audit.row.abstractions if audit else 0,
                     *(str(est[k]) if est else "-" for k in ("alpha", "beta", "gap", "stratified_gap", "eta"))])
        data.append([label, wins, len(final), at_once, wrong, audit.row.abstractions if audit else 0])
    table = Table("injection", "Every design, the injection where it reads (final held-out iteration)",
                  ["arm", "injected into", "success, seeded memory", "success", "bought at once", "wrong guidance shown",
                   "stored abstractions", "alpha", "beta", "gap", "stratified gap", "eta (flagged, exposed)"], rows,
                  "Success and shares with 95 % Wilson intervals over held-out episodes. alpha: flagged outputs "
                  "among synthesis invocations exposed to a flagged parent; beta: among the others; the gap with "
                  "Newcombe's interval; stratified: Mantel-Haenszel over task families; eta: admission of flagged "
                  "exposed outputs. The labeller is the study's ground truth.",
                  ["arm", "successes", "episodes", "bought_at_once", "wrong_guidance", "stored_abstractions"], data)
    return [_headline(finals), table] if "anti_persistence" in finals and "ap_persist" in finals else [table]


def _headline(finals: dict[str, list[EpisodeLine]]) -> Table:
    a, b = finals["anti_persistence"], finals["ap_persist"]
    wa, wb = sum(x.header.success for x in a), sum(x.header.success for x in b)
    effect = difference(wa, len(a), wb, len(b))
    return Table("injection_discard_vs_persist", "Discard against persist (the paper's Table 2), injection in the "
                 "records both read", ["discard: success", "persist: success", "discard minus persist",
                                       "what the interval allows"],
                 [[str(proportion(wa, len(a))), str(proportion(wb, len(b))), str(effect),
                   allows(effect, "difference")]],
                 "The same design, seeds, records and synthesis; only whether the synthesised guidance is kept "
                 "differs. One run: this contrast holds the actor's own copied errors as well as the injected "
                 "ones (the dose effect above separates them). Intervals: Wilson, and Newcombe for the difference.")


def write_injection_report(run_dir: str | Path, out: str | Path, tables: Sequence[Table], head: Sequence[str],
                           bought_at_once: Callable[..., bool]) -> Path:
    """``report.md`` (the tables under ``head``), their CSVs, and ``curves.png``: held-out
    success and the share that bought at once per iteration, per arm."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    md = ["# Injection study: known errors in, what comes out", "", *head, ""]
    for table in tables:
        table.write_csv(out)
        md += [table.markdown(), ""]
    _plot(Path(run_dir), out / "curves.png", bought_at_once)
    md += ["![held-out success and buying at once per iteration](curves.png)", ""]
    (out / "report.md").write_text("\n".join(md))
    return out


def _plot(run_dir: Path, path: Path, bought_at_once: Callable[..., bool]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    lines = [x for x in load_episodes(run_dir) if x.header.phase == "eval"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    styles = ["o-", "s--", "^:", "D-.", "v-", "P--", "X:", "*-.", "h-", "d--"]
    for k, label in enumerate(sorted({x.header.policy for x in lines})):
        mine = [x for x in lines if x.header.policy == label]
        iters = sorted({x.header.iteration for x in mine})
        for ax, fn in ((axes[0], lambda x: x.header.success),
                       (axes[1], lambda x: bought_at_once([s.action for s in x.steps]))):
            values = [100 * sum(fn(x) for x in mine if x.header.iteration == i) / max(1, sum(x.header.iteration == i
                                                                                        for x in mine)) for i in iters]
            ax.plot(iters, values, styles[k % len(styles)], label=label, alpha=0.85)
    axes[0].set_ylabel("held-out success (%)")
    axes[1].set_ylabel("held-out episodes that bought at once (%)")
    for ax in axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("iteration (-1: seeded memory, before training)")
        ax.set_ylim(-3, 103)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
