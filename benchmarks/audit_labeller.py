"""The audit's labeller measured on labelled abstractions: precision and recall with intervals.

Two sets, both labelled against ``benchmarks/audit/RUBRIC.md``: ``natural.yaml`` (in the
style models write: plans, bullets, hedges, mostly unquoted commands; errors at a natural
rate; split into dev, on which the rules were tuned, and test, reported only) and
``fixtures.yaml`` (the older, quoted set, by the rules' author). For each: precision and
recall with 95 % Wilson intervals per benchmark, and apart for items whose synthesis was
exposed to a flagged parent and items that were not (a labeller whose recall follows
style would turn inherited style into a reproduction gap). ``--judge SPEC`` adds an LLM
judge through that backbone (alone, and together with the rules). The rules' figures on
the natural test split are not the report's card any more: that is measured per error type
on a set written after the rules were frozen (``benchmarks/grounded_card.py``).

    python benchmarks/audit_labeller.py [--judge http://host:8000/v1]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ap_gym.envs import env_class, resolve_benchmark  # noqa: E402
from ap_gym.report.audit import AnyOf, EnvironmentLabeller, JudgeLabeller, SourceRecord  # noqa: E402
from ap_gym.report.stats import proportion  # noqa: E402
from benchmarks._bench import emit  # noqa: E402

HERE = Path(__file__).with_name("audit")


def load() -> tuple[dict[str, SourceRecord], dict[str, list[dict[str, Any]]]]:
    """Every source record, and the labelled items of each set (natural dev/test, fixtures)."""
    fixtures = yaml.safe_load((HERE / "fixtures.yaml").read_text())
    natural = yaml.safe_load((HERE / "natural.yaml").read_text())
    sources = {k: SourceRecord.of(v) for k, v in {**fixtures["sources"], **natural["sources"]}.items()}
    dev = [x for x in natural["abstractions"] if int(x["id"].rsplit("-", 1)[1]) % 2 == 0]
    test = [x for x in natural["abstractions"] if int(x["id"].rsplit("-", 1)[1]) % 2 == 1]
    return sources, {"natural test": test, "natural dev": dev, "fixtures": fixtures["abstractions"]}


def score(rows: list[tuple[bool, bool]]) -> dict[str, Any]:
    tp = sum(t and p for t, p in rows)
    fp = sum(p and not t for t, p in rows)
    fn = sum(t and not p for t, p in rows)
    return {"n": len(rows), "tp": tp, "fp": fp, "fn": fn, "tn": len(rows) - tp - fp - fn,
            "precision": proportion(tp, tp + fp), "recall": proportion(tp, tp + fn)}


def labeller_for(benchmark: str, judge: Any = None, judge_only: bool = False) -> Any:
    rules = EnvironmentLabeller(env_class(resolve_benchmark(benchmark)).grammar)
    if judge is None:
        return rules
    judged = JudgeLabeller(judge, benchmark)
    return judged if judge_only else AnyOf([rules, judged])


def measure(items: list[dict[str, Any]], sources: dict[str, SourceRecord], judge: Any = None,
            judge_only: bool = False) -> tuple[dict[str, dict[str, Any]], list[str]]:
    groups: dict[str, list[tuple[bool, bool]]] = {}
    misses = []
    for x in items:
        label = labeller_for(x["benchmark"], judge, judge_only)(x["text"], [sources[s] for s in x["sources"]])
        row = (bool(x["erroneous"]), label.flagged)
        for key in ("all", x["benchmark"], *((("exposed" if x["exposed"] else "unexposed"),) if "exposed" in x else ())):
            groups.setdefault(key, []).append(row)
        if row[0] != row[1]:
            kind = "missed" if row[0] else "false flag"
            misses.append(f"- {x['id']} ({kind}): {x['text'][:110]!r}" + (f" ({'; '.join(label.reasons)})"
                                                                          if label.reasons else ""))
    return {k: score(v) for k, v in groups.items()}, misses


def table(name: str, scores: dict[str, dict[str, Any]]) -> list[str]:
    order = ["all", "exposed", "unexposed", *sorted(k for k in scores if k not in ("all", "exposed", "unexposed"))]
    rows = []
    for key in order:
        if key in scores:
            s = scores[key]
            rows.append(f"| {name} | {key} | {s['n']} | {s['tp'] + s['fn']} | {s['tp']} | {s['fp']} | {s['fn']} | "
                        f"{s['precision']} | {s['recall']} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--judge", help="also label with an LLM judge through this backbone spec")
    args = parser.parse_args()
    sources, sets = load()
    judge = None
    if args.judge:
        from ap_gym.backbones import make_backbone

        judge = make_backbone(args.judge)
    labellers = [("rules", None, False)] + ([("judge", judge, True), ("rules or judge", judge, False)] if judge else [])
    lines = ["| set | labeller | items | erroneous | TP | FP | FN | precision [95 % CI] | recall [95 % CI] |",
             "|---|---|---|---|---|---|---|---|---|"]
    all_misses = []
    for set_name, items in sets.items():
        for name, jud, alone in labellers:
            scores, misses = measure(items, sources, jud, alone)
            lines += table(f"{set_name} ({name})", scores)
            if name == "rules" and set_name != "natural dev":
                all_misses += [f"{set_name}: {m[2:]}" for m in misses]
    body = ["Labeller: `EnvironmentLabeller` (rules: grammar, absent objects, contradicted claims)"
            + (f", and an LLM judge `{args.judge}`" if judge else "") + ". Sets: `benchmarks/audit/natural.yaml` "
            "(100 abstractions in models' style, 24 erroneous, labelled against `benchmarks/audit/RUBRIC.md` before "
            "the rules were tuned; the rules were tuned on its dev split only) and `benchmarks/audit/fixtures.yaml` "
            "(60 quoted abstractions by the rules' author: optimistic). Precision and recall with 95 % Wilson "
            "intervals; exposed and unexposed items apart.", "", *lines, "", "Errors of the rules on the test split and "
            "the fixtures (what a judge would have to catch):", "", *(f"- {m}" for m in all_misses)]
    emit("audit_labeller" + ("_judge" if judge else ""), "`audit_labeller.py`: the audit's labeller on labelled "
         "abstractions, natural style and quoted", "\n".join(body))


if __name__ == "__main__":
    main()
