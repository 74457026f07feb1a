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
import time
import zlib
from collections.abc import Sequence

import gymnasium as gym

import ap_gym  # noqa: F401
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

    for tid in tasks:  # warm-up: games compiled and cached, imports done
        harness(tid)
    t_h = t_r = 0.0
    steps = episodes = 0
    for r in range(args.rounds):
        for tid in tasks:
            if r % 2 == 0:
                dt, actions = harness(tid)
                t_r += raw(tid, actions)
            else:
                _, actions = harness(tid)  # the actions are the same every time (deterministic)
                t_r += raw(tid, actions)
                dt, again = harness(tid)
                assert again == actions
            t_h += dt
            steps += len(actions)
            episodes += 1
    env.close()
    print(f"TextWorld, {episodes} episodes, {steps} steps, zero-cost backbone, no-memory agent")
    print(f"raw engine:          {1000 * t_r / steps:.3f} ms/step ({t_r:.2f} s)")
    print(f"run_episode+policy:  {1000 * t_h / steps:.3f} ms/step ({t_h:.2f} s)")
    print(f"harness / raw: {t_h / t_r:.3f}  (overhead {100 * (t_h / t_r - 1):+.1f} %)")


if __name__ == "__main__":
    main()
