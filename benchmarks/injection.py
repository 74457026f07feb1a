"""The injection study (ap_gym/studies/injection.py) at full size, for RESULTS.md.

    python benchmarks/injection.py [--out results/injection-full] [--heldout 100]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ap_gym.studies.injection import Injection, run_study  # noqa: E402
from benchmarks._bench import emit  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/injection-full")
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--train-per-iter", type=int, default=50)
    parser.add_argument("--heldout", type=int, default=100)
    parser.add_argument("--exposure-calls", type=int, default=400)
    parser.add_argument("--dose-seeds", type=int, default=3,
                        help="independent runs per dose share, pooled (the dose effect's interval narrows with them)")
    args = parser.parse_args()
    t = time.perf_counter()
    result = run_study(args.out, Injection(iterations=args.iterations, train_per_iter=args.train_per_iter,
                                           heldout=args.heldout, dose_seeds=args.dose_seeds), exposure_calls=args.exposure_calls, progress=False)
    text = result["report"].read_text().split("\n", 2)[2].replace("![held-out success and buying at once per "
                                                                   "iteration](curves.png)", "")
    emit("injection", "`injection.py`: errors planted where each design reads (scripted actor)",
         f"{text.strip()}\n\n{time.perf_counter() - t:.0f} s; report and curves in `{args.out}`.")


if __name__ == "__main__":
    main()
