"""Non-LLM policies: floors for results and end-to-end checks for the wrappers.

* :class:`RandomPolicy` picks uniformly among the admissible commands.
* :class:`WalkthroughPolicy` replays the benchmark's gold path (ScienceWorld's gold
  action sequence, TextWorld's walkthrough, ALFWorld's expert plan). Replaying it must
  win every task: that is the check that the wrappers lose nothing.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from ap_gym.policies.base import BasePolicy
from ap_gym.policies.registry import register_policy
from ap_gym.seeding import derived_rng

__all__ = ["RandomPolicy", "WalkthroughPolicy"]


@register_policy("random", needs=("seed",))
class RandomPolicy(BasePolicy):
    """Uniform choice among ``info["admissible_commands"]``.

    Args:
        seed: with the task id, seeds each episode's generator, so an episode is the
            same whatever ran before it (resume, another worker count, another order).
        fallback: actions to draw from when the env gives no admissible commands.
    """

    reset_options = {"admissible_commands": True}

    def __init__(self, seed: int | None = 0, fallback: Sequence[str] = ("look", "inventory", "look around")):
        super().__init__()
        self.seed = seed
        self.rng = random.Random(seed)
        self.fallback = list(fallback)

    def _begin(self, observation: str, info: Mapping[str, Any]) -> None:
        self.rng = derived_rng("random", self.seed, info.get("task_id", ""))

    def act(self, observation: str, info: Mapping[str, Any]) -> str:
        options = list(info.get("admissible_commands") or self.fallback)
        action = self.rng.choice(options)
        self.record_step()
        return action


@register_policy("walkthrough", needs=("walkthrough",))
class WalkthroughPolicy(BasePolicy):
    """Replays ``info["walkthrough"]``, which envs supply when reset with ``walkthrough=True``.

    When the gold path is exhausted before the episode ends it sends ``look``; a
    replay that does not win is then visible as a loss or a step-limit truncation.
    """

    reset_options = {"walkthrough": True}

    def __init__(self) -> None:
        super().__init__()
        self._plan: list[str] = []

    def _begin(self, observation: str, info: Mapping[str, Any]) -> None:
        plan = info.get("walkthrough")
        if plan is None:
            raise ValueError(
                "WalkthroughPolicy needs info['walkthrough']: reset the env with "
                "options={'walkthrough': True} (run_episode does this for you)"
            )
        self._plan = list(plan)
        self.decisions["walkthrough_length"] = len(self._plan)

    def act(self, observation: str, info: Mapping[str, Any]) -> str:
        self.record_step()
        return self._plan.pop(0) if self._plan else "look"
