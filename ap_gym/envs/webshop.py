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
paper's, inside WebShop's own: a fixed 100-instruction held-out set (goal indices 0-99,
among WebShop's test goals 0-499) and 200 training instructions drawn with a fixed seed
from WebShop's training goals (index 1500 on; 500-1499 are its validation goals), never
one whose target product a held-out instruction targets (:func:`webshop_split`).

Without it, constructing the env raises an error that says how to install it; for a
self-contained shop with the same interface and reward, use ``ap_gym/Shop-v0``.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from ap_gym.envs.base import StartResult, StepResult, TextEnv
from ap_gym.errors import APGymError, EnvInfrastructureError
from ap_gym.text import Grammar

__all__ = ["WEBSHOP_TEST", "WEBSHOP_TRAIN_FROM", "WebShopEnv", "webshop_split"]

#: WebShop's own goal split (its baseline_models' env): test 0-499, validation 500-1499,
#: training from 1500 on.
WEBSHOP_TEST = range(500)
WEBSHOP_TRAIN_FROM = 1500


def webshop_split(goals: Sequence[Mapping[str, Any]], split_seed: int = 0, heldout: int = 100,
                  train: int = 200) -> dict[str, list[int]]:
    """Goal indices of the paper's split inside WebShop's: held-out = the first ``heldout``
    of WebShop's test goals; training = ``train`` of WebShop's training goals, drawn with
    ``split_seed``, leaving out any whose target product (``asin``) a held-out goal targets."""
    if len(goals) <= WEBSHOP_TRAIN_FROM:
        raise APGymError(f"WebShop holds {len(goals)} goals; its training goals start at index "
                         f"{WEBSHOP_TRAIN_FROM}. Use the human-instruction goal file of WebShop's setup.")
    test = list(range(heldout))
    targets = {goals[i].get("asin") for i in test} - {None}
    pool = [i for i in range(WEBSHOP_TRAIN_FROM, len(goals)) if goals[i].get("asin") not in targets]
    random.Random(split_seed).shuffle(pool)
    return {"test": test, "train": sorted(pool[:train])}

INSTALL = (
    "the official WebShop is not installed: ap_gym/WebShop-v0 needs the `web_agent_site` "
    "package and its data, which come from outside the package registries. Clone "
    "https://github.com/princeton-nlp/WebShop, run its setup.sh (-d small or -d all), and "
    "`pip install -e` it (see ap_gym/envs/webshop.py). For a self-contained shop with "
    "WebShop's interface and reward, use ap_gym/Shop-v0."
)


class WebShopEnv(TextEnv):
    """The official WebShop's text environment (see the module docstring)."""

    benchmark = "webshop"
    grammar = Grammar.of({"search", "click"}, bracketed=True, ids=r"\bb0[a-z0-9]{8}\b")

    def __init__(self, *, split: str = "train", split_seed: int = 0, num_products: int | None = None,
                 admissible_commands: bool = True, render_mode: str | None = None) -> None:
        super().__init__(split=split, admissible_commands=admissible_commands, render_mode=render_mode)
        try:
            from web_agent_site.envs import WebAgentTextEnv
        except ImportError as e:
            raise APGymError(INSTALL) from e
        self._env = WebAgentTextEnv(observation_mode="text", num_products=num_products)
        split_ = webshop_split(self._env.server.goals, split_seed)
        self._ids = {s: [f"webshop/{i}" for i in split_[s]] for s in ("train", "test")}

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
            available = self._env.get_available_actions()
            valid = _valid(action, available)
            obs, reward, done, _ = self._env.step(action)
        except Exception as e:
            raise EnvInfrastructureError(f"WebShop failed on {action!r}: {e}") from e
        reward = float(reward or 0.0)
        return StepResult(obs, 100.0 * reward, won=done and reward >= 1.0, lost=done and reward < 1.0,
                          admissible_commands=None if done else self._clicks(), extra={"reward": reward},
                          valid=valid)


def _valid(action: str, available: Mapping[str, Any]) -> bool:
    """WebShop's own rule: a search where the page has a search bar, a click on a clickable."""
    text = action.strip()
    lower = text.lower()
    if lower.startswith("search[") and text.endswith("]"):
        return bool(available.get("has_search_bar"))
    if lower.startswith("click[") and text.endswith("]"):
        return text[6:-1].strip().lower() in {str(c).lower() for c in available.get("clickables", [])}
    return False
