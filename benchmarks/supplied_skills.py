"""Supplied skills (§F.1) with a real model: the packaged SmolLM2 on the Shop (or another).

    python benchmarks/supplied_skills.py [--skills benchmarks/skills/shop.yaml] [--backbone default]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ap_gym.studies.supplied_skills import run_supplied_skills, supplied_skills_table  # noqa: E402
from benchmarks._bench import emit  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skills", default=str(Path(__file__).with_name("skills") / "shop.yaml"))
    parser.add_argument("--backbone", default="default")
    parser.add_argument("--heldout", type=int, default=20)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--max-steps", type=int, default=10)
    parser.add_argument("--out", default="results/bench-supplied-skills")
    args = parser.parse_args()
    t = time.perf_counter()
    run_dir = run_supplied_skills(args.skills, args.out, backbone=args.backbone, heldout=args.heldout,
                                  seeds=tuple(args.seeds), max_steps=args.max_steps, progress=False)
    table = supplied_skills_table(run_dir)
    emit("supplied_skills", "`supplied_skills.py`: the paper's §F.1 on a benchmark we have",
         f"Skills `{args.skills}`, backbone `{args.backbone}` (react), {args.heldout} held-out tasks, seeds "
         f"{args.seeds}, {args.max_steps} steps.\n\n{table.markdown()}\n\n{time.perf_counter() - t:.0f} s.")


if __name__ == "__main__":
    main()
