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
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from ap_gym.protocol import RunConfig, Runner, heldout_subset
from ap_gym.protocol.executors.ray import init_ray
from ap_gym.protocol.setting import Setting, build_policy, make_env


def evaluate(config: RunConfig, tasks: list[str], repeat: int = 1) -> tuple[float, float, list[Any]]:
    """(warm-up seconds, median timed seconds over ``repeat`` passes, episodes) for one configuration."""
    runner = Runner(config)
    setting = Setting("textworld", config.policies[0], 0)
    env = make_env(config, "textworld")
    policy = build_policy(setting.policy, config, None, 0, runner.resources).eval()  # type: ignore[arg-type]
    try:
        t = time.perf_counter()
        warm = [(i, tasks[i % len(tasks)]) for i in range(config.workers * config.lanes)]
        list(runner.evaluate(setting, env, policy, "", warm))
        warmup = time.perf_counter() - t
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            results = dict(runner.evaluate(setting, env, policy, "", list(enumerate(tasks))))
            times.append(time.perf_counter() - t)
    finally:
        env.close()
        runner.close()
    seconds = sorted(times)[len(times) // 2]
    episodes = [(r.episode["task_id"], [s["action"] for s in r.episode["steps"]], r.episode["success"])
                for _, r in sorted(results.items())]
    return warmup, seconds, episodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backbones", nargs="+", default=["tiny", "default"])
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--max-steps", type=int, default=30)
    parser.add_argument("--default-tasks", type=int, default=8, help="tasks for the default (slow) backbone")
    parser.add_argument("--default-max-steps", type=int, default=10)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--repeat", type=int, default=1, help="timed passes per configuration; the median counts")
    parser.add_argument("--lanes-only", action="store_true", help="only batched against unbatched")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    if not args.lanes_only:
        t = time.perf_counter()
        init_ray(RunConfig())
        print(f"Ray local instance started in {time.perf_counter() - t:.1f} s (not counted below)\n")
    figures: list[dict[str, Any]] = []
    for backbone in args.backbones:
        n_tasks = args.tasks if backbone == "tiny" else args.default_tasks
        max_steps = args.max_steps if backbone == "tiny" else args.default_max_steps
        probe = make_env(RunConfig(max_steps=max_steps), "textworld")
        tasks = heldout_subset(probe.unwrapped.task_ids("test"), n_tasks)
        probe.close()
        print(f"backbone {backbone}: {len(tasks)} TextWorld held-out tasks, at most {max_steps} steps")
        reference = None
        rows = [(ex, w, 1) for ex in ("local", "ray") for w in args.workers] + [("local", 1, 4)]
        if args.lanes_only:
            rows = [("local", 1, 1), ("local", 1, 4)]
        for executor, workers, lanes in rows:
            config = RunConfig.from_dict({
                "backbone": backbone, "policies": [{"name": "no_memory"}], "heldout": n_tasks,
                "max_steps": max_steps, "workers": workers, "executor": executor, "lanes": lanes,
            })
            warmup, seconds, episodes = evaluate(config, tasks, args.repeat)
            reference = reference or episodes
            rate = 60 * len(episodes) / seconds
            same = episodes == reference
            figures.append({"backbone": backbone, "executor": executor, "workers": workers, "lanes": lanes,
                            "episodes": len(episodes), "seconds": seconds, "warmup_s": warmup,
                            "episodes_per_min": rate, "same_episodes": same})
            label = f"{executor:5} workers={workers} lanes={lanes}"
            print(f"  {label}: {rate:7.1f} episodes/min ({seconds:6.1f} s; warm-up {warmup:5.1f} s) "
                  f"same episodes: {same}", flush=True)
        base = {(f["executor"], f["workers"], f["lanes"]): f["episodes_per_min"] for f in figures
                if f["backbone"] == backbone}
        for w in args.workers[1:] if not args.lanes_only else []:
            print(f"  local {w} vs 1 worker: {base[('local', w, 1)] / base[('local', 1, 1)]:.2f}x; "
                  f"ray {w} vs 1: {base[('ray', w, 1)] / base[('ray', 1, 1)]:.2f}x")
        for w in args.workers if not args.lanes_only else []:
            print(f"  ray / local at {w} workers: {base[('ray', w, 1)] / base[('local', w, 1)]:.2f}")
        print(f"  batched (4 lanes) / unbatched, 1 worker: {base[('local', 1, 4)] / base[('local', 1, 1)]:.2f}x\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=1)


if __name__ == "__main__":
    main()
