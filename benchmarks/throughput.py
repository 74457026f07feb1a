"""Held-out episodes per minute with 1 and 2 local workers, side by side in one run.

Runs the protocol's frozen held-out evaluation (one iteration, no training, the
no-memory agent) on the same tasks with ``workers=1`` and ``workers=2`` and prints
episodes per minute, the speed-up, and whether the per-episode results are identical.
Worker start-up (spawned processes loading the model) is included in the timing.

    python benchmarks/throughput.py [--backbone default|tiny] [--tasks 8] [--max-steps 10]
"""

from __future__ import annotations

import argparse
import tempfile
import time

from ap_gym.protocol import RunConfig, load_episodes, run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backbone", default="default")
    parser.add_argument("--benchmark", default="textworld")
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--max-steps", type=int, default=10)
    args = parser.parse_args()
    results = {}
    for workers in (1, 2):
        with tempfile.TemporaryDirectory() as out:
            config = RunConfig.from_dict({
                "name": f"w{workers}", "benchmarks": [args.benchmark], "backbone": args.backbone,
                "policies": ["no_memory"], "iterations": 1, "train_per_iter": 0, "heldout": args.tasks,
                "max_steps": args.max_steps, "workers": workers, "out": out,
            })
            t = time.perf_counter()
            run_dir = run(config, progress=False)
            seconds = time.perf_counter() - t
            episodes = [(x["task_id"], [s["action"] for s in x["steps"]], x["success"])
                        for x in load_episodes(run_dir) if x["phase"] == "eval"]
        results[workers] = (seconds, episodes)
        print(f"workers={workers}: {len(episodes)} held-out episodes in {seconds:.1f} s = "
              f"{60 * len(episodes) / seconds:.1f} episodes/min")
    print(f"speed-up 2 vs 1 workers: {results[1][0] / results[2][0]:.2f}x; "
          f"identical episodes: {results[1][1] == results[2][1]}")


if __name__ == "__main__":
    main()
