"""Floors on ``ap_gym/Shop-v0``'s held-out instructions: the oracle against a random shopper.

The oracle (``WalkthroughPolicy`` on the env's oracle actions) reads the goal and buys
a matching product with the right options; it must reach reward 1.0 everywhere. The
random shopper searches with three random words of the instruction and then clicks
uniformly among the page's clickable elements until it buys or hits the step limit.

    python benchmarks/shop_floors.py [--seed 0]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

import gymnasium as gym

import ap_gym
from ap_gym.policies import BasePolicy, WalkthroughPolicy


class RandomShopper(BasePolicy):
    def __init__(self, seed: int) -> None:
        super().__init__()
        self.rng = random.Random(seed)

    def act(self, observation, info):
        self.record_step()
        if info.get("has_search_bar"):
            words = info["instruction"].replace(",", "").split()
            return f"search[{' '.join(self.rng.sample(words, 3))}]"
        return self.rng.choice(info.get("admissible_commands") or ["click[back to search]"])


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._bench import emit  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    env = gym.make("ap_gym/Shop-v0", split="test")
    tasks = env.unwrapped.task_ids("test")
    lines = [f"Shop-v0, {len(tasks)} held-out instructions, seed {args.seed}.", "",
             "| policy | mean reward | success | mean steps |", "|---|---|---|---|"]
    for name, policy in (("oracle (walkthrough)", WalkthroughPolicy()), ("random shopper", RandomShopper(args.seed))):
        eps = [ap_gym.run_episode(env, policy, task_id=task) for task in tasks]
        rewards = [e.score / 100 for e in eps]
        lines.append(f"| {name} | {statistics.fmean(rewards):.3f} | {sum(e.success for e in eps)}/{len(eps)} | "
                     f"{statistics.fmean(e.num_steps for e in eps):.1f} |")
    emit("shop_floors", "`shop_floors.py`: the Shop's floor and ceiling", "\n".join(lines))

if __name__ == "__main__":
    main()
