"""Memory over many resets: ALFWorld's process and ScienceWorld's JVM.

Resets one env ``--resets`` times over its held-out tasks (a step each) and prints the
resident memory every ``--every`` resets: this process plus ALFWorld's engine process
(the engine leaks natively; ``recycle_every`` replaces its process), and ScienceWorld's
JVM (``recycle_every`` replaces the JVM). Each engine is measured never recycled and
recycled at its default.

    python benchmarks/memory_growth.py [--resets 100] [--every 25] [--only alfworld|scienceworld]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import gymnasium as gym

import ap_gym  # noqa: F401


def rss_mb(pid: int | str = "self") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def grow(env_id: str, resets: int, every: int, measure: str, **kwargs: object) -> list[tuple[int, float]]:
    env = gym.make(env_id, split="test", **kwargs)
    tasks = env.unwrapped.task_ids("test")[:5]  # growth is per reset, not per game
    points = []
    try:
        for i in range(1, resets + 1):
            env.reset(options={"task_id": tasks[i % len(tasks)]})
            env.step("look around" if "Science" in env_id else "look")
            if i == 1 or i % every == 0:
                if measure == "jvm":
                    mb = rss_mb(env.unwrapped._engine._gateway.java_process.pid)
                else:  # this process and the engine's
                    mb = rss_mb("self") + rss_mb(env.unwrapped._engine.pid)
                points.append((i, mb))
    finally:
        env.close()
    return points


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._bench import emit  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resets", type=int, default=100)
    parser.add_argument("--every", type=int, default=25)
    parser.add_argument("--only", choices=("alfworld", "scienceworld"), help="measure one engine only")
    args = parser.parse_args()
    runs = [("ALFWorld, this process + engine, never recycled", "ap_gym/ALFWorld-v0", "self", {"recycle_every": 0}),
            ("ALFWorld, this process + engine, recycled every 50", "ap_gym/ALFWorld-v0", "self", {"recycle_every": 50}),
            ("ScienceWorld JVM, never recycled", "ap_gym/ScienceWorld-v0", "jvm", {"recycle_every": 0}),
            ("ScienceWorld JVM, recycled every 50", "ap_gym/ScienceWorld-v0", "jvm", {"recycle_every": 50})]
    lines = [f"{args.resets} resets over each env's held-out tasks (a step each); resident memory (MB) every "
             f"{args.every} resets: this process plus ALFWorld's engine process, or ScienceWorld's JVM.", "",
             "| engine | MB by resets | growth |", "|---|---|---|"]
    for name, env_id, measure, kwargs in runs:
        if args.only and args.only not in env_id.lower():
            continue
        points = grow(env_id, args.resets, args.every, measure, **kwargs)
        first, last = points[0][1], points[-1][1]
        lines.append(f"| {name} | " + ", ".join(f"{i}: {mb:.0f}" for i, mb in points)
                     + f" | {last - first:+.0f} MB over {points[-1][0] - points[0][0]} resets |")
        print(lines[-1], flush=True)
    emit("memory_growth" + (f"_{args.only}" if args.only else ""), "`memory_growth.py`: memory over many resets",
         "\n".join(lines))

if __name__ == "__main__":
    main()
