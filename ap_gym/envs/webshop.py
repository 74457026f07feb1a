"""The official WebShop (Yao et al., 2022) as ``ap_gym/WebShop-v0``, when it is installed.

WebShop's products, human instructions and search index are downloaded from outside
the package registries (the PyPI package ``webshop`` is a 5 KB stub), so ap-gym cannot
ship them. To use the real benchmark:

1. ``git clone https://github.com/princeton-nlp/WebShop`` and follow its ``setup.sh``
   (``-d all`` for the 1.18M-product data, or ``-d small`` for 1,000 products), which
   builds the search index;
2. ``pip install -e <WebShop>`` (or put it on ``PYTHONPATH``) so that
   ``web_agent_site`` imports, from the same working directory layout as its setup.

This env then wraps ``web_agent_site.envs.WebAgentTextEnv`` in text mode: actions are
``search[query]`` and ``click[...]``; the page's clickables are the admissible commands;
reward in [0, 1]; success is reward == 1; score = 100 x reward. The split is the
paper's: a fixed 100-instruction held-out set (goal indices 0-99, WebShop's own test
goals) and 200 training instructions drawn with a fixed seed from the rest.

Without it, constructing the env raises an error that says how to install it; for a
self-contained shop with the same interface and reward, use ``ap_gym/Shop-v0``.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from ap_gym.envs.base import StartResult, StepResult, TextEnv
from ap_gym.errors import APGymError, EnvInfrastructureError

__all__ = ["WebShopEnv"]

INSTALL = (
    "the official WebShop is not installed: ap_gym/WebShop-v0 needs the `web_agent_site` "
    "package and its data, which come from outside the package registries. Clone "
    "https://github.com/princeton-nlp/WebShop, run its setup.sh (-d small or -d all), and "
    "`pip install -e` it (see ap_gym/envs/webshop.py). For a self-contained shop with "
    "WebShop's interface and reward, use ap_gym/Shop-v0."
)


class WebShopEnv(TextEnv):
    benchmark = "webshop"

    def __init__(self, *, split: str = "train", split_seed: int = 0, num_products: int | None = None,
                 admissible_commands: bool = True, render_mode: str | None = None) -> None:
        super().__init__(split=split, admissible_commands=admissible_commands, render_mode=render_mode)
        try:
            from web_agent_site.envs import WebAgentTextEnv  # type: ignore[import-not-found]
        except ImportError as e:
            raise APGymError(INSTALL) from e
        self._env = WebAgentTextEnv(observation_mode="text", num_products=num_products)
        n_goals = len(self._env.server.goals)
        rest = list(range(100, n_goals))
        random.Random(split_seed).shuffle(rest)
        self._ids = {"test": [f"webshop/{i}" for i in range(100)],
                     "train": [f"webshop/{i}" for i in sorted(rest[:200])]}

    def _task_ids(self, split: str) -> list[str]:
        return self._ids[split]

    def task_family(self, task_id: str) -> str:
        goal = self._env.server.goals[int(task_id.split("/")[1])]
        return str(goal.get("category", "webshop"))

    def _clicks(self) -> list[str] | None:
        if not self._admissible:
            return None
        available = self._env.get_available_actions()
        return [f"click[{c}]" for c in available.get("clickables", [])]

    def _start(self, task_id: str, options: Mapping[str, Any]) -> StartResult:
        try:
            obs, _ = self._env.reset(session=int(task_id.split("/")[1]))
        except Exception as e:
            raise EnvInfrastructureError(f"WebShop failed on reset: {e}") from e
        return StartResult(obs, self._env.instruction_text, 0.0, 100.0, self._clicks())

    def _advance(self, action: str) -> StepResult:
        try:
            obs, reward, done, _ = self._env.step(action)
        except Exception as e:
            raise EnvInfrastructureError(f"WebShop failed on {action!r}: {e}") from e
        reward = float(reward or 0.0)
        return StepResult(obs, 100.0 * reward, won=done and reward >= 1.0, lost=done and reward < 1.0,
                          admissible_commands=None if done else self._clicks(), extra={"reward": reward})
