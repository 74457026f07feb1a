"""The audit's labeller card per error type, measured once on a set written after its claim
reader was frozen.

``benchmarks/audit/claims.yaml`` holds abstractions in the styles models write, each
written in the world of a named task and labelled by reading the engine's facts of that
task (and of the first five training tasks of its family, for universal claims), after
the claim reader (``ap_gym/report/claims.py``) was frozen. ``grounded.yaml``, the set the
earlier rules were measured on, is now a set the reader was tuned on: ``--dev --set
benchmarks/audit/grounded.yaml`` prints its misses and writes nothing. This script builds those facts from the envs
themselves (``TextEnv.world_facts``), labels every item with what an ``ap-gym report``
audit uses (``EnvironmentLabeller`` or ``GroundedLabeller``), and prints precision and
recall with 95 % Wilson intervals overall and per error type: recall over the items of
that type (flagged for any reason, and flagged for that reason), precision over the items
flagged for that reason. A type on a benchmark whose engine gives no facts is printed as
unseen, not folded into one recall. The card goes to ``ap_gym/report/labeller.json``,
which every report prints under its audit.

    python benchmarks/grounded_card.py
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ap_gym.envs import env_class, resolve_benchmark  # noqa: E402
from ap_gym.report.audit import AnyOf, EnvironmentLabeller, SourceRecord  # noqa: E402
from ap_gym.report.grounded import SEES, GroundedLabeller  # noqa: E402
from ap_gym.report.stats import proportion  # noqa: E402
from benchmarks._bench import emit  # noqa: E402

SET = Path(__file__).with_name("audit") / "claims.yaml"
DEV = Path(__file__).with_name("audit") / "grounded.yaml"  # the set the reader was tuned on
FROZEN = "7fc564e"  # the claim reader's commit: the set was written after it
CARD = Path(__file__).resolve().parents[1] / "ap_gym" / "report" / "labeller.json"
TYPES = ("grammar", "absent", "contradicted", "location", "precondition", "order", "overgeneralised", "universal")
ENVS = {"alfworld": "ap_gym/ALFWorld-v0", "textworld": "ap_gym/TextWorld-v0", "shop": "ap_gym/Shop-v0"}
FAMILY = 5  # the first training tasks of a family: what a run that trained on them recorded


def worlds_for(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per benchmark: the facts of every source task and of its family's first tasks."""
    import gymnasium as gym

    import ap_gym  # noqa: F401  (registers the envs)

    out: dict[str, dict[str, Any]] = {}
    for bench, env_id in ENVS.items():
        wanted = {x["task"] for x in items if x["benchmark"] == bench}
        if not wanted:
            continue
        env = gym.make(env_id, split="train")
        try:
            u = env.unwrapped
            families: dict[str, list[str]] = {}
            for t in u.task_ids("train"):
                families.setdefault(u.task_family(t), []).append(t)
            tasks = set(wanted)
            for t in wanted:
                tasks |= set(families.get(u.task_family(t), [])[:FAMILY])
            out[bench] = {t: f for t in sorted(tasks) if (f := u.world_facts(t)) is not None}
        finally:
            env.close()
    return out


