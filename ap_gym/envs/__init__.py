"""ap-gym's benchmarks, one module each, registered with Gymnasium.

Every env follows :mod:`ap_gym.envs.base`. Registration is lazy (entry-point strings),
so importing ap_gym does not start a JVM or import an engine.

To add your own environment, subclass :class:`~ap_gym.envs.base.TextEnv` in one file and
register it the same way; see README.md, "Add your own environment".
"""

from __future__ import annotations

import gymnasium as gym

from ap_gym.envs.base import PRINTABLE, SPLITS, StartResult, StepResult, TextEnv, text_space

__all__ = ["ENV_IDS", "PRINTABLE", "SPLITS", "StartResult", "StepResult", "TextEnv", "text_space"]

#: The paper's step limit: an episode that reaches it is truncated and counts as a failure.
DEFAULT_MAX_STEPS = 50

ENV_IDS = {
    "ap_gym/ScienceWorld-v0": "ap_gym.envs.scienceworld:ScienceWorldEnv",
    "ap_gym/TextWorld-v0": "ap_gym.envs.textworld:TextWorldEnv",
    "ap_gym/ALFWorld-v0": "ap_gym.envs.alfworld:ALFWorldEnv",
    "ap_gym/Shop-v0": "ap_gym.envs.shop:ShopEnv",
    "ap_gym/WebShop-v0": "ap_gym.envs.webshop:WebShopEnv",
}

for _env_id, _entry in ENV_IDS.items():
    if _env_id not in gym.registry:
        gym.register(
            id=_env_id,
            entry_point=_entry,
            max_episode_steps=DEFAULT_MAX_STEPS,
        )
