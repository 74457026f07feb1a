"""The rollout loop plus policy bookkeeping against the raw engine, on the same actions.

A zero-cost backbone (candidate scores from a checksum, no model) drives the no-memory
ReAct agent through ``run_episode`` on TextWorld's held-out games, with admissible
commands on as in ``choose`` mode: prompt building, the per-step transcript, usage
accounting, the recording wrapper, the step limit and the Episode record are all in the
timed path. Then the same actions go straight to TextWorld's engine (``textworld.start``
with the same requested infos, ``reset``, ``step``). Both sides include starting the game
and resetting it; episodes alternate order between rounds. TextWorld is the cheapest
engine here (2-5 ms a step), so it shows the harness's own cost most plainly.

    python benchmarks/rollout_overhead.py [--tasks 20] [--rounds 3] [--max-steps 50]
"""

from __future__ import annotations

import argparse
import sys
import time
import zlib
from collections.abc import Sequence
from pathlib import Path

import gymnasium as gym

import ap_gym  # noqa: F401

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ap_gym.backbones.base import Completion, GenerationConfig, Message, Scores
from ap_gym.policies import make_policy
from ap_gym.rollout import run_episode


class ZeroCostBackbone:
    """Scores by a checksum of (prompt length, candidate): varied actions, no model."""

    identity = "zero-cost"

    def score(self, messages: Sequence[Message], candidates: Sequence[str], reduction: str = "sum") -> Scores:
        n = sum(len(m["content"]) for m in messages)
        return Scores(tuple(float(zlib.crc32(f"{n}|{c}".encode()) % 10_000) for c in candidates))

    def describe(self) -> dict:
        return {"kind": "zero-cost"}

    def generate(self, messages: Sequence[Message], config: GenerationConfig = GenerationConfig()) -> Completion:
        return Completion("look", 0, 0, 0.0)

    def generate_batch(self, batch, config: GenerationConfig = GenerationConfig()) -> list[Completion]:
        return [self.generate(m, config) for m in batch]


from benchmarks._bench import abba, emit, machine, ratio_spread, spread  # noqa: E402


def main() -> None:
    import textworld as tw

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-steps", type=int, default=50)
    args = parser.parse_args()
    env = gym.make("ap_gym/TextWorld-v0", split="test", max_episode_steps=args.max_steps)
    tasks = env.unwrapped.task_ids("test")[: args.tasks]
    policy = make_policy("no_memory", ZeroCostBackbone())
    infos = tw.EnvInfos(objective=True, score=True, max_score=True, won=True, lost=True,
                        admissible_commands=True, extras=["walkthrough"])

    def harness(tid: str) -> tuple[float, list[str]]:
        t = time.perf_counter()
        episode = run_episode(env, policy, task_id=tid, max_steps=args.max_steps)
        return time.perf_counter() - t, [s.action for s in episode.steps]

    def raw(tid: str, actions: list[str]) -> float:
        t = time.perf_counter()
        game = tw.start(str(env.unwrapped.game_path(tid)), infos)
        game.reset()
        for a in actions:
            game.step(a)
        game.close()
        return time.perf_counter() - t

    plans = {}
    for tid in tasks:  # equal warm-up: each side plays every task once (games compiled, imports done)
        plans[tid] = harness(tid)[1]
        raw(tid, plans[tid])
    per_round: dict[str, list[float]] = {"raw": [], "harness": []}
    steps = sum(map(len, plans.values()))
    for r in range(args.rounds):
        t_h = t_r = 0.0
        for tid in tasks:
            if abba(r):
                dt, actions = harness(tid)
                t_r += raw(tid, plans[tid])
            else:
                t_r += raw(tid, plans[tid])
                dt, actions = harness(tid)
            assert actions == plans[tid], "the zero-cost agent must play the same actions every time"
            t_h += dt
        per_round["raw"].append(1000 * t_r / steps)
        per_round["harness"].append(1000 * t_h / steps)
    env.close()
    body = "\n".join([
        f"TextWorld, {len(tasks)} held-out games x {args.rounds} rounds ({steps} steps a round), zero-cost backbone, "
        "no-memory agent in `choose` mode, admissible commands on in both; both sides warmed by one pass, order "
        "ABBA; ms per step, median (min-max) over rounds.", "",
        "| side | ms/step |", "|---|---|",
        f"| raw engine (`textworld.start`, `reset`, `step`) | {spread(per_round['raw'], 3)} |",
        f"| `run_episode` + policy bookkeeping | {spread(per_round['harness'], 3)} |", "",
        f"harness / raw: **{ratio_spread(per_round['harness'], per_round['raw'], 3)}** (per round). Target: at most 1.05."])
    emit("rollout_overhead", "`rollout_overhead.py`: harness against the raw engine", body, machine())

if __name__ == "__main__":
    main()
