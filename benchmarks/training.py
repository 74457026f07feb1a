"""Training throughput: env steps per second of vector envs, and seconds per GRPO update.

Env steps: ``gym.make_vec(id, n, vectorization_mode=...)`` for n in 1, 2, 4, sync and
async, on TextWorld and ScienceWorld. Each configuration is built and warmed (a reset and
``--warm`` untimed steps), then timed over ``--steps`` vector steps with actions drawn
(seeded) from each sub-env's admissible commands; configurations run in alternating order
(ABBA over the list) for ``--rounds`` rounds. Prints sub-env steps per second: median
(min-max) over rounds. Resets inside the timed loop (autoreset) count, as in training.

GRPO: ``examples/grpo_torch.py`` on its toy env, ``--updates`` updates per model after one
untimed update (warm-up); seconds per update (rollout plus gradient step), median (min-max).

    python benchmarks/training.py [--rounds 3] [--steps 30] [--updates 4] [--only envs|grpo]
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import sys
import time
from pathlib import Path

import gymnasium as gym

import ap_gym  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks._bench import emit, spread  # noqa: E402

ENVS = {"textworld": "ap_gym/TextWorld-v0", "scienceworld": "ap_gym/ScienceWorld-v0"}


def _steps(envs, steps: int, rng: random.Random, info) -> tuple[float, dict]:
    t0 = time.perf_counter()
    for _ in range(steps):
        commands = info.get("admissible_commands")
        actions = tuple(rng.choice(list(commands[i])) if commands is not None and len(commands[i]) else "look"
                        for i in range(envs.num_envs))
        _, _, _, _, info = envs.step(actions)
    return time.perf_counter() - t0, info


def env_rates(env_id: str, sizes: list[int], rounds: int, steps: int, warm: int) -> dict[tuple[str, int], list[float]]:
    configs = [(mode, n) for n in sizes for mode in ("sync", "async")]
    built = {}
    for mode, n in configs:
        envs = gym.make_vec(env_id, n, vectorization_mode=mode, split="train", admissible_commands=True)
        _, info = envs.reset(seed=list(range(n)))
        rng = random.Random(0)
        _, info = _steps(envs, warm, rng, info)
        built[(mode, n)] = (envs, rng, info)
    rates: dict[tuple[str, int], list[float]] = {c: [] for c in configs}
    for r in range(rounds):
        for config in (configs if r % 2 == 0 else configs[::-1]):
            envs, rng, info = built[config]
            seconds, info = _steps(envs, steps, rng, info)
            built[config] = (envs, rng, info)
            rates[config].append(steps * config[1] / seconds)
        print(f"  {env_id} round {r + 1}/{rounds}", flush=True)
    for envs, _, _ in built.values():
        envs.close()
    return rates


def grpo_seconds(model: str, updates: int) -> list[float]:
    spec = importlib.util.spec_from_file_location("grpo_torch", ROOT / "examples" / "grpo_torch.py")
    example = importlib.util.module_from_spec(spec)
    sys.modules["grpo_torch"] = example  # its dataclasses look their module up
    spec.loader.exec_module(example)
    import numpy as np
    import torch

    args = example.Args(model=model, updates=updates, lr=1e-5 if model != "tiny" else 3e-3)
    backbone = example.load_backbone(model, 0)
    optimizer = torch.optim.Adam(backbone.model.parameters(), lr=args.lr)
    envs = ap_gym.make_vec(args.env, args.groups * args.group_size, group_size=args.group_size, split="train")
    rng = np.random.default_rng(0)
    seconds = []
    for n in range(updates + 1):
        t0 = time.perf_counter()
        attempts = example.collect(envs, backbone, args, n, rng)
        example.update(backbone, optimizer, attempts, example.advantages(attempts, args.group_size), args.temperature)
        if n:  # the first is the warm-up
            seconds.append(time.perf_counter() - t0)
        print(f"  grpo {model} update {n}: {time.perf_counter() - t0:.1f} s", flush=True)
    envs.close()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warm", type=int, default=5)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--updates", type=int, default=4)
    parser.add_argument("--models", nargs="+", default=["tiny", "smollm2"])
    parser.add_argument("--only", choices=["envs", "grpo"])
    args = parser.parse_args()
    lines = []
    if args.only != "grpo":
        lines += ["### Env steps per second (all sub-envs together)", "",
                  f"{args.steps} vector steps per round, {args.rounds} rounds (ABBA), actions drawn from the "
                  "admissible commands; median (min-max).", "",
                  "| env | envs | sync | async | async / sync |", "|---|---|---|---|---|"]
        for name, env_id in ENVS.items():
            rates = env_rates(env_id, args.sizes, args.rounds, args.steps, args.warm)
            for n in args.sizes:
                s, a = rates[("sync", n)], rates[("async", n)]
                ratio = spread([x / y for x, y in zip(a, s, strict=True)])
                lines.append(f"| {name} | {n} | {spread(s, 1)} | {spread(a, 1)} | {ratio}x |")
        lines.append("")
    if args.only != "envs":
        lines += ["### Seconds per GRPO update (examples/grpo_torch.py, toy env)", "",
                  "4 groups x 4 attempts per update: rollouts (candidates scored with the KV cache) and one "
                  "gradient step through every decision's candidates; median (min-max) after one warm-up update.", "",
                  "| model | updates | s per update |", "|---|---|---|"]
        for model in args.models:
            seconds = grpo_seconds(model, args.updates)
            lines.append(f"| {model} | {len(seconds)} | {spread(seconds, 2)} |")
    emit("training", "`training.py`: vector env throughput and GRPO updates", "\n".join(lines))


if __name__ == "__main__":
    main()