def label_all(items: list[dict[str, Any]], worlds: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for x in items:
        bench = x["benchmark"]
        rules = EnvironmentLabeller(env_class(resolve_benchmark(bench)).grammar)
        labeller = AnyOf([rules, GroundedLabeller(worlds.get(bench, {}), bench)])
        family = worlds.get(bench, {}).get(x["task"])
        source = SourceRecord(x.get("instruction", ""), tuple((str(a), str(o)) for a, o in x.get("steps") or ()),
                              bool(x.get("success", False)), family.family if family else "", x["task"])
        label = labeller(x["text"], [source])
        rows.append({"id": x["id"], "benchmark": bench, "erroneous": bool(x["erroneous"]),
                     "types": tuple(x.get("types") or ()), "flagged": label.flagged,
                     "why": tuple(dict.fromkeys(r.split(":")[0] for r in label.reasons)), "reasons": label.reasons,
                     "text": x["text"]})
    return rows


def card(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def pr(tp: int, flagged: int) -> str:
        return str(proportion(tp, flagged))

    erroneous = [r for r in rows if r["erroneous"]]
    flagged = [r for r in rows if r["flagged"]]
    out: dict[str, Any] = {
        "labeller": "EnvironmentLabeller or GroundedLabeller",
        "set": f"benchmarks/audit/claims.yaml (written after the claim reader was frozen at commit {FROZEN})",
        "n": len(rows), "erroneous": len(erroneous),
        "precision": pr(sum(r["erroneous"] for r in flagged), len(flagged)),
        "recall": pr(sum(r["flagged"] for r in erroneous), len(erroneous)), "types": {}}
    for t in TYPES:
        of_type = [r for r in erroneous if t in r["types"]]
        seen = [r for r in of_type if t in SEES.get(r["benchmark"], ()) or t in ("grammar", "absent", "contradicted")]
        by_reason = [r for r in rows if t in r["why"]]
        out["types"][t] = {
            "n": len(of_type), "unseen": len(of_type) - len(seen),
            "recall": pr(sum(r["flagged"] for r in seen), len(seen)) if seen else "n/a",
            "recall_as_type": pr(sum(t in r["why"] for r in seen), len(seen)) if seen else "n/a",
            "precision": pr(sum(r["erroneous"] for r in by_reason), len(by_reason)) if by_reason else "n/a",
            "flagged_as_type": len(by_reason)}
    out["misses"] = {t: [r["text"].strip().replace("\n", " ")[:90] for r in erroneous
                         if t in r["types"] and not r["flagged"]] for t in TYPES}
    out["cannot_see"] = sorted({f"{r['benchmark']}: {t}" for r in erroneous for t in r["types"]
                                if t not in SEES.get(r["benchmark"], ()) and t not in ("grammar", "absent",
                                                                                       "contradicted")})
    return out


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", type=Path, default=SET, help="the labelled set (default: %(default)s)")
    parser.add_argument("--dev", action="store_true",
                        help="a set the rules were tuned on: print every miss and false flag, write nothing")
    args = parser.parse_args()  # --help says what it does, and runs nothing
    items = yaml.safe_load(args.set.read_text())["items"]
    rows = label_all(items, worlds_for(items))
    result = card(rows)
    if args.dev:
        print(f"{args.set}: precision {result['precision']}, recall {result['recall']}")
        for t, c in result["types"].items():
            print(f"  {t}: n {c['n']} recall {c['recall']} as-type {c['recall_as_type']} precision {c['precision']}")
        for r in rows:
            if r["erroneous"] != r["flagged"] or (r["erroneous"] and not set(r["types"]) & set(r["why"])):
                kind = "missed" if not r["flagged"] else "false flag" if not r["erroneous"] else "other reason"
                print(f"- {r['id']} {kind} {'/'.join(r['types'])}: {r['text'][:150]!r}\n    {'; '.join(r['reasons'])[:200]}")
        return
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).parent).stdout.strip()
    result["measured_at"] = commit or "?"
    CARD.write_text(json.dumps(result, indent=1) + "\n")
    lines = [f"{result['n']} abstractions ({result['erroneous']} erroneous) in `benchmarks/audit/claims.yaml`, "
             f"written after the claim reader was frozen (commit {FROZEN}) on source tasks the earlier set never used, "
             "in styles it did not use, and labelled by reading the engines' facts of each item's task (and of the "
             "first five training tasks of its family), measured once. The set's author also wrote the reader: read "
             "the figures as an upper bound for wording nobody on the project wrote. Labeller: what an `ap-gym report` "
             f"audit uses, `{result['labeller']}`. Overall precision "
             f"{result['precision']}, recall {result['recall']} (95 % Wilson intervals).", "",
             "| error type | erroneous items | on an engine without facts | recall (flagged) | recall (for this "
             "reason) | flagged for this reason | precision of those flags |", "|---|---|---|---|---|---|---|"]
    for t, c in result["types"].items():
        lines.append(f"| {t} | {c['n']} | {c['unseen']} | {c['recall']} | {c['recall_as_type']} | "
                     f"{c['flagged_as_type']} | {c['precision']} |")
    bare = sum(not x.get("steps") for x in items)
    lines += ["", f"{bare} of the {len(items)} items name their source task but carry no source record's steps: "
              "there EnvironmentLabeller's record-based absent rule reads nothing (a record without steps is no "
              "evidence that an object is absent) and the grounded rules read the engine's facts; the other items' "
              "steps are what the contradicted and over-generalised checks read."]
    dev_items = yaml.safe_load(DEV.read_text())["items"]
    dev = card(label_all(dev_items, worlds_for(dev_items)))
    lines += ["", f"Beside it, not a test: on `benchmarks/audit/grounded.yaml` ({dev['n']} abstractions), the set the "
              "earlier word-list rules were measured on (precision 0.79 [0.57, 0.91], recall 0.37 [0.24, 0.52]) and "
              f"the set this reader was tuned on, it gives precision {dev['precision']}, recall {dev['recall']}. The "
              "gap between the two sets is what tuning on one's own wording is worth."]
    lines += ["", "Unseen (the engine gives no facts, so these stay unclassified): "
              + (", ".join(result["cannot_see"]) or "none") + ".", "", "Every miss and false flag:", ""]
    for r in rows:
        if r["erroneous"] != r["flagged"]:
            kind = "missed" if r["erroneous"] else "false flag"
            lines.append(f"- {r['id']} ({kind}, {r['benchmark']}, {'/'.join(r['types']) or 'correct'}): "
                         f"{r['text'][:100]!r}" + (f" ({'; '.join(r['reasons'])[:160]})" if r["reasons"] else ""))
    emit("grounded_card", "`grounded_card.py`: the audit's labeller per error type, on a set written after its "
         "rules were frozen", "\n".join(lines))


if __name__ == "__main__":
    main()
