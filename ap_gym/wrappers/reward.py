"""Rewards on one scale across benchmarks.

Every ap-gym env's reward is the change in its own score (README, "Rewards"): 0-100 on
ScienceWorld (a failed task can drop it to -100), the game's points on TextWorld, 0/1 on
ALFWorld, 0-100 on the shops. A trainer mixing benchmarks wants one scale.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

__all__ = ["NormalisedReward"]


class NormalisedReward(gym.Wrapper[str, str, str, str]):
    """Reward divided by the task's ``max_score`` (so a whole win sums to 1), with the raw
    reward kept in ``info["raw_reward"]``.

    A task whose ``max_score`` is missing or not positive cannot be normalised; the wrapper
    says so at reset rather than dividing by it.
    """

    def __init__(self, env: gym.Env[str, str]) -> None:
        super().__init__(env)
        self._scale = 1.0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        max_score = info.get("max_score")
        if not isinstance(max_score, int | float) or max_score <= 0:
            raise ValueError(f"NormalisedReward: task {info.get('task_id')!r} reports max_score={max_score!r}; "
                             "it needs a positive max_score (use the raw reward for this env)")
        self._scale = float(max_score)
        return obs, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, float(reward) / self._scale, terminated, truncated, {**info, "raw_reward": float(reward)}
