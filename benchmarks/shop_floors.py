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
import time

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    env = gym.make("ap_gym/Shop-v0", split="test")
    tasks = env.unwrapped.task_ids("test")
    for name, policy in (("oracle", WalkthroughPolicy()), ("random", RandomShopper(args.seed))):
        t = time.perf_counter()
        eps = [ap_gym.run_episode(env, policy, task_id=task) for task in tasks]
        rewards = [e.score / 100 for e in eps]
        print(f"{name:<7} mean reward {statistics.fmean(rewards):.3f}  success {sum(e.success for e in eps)}/{len(eps)}  "
              f"mean steps {statistics.fmean(e.num_steps for e in eps):.1f}  ({time.perf_counter() - t:.1f} s)")


if __name__ == "__main__":
    main()
