"""A peer on the same work: TALES' ScienceWorld env against ``ap_gym/ScienceWorld-v0``.

TALES (microsoft/tale-suite) wraps ScienceWorld with the official Python ``step``, which
fetches the look, the inventory and the valid-action list on every step. This script
replays the same gold paths of ap-gym's held-out ScienceWorld tasks through three sides
and times the steps only (resets are not timed):

* ``tales``: TALES' ``ScienceWorldEnv`` (its own JVM), admissible commands always computed;
* ``ap_gym``: ``ap_gym/ScienceWorld-v0`` with admissible commands off (the default);
* ``ap_gym+adm``: the same env with admissible commands on (what TALES computes).

Every side replays every path once before timing (equal warm-up: each side has its own
JVM); then ``--reps`` rounds, the order of the sides rotated every round (ABC, CBA, BCA, ...).
Prints the machine, per-step milliseconds per side (median and min-max over rounds) and
each ap-gym side's ratio to TALES.

TALES is not a dependency: it declares Python >= 3.12, so its wheel is fetched once
(``pip download --no-deps --python-version 3.12 --only-binary=:all: tale-suite==1.0.0rc2``)
into the cache and its ScienceWorld module is loaded beside our venv's ``scienceworld``.

    python benchmarks/tales_scienceworld.py [--tasks 5] [--reps 4]
"""

from __future__ import annotations

import argparse
import importlib.util
import platform
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import gymnasium as gym

import ap_gym  # noqa: F401

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ap_gym.paths import cache_dir
from benchmarks._bench import emit, gold_path, machine, ratio_spread, spread  # noqa: E402

WHEEL = "tale-suite==1.0.0rc2"


def tales_module():
    """TALES' ScienceWorld env module, from its wheel (fetched into the cache once)."""
    root = cache_dir("tales", "1.0.0rc2")
    module = root / "tales" / "scienceworld" / "scienceworld_env.py"
    if not module.exists():
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--python-version", "3.12",
                        "--only-binary=:all:", WHEEL, "-d", str(root)], check=True)
        with zipfile.ZipFile(next(root.glob("tale_suite-*.whl"))) as z:
            z.extractall(root)
    package = "tales_scienceworld_pkg"
    spec = importlib.util.spec_from_file_location(package, module.parent / "__init__.py",
                                                  submodule_search_locations=[str(module.parent)])
    pkg = importlib.util.module_from_spec(spec)
    sys.modules[package] = pkg
    data = importlib.util.spec_from_file_location(f"{package}.scienceworld_data", module.parent / "scienceworld_data.py")
    sys.modules[f"{package}.scienceworld_data"] = importlib.util.module_from_spec(data)
    data.loader.exec_module(sys.modules[f"{package}.scienceworld_data"])
    env_spec = importlib.util.spec_from_file_location(f"{package}.scienceworld_env", module)
    env_module = importlib.util.module_from_spec(env_spec)
    sys.modules[env_spec.name] = env_module
    env_spec.loader.exec_module(env_module)
    return env_module


def gold_paths(n: int) -> dict[str, list[str]]:
    """The gold paths of ``n`` held-out tasks spread over the split, cut where the episode ends."""
    env = gym.make("ap_gym/ScienceWorld-v0", split="test", max_episode_steps=100_000)
    ids = env.unwrapped.task_ids("test")
    plans = {}
    for tid in ids[:: max(1, len(ids) // n)][:n]:
        plans[tid] = gold_path(env, tid)
    env.close()
    return plans


class Side:
    """One way of stepping: ``start(task_id)`` resets to the task, ``step(action)`` steps."""

    def __init__(self, name: str, start, step, close) -> None:
        self.name, self.start, self.step, self.close = name, start, step, close

    def replay(self, plans: dict[str, list[str]]) -> tuple[float, int]:
        total, steps = 0.0, 0
        for tid, plan in plans.items():
            self.start(tid)
            t = time.perf_counter()
            for a in plan:
                steps += 1
                if self.step(a):
                    break
            total += time.perf_counter() - t
        return total, steps


def sides(tales) -> list[Side]:
    envs: dict[str, object] = {}

    def tales_side() -> Side:
        cache: dict[str, object] = {}

        def start(tid: str) -> None:
            task, _, var = tid.rpartition("/")
            if task not in cache:
                for env in cache.values():
                    env.close()
                cache.clear()
                cache[task] = tales.ScienceWorldEnv(task)
            env = cache[task]
            env.variation = int(var)
            env.reset()
            envs["tales"] = env

        def step(a: str) -> bool:
            return bool(envs["tales"].step(a)[2])

        return Side("tales", start, step, lambda: [e.close() for e in cache.values()])

    def ours(name: str, admissible: bool) -> Side:
        env = gym.make("ap_gym/ScienceWorld-v0", split="test", max_episode_steps=100_000,
                       admissible_commands=admissible)

        def start(tid: str) -> None:
            env.reset(options={"task_id": tid})

        def step(a: str) -> bool:
            _, _, term, trunc, _ = env.step(a)
            return term or trunc

        return Side(name, start, step, env.close)

    return [tales_side(), ours("ap_gym", False), ours("ap_gym+adm", True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=5)
    parser.add_argument("--reps", type=int, default=4)
    args = parser.parse_args()
    import scienceworld

    tales = tales_module()
    plans = gold_paths(args.tasks)
    print(f"machine: {platform.processor() or platform.machine()}, {platform.system()} {platform.release()}, "
          f"Python {platform.python_version()}, scienceworld {getattr(scienceworld, '__version__', '?')}, "
          f"TALES {WHEEL}; {len(plans)} tasks, {sum(map(len, plans.values()))} gold steps per replay")
    all_sides = sides(tales)
    try:
        for side in all_sides:  # equal warm-up: every side replays every path once
            side.replay(plans)
        per_step: dict[str, list[float]] = {s.name: [] for s in all_sides}
        order = list(all_sides)
        for r in range(args.reps):
            rotated = order[r % len(order):] + order[: r % len(order)]
            for side in (rotated if r % 2 == 0 else rotated[::-1]):
                seconds, steps = side.replay(plans)
                per_step[side.name].append(1000 * seconds / max(1, steps))
    finally:
        for side in all_sides:
            side.close()
    base = per_step["tales"]
    lines = [f"{len(plans)} ScienceWorld tasks, their gold paths ({sum(map(len, plans.values()))} steps per replay), "
             f"replayed by TALES' env ({WHEEL}, loaded beside our venv's scienceworld "
             f"{getattr(scienceworld, '__version__', '?')}; it computes the valid actions every step) and by "
             "`ap_gym/ScienceWorld-v0` without and with admissible commands; every side warmed by one replay, "
             f"{args.reps} rounds in rotating ABBA order; ms per step, median (min-max).", "",
             "| side | ms per step | ratio to TALES (per round) |", "|---|---|---|"]
    for name, values in per_step.items():
        lines.append(f"| {name} | {spread(values)} | **{ratio_spread(values, base, 3)}** |")
    emit("tales_scienceworld", "`tales_scienceworld.py`: TALES' ScienceWorld env against ours", "\n".join(lines),
         machine())

if __name__ == "__main__":
    main()
