"""The audit's estimators on simulated provenance with a known truth (ap_gym/studies/recovery.py).

Three settings, each over many seeds: recovery (copying planted, equal base rates,
admission depending on the flag), the confounded null (base rates by family, no copying)
and copying planted on that confounded world. For each estimate: the truth, the mean
estimate, how often its 95 % interval covered the truth, and how often it excluded 0.

    python benchmarks/recovery.py [--seeds 500] [--invocations 400]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ap_gym.studies.recovery import Truth, coverage  # noqa: E402
from benchmarks._bench import emit, positive  # noqa: E402

CONFOUNDED = (0.05, 0.05, 0.5, 0.5)


def table(name: str, result: dict) -> list[str]:
    rows = []
    for key in ("alpha", "beta", "gap", "stratified_gap", "randomised_gap", "eta", "q", "joint"):
        entry = result[key]
        truth = result["truth"].get(key)
        cov = entry.get("coverage")
        rows.append(f"| {name} | {key} | {'-' if truth is None else f'{truth:.3f}'} | "
                    f"{'-' if entry['mean'] is None else format(entry['mean'], '.3f')} | "
                    f"{'-' if cov is None else f'{100 * cov:.1f} %'} | {100 * entry['excludes_zero']:.1f} % |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=positive, default=500)
    parser.add_argument("--invocations", type=positive, default=400)
    args = parser.parse_args()
    n = args.invocations
    worlds = {
        "recovery": Truth(invocations=n),
        "confounded by family, null": Truth(base_rates=CONFOUNDED, copy=0.0, randomise=0.5, invocations=n),
        "confounded by family, copying planted": Truth(base_rates=CONFOUNDED, copy=0.5, compliance=0.6,
                                                       randomise=0.5, invocations=n),
        "confounded within a family, null": Truth(base_rates=(0.1,) * 4, copy=0.0, hard_share=0.5, hard_rate=0.6,
                                                  randomise=0.5, invocations=n),
        "confounded within a family, copying planted": Truth(base_rates=(0.1,) * 4, copy=0.9, compliance=0.8,
                                                             hard_share=0.5, hard_rate=0.6, randomise=0.5,
                                                             invocations=n),
        "drifting error rate, null": Truth(base_rates=(0.05,) * 4, copy=0.0, drift=0.6, randomise=0.5,
                                           invocations=n),
    }
    lines = ["Parameters: recovery has base rate 0.1 in 4 families, compliance 0.8, copy 0.9, admission 0.4 for "
             "flagged outputs and 0.9 for clean ones (an admission filter), 2 parents per prompt drawn from the "
             "task's family 90 % of the time. Confounded by family: base rates 0.05, 0.05, 0.5, 0.5, no copying "
             "(null) or compliance 0.6 x copy 0.5 (planted). Within a family: half the tasks hard (base rate 0.6 "
             "against 0.1), a hard task's parents drawn from hard tasks 90 % of the time. Drift: the base rate "
             "grows by 0.6 from the first invocation to the last. In every confounded world each invocation's "
             "retrieved parents are withheld by a recorded coin with probability 0.5 (randomised exposure); the "
             "randomised gap compares the coin's arms among the invocations whose retrieval held a flagged parent. "
             "Truths: the stratified gap's is 0 on a null and, per seed, the families' true gaps weighted as "
             "Mantel-Haenszel weighs them when copying is planted by family (none within a family or with drift: "
             "'-'); the randomised gap's is 0 on a null, else the mean of compliance x copy x (1 - base rate) over "
             "those invocations (the table gives its mean over seeds).", "",
             "| world | estimate | truth | mean estimate | 95 % interval covers the truth | interval excludes 0 |",
             "|---|---|---|---|---|---|"]
    t0 = time.perf_counter()
    for name, truth in worlds.items():
        lines += table(name, coverage(truth, range(args.seeds)))
    lines += ["", f"{args.seeds} seeds per world, {args.invocations} synthesis invocations per seed, through the "
              f"SQLite stores and the audit's code; {time.perf_counter() - t0:.0f} s."]
    emit("recovery", "`recovery.py`: the audit recovers a planted truth and stays silent on a confounded null",
         "\n".join(lines))


if __name__ == "__main__":
    main()
