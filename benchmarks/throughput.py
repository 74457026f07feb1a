"""Held-out episodes per minute: 1, 2 and 4 workers, local and Ray; batched acting.

The protocol's frozen held-out evaluation (no-memory agent, ``choose`` mode) on the same
TextWorld held-out tasks, timed through the protocol's own executor code:

* **workers**: 1, 2 and 4 workers with the local executor (spawned worker processes; one
  worker runs in this process) and with Ray (actors on a Ray instance started here,
  loopback only). Workers are warmed first (processes started, model and env loaded,
  one task each), as a long run amortises that; the warm-up time is printed too.
* **lanes**: one worker playing 4 episodes in lock-step with their scoring batched into
  one forward pass, against the same worker playing them one after another (KV cache
  reused within each episode).

Every configuration must produce the same episodes; the script says whether it did.

    python benchmarks/throughput.py [--backbones tiny default] [--tasks 20] [--max-steps 30] [--repeat 3]
    python benchmarks/throughput.py --workers-only --backbones tiny --repeat 5   # make bench
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ap_gym.protocol import RunConfig, Runner, heldout_subset
from ap_gym.protocol.executors.ray import init_ray
from ap_gym.protocol.setting import Setting, build_policy, make_env
from benchmarks._bench import emit, machine, ratio_spread, spread


def evaluate(config: RunConfig, tasks: list[str]) -> tuple[float, float, list[Any], dict[str, float]]:
    """(warm-up seconds, timed seconds, episodes, time inside episodes) for one configuration."""
    runner = Runner(config)
    setting = Setting("textworld", config.policies[0], 0)
    env = make_env(config, "textworld")
    policy = build_policy(setting.policy, config, None, 0, runner.resources).eval()  # type: ignore[arg-type]
    try:
        t = time.perf_counter()
        warm = [(i, tasks[i % len(tasks)]) for i in range(config.workers * config.lanes)]
        list(runner.evaluate(setting, env, policy, "", warm))
        warmup = time.perf_counter() - t
        t = time.perf_counter()
        results = dict(runner.evaluate(setting, env, policy, "", list(enumerate(tasks))))
        seconds = time.perf_counter() - t
    finally:
        env.close()
        runner.close()
    busy = {"busy_s": sum(r.episode.wall_time_s for r in results.values()),
            "steps": sum(r.episode.num_steps for r in results.values())}
    episodes = [(r.episode.task_id, [s.action for s in r.episode.steps], r.episode.success)
                for _, r in sorted(results.items())]
    return warmup, seconds, episodes, busy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backbones", nargs="+", default=["tiny", "default"])
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--max-steps", type=int, default=30)
    parser.add_argument("--default-tasks", type=int, default=8, help="tasks for the default (slow) backbone")
    parser.add_argument("--default-max-steps", type=int, default=10)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--repeat", type=int, default=3, help="rounds; configurations in rotating order each round")
    parser.add_argument("--workers-only", action="store_true",
                        help="only the 2-worker scaling: 1 worker against 2")
    parser.add_argument("--lanes-only", action="store_true", help="only batched against unbatched")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    use_ray = not (args.lanes_only or args.workers_only)
    if use_ray:
        t = time.perf_counter()
        init_ray(RunConfig())
        print(f"Ray local instance started in {time.perf_counter() - t:.1f} s (not counted below)\n")
    figures: list[dict[str, Any]] = []
    sections: list[str] = []
    for backbone in args.backbones:
        n_tasks = args.tasks if backbone == "tiny" else args.default_tasks
        max_steps = args.max_steps if backbone == "tiny" else args.default_max_steps
        probe = make_env(RunConfig(max_steps=max_steps), "textworld")
        tasks = heldout_subset(probe.unwrapped.task_ids("test"), n_tasks)
        probe.close()
        print(f"backbone {backbone}: {len(tasks)} TextWorld held-out tasks, at most {max_steps} steps", flush=True)
        # (executor, workers, lanes, threads per worker or None for the default)
        if args.workers_only:
            rows = [("local", 1, 1, None), ("local", 2, 1, None)]
        elif args.lanes_only:
            rows = [("local", 1, 1, None), ("local", 1, 4, None)]
        else:
            rows = [(ex, w, 1, None) for ex in ("local", "ray") for w in args.workers] + [("local", 1, 4, None)]
        runs: dict[tuple, list[dict[str, Any]]] = {row: [] for row in rows}
        reference = None

        def config_of(row: tuple, backbone: str = backbone, n_tasks: int = n_tasks, max_steps: int = max_steps) -> RunConfig:
            executor, workers, lanes, threads = row
            return RunConfig.from_dict({
                "backbone": backbone, "policies": [{"name": "no_memory"}], "heldout": n_tasks,
                "max_steps": max_steps, "workers": workers, "executor": executor, "lanes": lanes,
                "threads": threads,
            })

        # one untimed pass over every task first: the caches every configuration reads (games,
        # their goals) are filled before any is timed, not inside the first one timed
        t = time.perf_counter()
        evaluate(config_of(rows[0]), tasks)
        print(f"  priming pass: {time.perf_counter() - t:.1f} s (not counted)", flush=True)
        for r in range(args.repeat):
            for row in (rows if r % 2 == 0 else list(reversed(rows))):
                executor, workers, lanes, threads = row
                warmup, seconds, episodes, busy = evaluate(config_of(row), tasks)
                reference = reference or episodes
                runs[row].append({"seconds": seconds, "warmup_s": warmup, "same": episodes == reference,
                                  "episodes": len(episodes), **busy})
                print(f"  round {r + 1}: {executor:5} workers={workers} lanes={lanes} threads={threads or 'default'}: "
                      f"{60 * len(episodes) / seconds:7.1f} episodes/min ({seconds:5.2f} s; warm-up {warmup:4.1f} s; "
                      f"same episodes: {episodes == reference})", flush=True)
        table = ["| executor | workers | lanes | threads per worker | episodes/min | ms per step inside episodes | "
                 "time outside episodes | same episodes |", "|---|---|---|---|---|---|---|---|"]
        for row, xs in runs.items():
            executor, workers, lanes, threads = row
            rates = [60 * x["episodes"] / x["seconds"] for x in xs]
            step_ms = [1000 * x["busy_s"] / x["steps"] for x in xs]
            outside = [x["seconds"] - x["busy_s"] / workers for x in xs]
            default_threads = (os.cpu_count() or 1) if workers == 1 else max(1, (os.cpu_count() or 1) // workers)
            table.append(f"| {executor} | {workers} | {lanes} | {threads or default_threads} | {spread(rates, 1)} | "
                         f"{spread(step_ms, 1)} | {spread(outside)} s | {all(x['same'] for x in xs)} |")
            figures.append({"backbone": backbone, "executor": executor, "workers": workers, "lanes": lanes,
                            "threads": threads, "runs": xs})
        lines = [f"Backbone `{backbone}`, {len(tasks)} TextWorld held-out tasks, at most {max_steps} steps, no-memory "
                 f"agent in `choose` mode; {args.repeat} rounds, configurations in rotating order, workers warmed "
                 "before timing; median (min-max). *ms per step inside episodes* is the episodes' own wall time "
                 "per step (summed over workers); *time outside episodes* is the pass's time not spent in an episode "
                 "per worker (env resets, job hand-off, the last worker's tail). One untimed pass over every task first fills the caches all configurations read.", "",
                 *table, ""]

        def ratio(a: tuple, b: tuple, runs: dict = runs) -> str:
            return ratio_spread([x["seconds"] for x in runs[b]], [x["seconds"] for x in runs[a]])

        one, two = ("local", 1, 1, None), ("local", 2, 1, None)
        if one in runs and two in runs:
            lines.append(f"2 workers vs 1 (local): **{ratio(two, one)}x** (per-round ratios; target >= 1.6).")
            per_step = [(x["busy_s"] / x["steps"]) / (y["busy_s"] / y["steps"]) for x, y in zip(runs[one], runs[two], strict=True)]
            lines.append(f"Where the time goes: a step inside an episode costs {spread([1 / r for r in per_step])}x as "
                         "much with two workers running as with one alone (a lone worker also uses part of the second "
                         "core: tokenizer, interpreter, torch's threads), which bounds 2 workers at "
                         f"{spread([2 * r for r in per_step])}x before the time outside episodes (the column above) is "
                         "counted.")
        lanes4 = ("local", 1, 4, None)
        if lanes4 in runs:
            lines.append(f"4 lanes vs unbatched, 1 worker: {ratio(lanes4, one)}x.")
        for w in args.workers if use_ray else []:
            if ("ray", w, 1, None) in runs:
                lines.append(f"ray / local at {w} workers: {ratio(('ray', w, 1, None), ('local', w, 1, None))}.")
        sections.append("\n".join(lines))
    name = "throughput_workers" if args.workers_only else "throughput_lanes" if args.lanes_only else "throughput"
    what = ("workers" if args.workers_only else "batched lanes" if args.lanes_only else "workers, executors, lanes")
    emit(name, f"`throughput.py`: held-out episodes per minute, {what}", "\n\n".join(sections), machine())
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=1)


if __name__ == "__main__":
    main()
