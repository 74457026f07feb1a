"""The audit's labeller measured on the labelled fixture set: precision and recall.

Reads ``benchmarks/audit/fixtures.yaml`` (abstractions written for this purpose, each
marked erroneous or not, with its source records) and labels each with the built-in
:class:`~ap_gym.report.audit.EnvironmentLabeller`, optionally together with an LLM judge
(``--judge SPEC``: a backbone spec, e.g. a served model's URL). Prints the confusion
counts, precision and recall overall and per benchmark, and every miss.

    python benchmarks/audit_labeller.py [--judge http://host:8000/v1] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import yaml

from ap_gym.envs import env_class, resolve_benchmark
from ap_gym.report.audit import AnyOf, EnvironmentLabeller, JudgeLabeller, SourceRecord

FIXTURES = Path(__file__).with_name("audit") / "fixtures.yaml"


def load(path: Path = FIXTURES) -> tuple[dict[str, SourceRecord], list[dict]]:
    data = yaml.safe_load(path.read_text())
    sources = {k: SourceRecord.of(v) for k, v in data["sources"].items()}
    return sources, data["abstractions"]


def score(rows: list[tuple[bool, bool]]) -> dict[str, float | int]:
    tp = sum(t and p for t, p in rows)
    fp = sum(p and not t for t, p in rows)
    fn = sum(t and not p for t, p in rows)
    tn = sum(not t and not p for t, p in rows)
    return {"n": len(rows), "tp": tp, "fp": fp, "fn": fn, "tn": tn,
            "precision": tp / (tp + fp) if tp + fp else float("nan"), "recall": tp / (tp + fn) if tp + fn else float("nan")}


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._bench import emit  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--judge", help="also ask an LLM judge through this backbone spec")
    parser.add_argument("--json", help="write the per-abstraction labels here")
    args = parser.parse_args()
    sources, items = load()
    judge = None
    if args.judge:
        from ap_gym.backbones import make_backbone

        judge = make_backbone(args.judge)
    by_bench: dict[str, list[tuple[bool, bool]]] = defaultdict(list)
    labelled = []
    for item in items:
        rules = EnvironmentLabeller(env_class(resolve_benchmark(item["benchmark"])).grammar)
        labeller = AnyOf([rules, JudgeLabeller(judge, item["benchmark"])]) if judge else rules
        label = labeller(item["text"], [sources[s] for s in item["sources"]])
        by_bench[item["benchmark"]].append((bool(item["erroneous"]), label.flagged))
        labelled.append({**item, "flagged": label.flagged, "reasons": list(label.reasons)})
    lines = [f"Labeller: {'rules + judge `' + args.judge + '`' if judge else 'rules (`EnvironmentLabeller`)'}; fixtures: "
             f"`benchmarks/audit/fixtures.yaml` ({len(items)} abstractions, each with its source records and a "
             "reason). The fixtures and the rules are by the same hand, so these figures are optimistic.", "",
             "| benchmark | n | erroneous | TP | FP | FN | TN | precision | recall |", "|---|---|---|---|---|---|---|---|---|"]
    pooled = [r for group in by_bench.values() for r in group]
    for name, group in [*sorted(by_bench.items()), ("all", pooled)]:
        s = score(group)
        lines.append(f"| {name} | {s['n']} | {s['tp'] + s['fn']} | {s['tp']} | {s['fp']} | {s['fn']} | {s['tn']} | "
                     f"{s['precision']:.2f} | {s['recall']:.2f} |")
    lines += ["", "Misses:", ""]
    for x in labelled:
        if x["flagged"] != bool(x["erroneous"]):
            kind = "false positive" if x["flagged"] else "false negative"
            lines.append(f"- {x['id']} ({kind}): {x['text']!r} ({'; '.join(x['reasons']) or x['reason']})")
    emit("audit_labeller" + ("_judge" if judge else ""), "`audit_labeller.py`: the audit's labeller on labelled "
         "abstractions" + (" (rules + judge)" if judge else ""), "\n".join(lines))
    if args.json:
        Path(args.json).write_text(json.dumps(labelled, indent=1))


if __name__ == "__main__":
    main()
