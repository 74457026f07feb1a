"""Wrapped env versus raw engine: time per step on the same actions, in one run.

For each benchmark, replay the gold paths of held-out tasks twice per round, once
through the raw engine and once through ``gym.make("ap_gym/...")`` (TimeLimit and
Gymnasium's checker included), alternating to cancel drift, admissible commands off.
Only steps are timed; resets are not. Prints per-step times and the wrapped/raw ratio.

    python benchmarks/env_overhead.py [--tasks 6] [--rounds 3]

ScienceWorld's "raw engine" is the JVM's own step/score/completed calls; the official
Python wrapper's ``step`` (which also fetches look, inventory and the valid actions on
every step) is timed too, for reference. ALFWorld's raw engine is TextWorld's PDDL env
with alfworld's own wrappers (which always compute admissible commands); the time to
generate a game into a fresh cache is printed too.
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym

import ap_gym  # noqa: F401


def _until_done(env, tid: str) -> list[str]:
    """The gold path of ``tid`` cut where the wrapped env says the episode ended."""
    _, info = env.reset(options={"task_id": tid, "walkthrough": True})
    plan = []
    for a in info["walkthrough"]:
        plan.append(a)
        if env.step(a)[2]:
            break
    return plan


def _time(fn, actions) -> float:
    t = time.perf_counter()
    for a in actions:
        fn(a)
    return time.perf_counter() - t


def _wrapped_step(env):
    """env.step that tolerates an engine ending the episode a step early.

    ScienceWorld is not deterministic across loads for a few tasks (animals move, plants
    grow on their own clock), so a gold path can finish one step sooner than before.
    """

    def step(a):
        if not step.done:
            step.done = env.step(a)[2]

    step.done = False
    return step


def _tw_raw_against_wrapped(env, plans: dict[str, list[str]], start_raw, rounds: int) -> dict[str, float]:
    """Time each plan through a raw TextWorld engine (``start_raw(task_id)``) and the wrapped env."""
    t_raw = t_wrap = 0.0
    steps = 0
    for _ in range(rounds):
        for tid, plan in plans.items():
            raw = start_raw(tid)
            raw.reset()
            t_raw += _time(raw.step, plan)
            raw.close()
            env.reset(options={"task_id": tid})
            t_wrap += _time(_wrapped_step(env), plan)
            steps += len(plan)
    env.close()
    return {"steps": steps, "raw_ms": 1000 * t_raw / steps, "wrapped_ms": 1000 * t_wrap / steps}


def scienceworld(n_tasks: int, rounds: int) -> dict[str, float]:
    from scienceworld import ScienceWorldEnv as Raw

    env = gym.make("ap_gym/ScienceWorld-v0", split="test", max_episode_steps=100_000)
    raw = Raw("", envStepLimit=10**9)
    tasks = env.unwrapped.task_ids("test")[:: max(1, 60 // n_tasks)][:n_tasks]
    plans = {}
    for tid in tasks:
        plans[tid] = _until_done(env, tid)
    t_raw = t_wrap = t_py = 0.0
    steps = py_steps = 0
    for _ in range(rounds):
        for tid, plan in plans.items():
            task, _, var = tid.rpartition("/")
            raw.load(task, int(var), "", True)  # as the wrapped reset below: same world
            raw.server.step("look around")

            def raw_step(a, s=raw.server):
                s.step(a)
                s.getScore()
                s.getCompleted()

            t_raw += _time(raw_step, plan)
            env.reset(options={"task_id": tid, "walkthrough": True})
            t_wrap += _time(_wrapped_step(env), plan)
            steps += len(plan)
        tid, plan = next(iter(plans.items()))  # the slow official step: one task a round
        raw.load(tid.rpartition("/")[0], int(tid.rpartition("/")[2]), "", True)
        raw.reset()
        t_py += _time(raw.step, plan)
        py_steps += len(plan)
    env.close()
    raw.close()
    return {"steps": steps, "raw_ms": 1000 * t_raw / steps, "wrapped_ms": 1000 * t_wrap / steps,
            "python_wrapper_ms": 1000 * t_py / py_steps}


def textworld(n_tasks: int, rounds: int) -> dict[str, float]:
    import textworld as tw

    env = gym.make("ap_gym/TextWorld-v0", split="test", admissible_commands=False, max_episode_steps=100_000)
    tasks = env.unwrapped.task_ids("test")[:: max(1, 20 // n_tasks)][:n_tasks]
    plans = {}
    for tid in tasks:
        plans[tid] = _until_done(env, tid)
    infos = tw.EnvInfos(objective=True, score=True, max_score=True, won=True, lost=True, extras=["walkthrough"])
    return _tw_raw_against_wrapped(env, plans, lambda tid: tw.start(str(env.unwrapped.game_path(tid)), infos), rounds)


def alfworld(n_tasks: int, rounds: int) -> dict[str, float]:
    """Also times generating games (planner check included) into a fresh cache."""
    import os
    import tempfile

    import textworld as tw
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

    from ap_gym.envs.alfworld import alfworld_suite
    from ap_gym.envs.alfworld_gen import ensure_alfworld_game

    specs = alfworld_suite()["test"][:: max(1, 134 // n_tasks)][:n_tasks]
    old = os.environ.get("AP_GYM_CACHE")
    with tempfile.TemporaryDirectory() as fresh:
        os.environ["AP_GYM_CACHE"] = fresh
        t = time.perf_counter()
        for spec in specs:
            ensure_alfworld_game(spec)
        generation = (time.perf_counter() - t) / len(specs)
    if old is None:
        os.environ.pop("AP_GYM_CACHE", None)
    else:
        os.environ["AP_GYM_CACHE"] = old
    env = gym.make("ap_gym/ALFWorld-v0", split="test", admissible_commands=False, max_episode_steps=100_000)
    plans = {spec.task_id: _until_done(env, spec.task_id) for spec in specs}
    infos = tw.EnvInfos(won=True, admissible_commands=True)
    return {**_tw_raw_against_wrapped(env, plans, lambda tid: tw.start(
        str(env.unwrapped.game_path(tid)), infos, wrappers=[AlfredDemangler(), AlfredInfos()]), rounds),
        "generation_s": generation}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", choices=["scienceworld", "textworld", "alfworld"])
    args = parser.parse_args()
    runs = {"scienceworld": scienceworld, "textworld": textworld, "alfworld": alfworld}
    print(f"{'benchmark':<14}{'steps':>7}{'raw ms/step':>13}{'wrapped ms/step':>17}{'wrapped/raw':>13}")
    for name, fn in runs.items():
        if args.only and name != args.only:
            continue
        r = fn(args.tasks, args.rounds)
        print(f"{name:<14}{r['steps']:>7}{r['raw_ms']:>13.3f}{r['wrapped_ms']:>17.3f}{r['wrapped_ms'] / r['raw_ms']:>13.3f}")
        if "generation_s" in r:
            print(f"{'':<14}(generating a game, planner check included: {r['generation_s']:.1f} s each)")
        if "python_wrapper_ms" in r:
            print(f"{'':<14}(ScienceWorld's own Python step: {r['python_wrapper_ms']:.1f} ms/step, "
                  f"{r['python_wrapper_ms'] / r['wrapped_ms']:.0f}x ours)")


if __name__ == "__main__":
    main()
