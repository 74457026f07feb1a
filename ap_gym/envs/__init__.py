"""ap-gym's benchmarks, one module each, registered with Gymnasium.

Every env follows :mod:`ap_gym.envs.base`. Registration is lazy (entry-point strings),
so importing ap_gym does not start a JVM or import an engine.

Gymnasium's registry is the only table of env ids. Short names (``textworld``,
``scienceworld``, a user's ``vault``) are derived from it here and nowhere else:
:func:`resolve_benchmark` turns a short name or an env id into the env id, and
:func:`short_name` an env id into the name results are filed under.

To add your own environment, subclass :class:`~ap_gym.envs.base.TextEnv` in one file and
register it with ``gymnasium.register``; see README.md, "Add your own environment".
"""

from __future__ import annotations

import gymnasium as gym
from gymnasium.envs.registration import WrapperSpec

from ap_gym.envs.base import (
    ABILITIES,
    PRINTABLE,
    SPLITS,
    StartResult,
    StepResult,
    TextEnv,
    text_env,
    text_space,
)

__all__ = [
    "ABILITIES",
    "DEFAULT_MAX_STEPS",
    "PRINTABLE",
    "SPLITS",
    "StartResult",
    "StepResult",
    "TextEnv",
    "benchmark_names",
    "env_class",
    "resolve_benchmark",
    "short_name",
    "text_env",
    "text_space",
]

#: The paper's step limit: an episode that reaches it is truncated and counts as a failure.
DEFAULT_MAX_STEPS = 50
NAMESPACE = "ap_gym"

# ALFWorld's engine speaks ``move X to Y``; the wrapper accepts ALFWorld < 0.4's ``put X in/on Y``.
_PUT_TO_MOVE = WrapperSpec("PutToMove", "ap_gym.wrappers.action_syntax:PutToMove", {})

for _env_id, _entry, _wrappers in (
    ("ap_gym/ScienceWorld-v0", "ap_gym.envs.scienceworld:ScienceWorldEnv", ()),
    ("ap_gym/TextWorld-v0", "ap_gym.envs.textworld:TextWorldEnv", ()),
    ("ap_gym/ALFWorld-v0", "ap_gym.envs.alfworld:ALFWorldEnv", (_PUT_TO_MOVE,)),
    ("ap_gym/Shop-v0", "ap_gym.envs.shop:ShopEnv", ()),
    ("ap_gym/WebShop-v0", "ap_gym.envs.webshop:WebShopEnv", ()),
):
    # No passive env checker: TextEnv enforces the contract itself (and check_env runs in the
    # tests), and Gymnasium 1.4's checker breaks the first step after a first reset that
    # raised (an unknown task id): "cannot unpack non-iterable NoneType object".
    if _env_id not in gym.registry:
        gym.register(id=_env_id, entry_point=_entry, max_episode_steps=DEFAULT_MAX_STEPS,
                     additional_wrappers=_wrappers, disable_env_checker=True)


def short_name(env_id: str) -> str:
    """The name results are filed under: the env's name, lower case (``ap_gym/TextWorld-v0`` -> ``textworld``)."""
    return gym.spec(env_id).name.lower()


def benchmark_names() -> dict[str, str]:
    """ap-gym's own benchmarks: short name -> env id, from Gymnasium's registry."""
    return {spec.name.lower(): env_id for env_id, spec in gym.registry.items() if spec.namespace == NAMESPACE}


def resolve_benchmark(name: str) -> str:
    """The env id of a short name or an env id registered with Gymnasium (ap-gym's own
    first, then the newest version); the error lists what is registered."""
    if name in gym.registry:
        return name
    matches = sorted((spec for spec in gym.registry.values() if spec.name.lower() == name.lower()),
                     key=lambda s: (s.namespace != NAMESPACE, -(s.version or 0)))
    if matches:
        return matches[0].id
    raise ValueError(
        f"unknown benchmark {name!r}; choose from {', '.join(benchmark_names())}, or an env id registered with "
        "gymnasium.register (a module under the config's imports: can register one)")


def env_class(env_id: str) -> type[TextEnv] | None:
    """The :class:`TextEnv` subclass an env id's entry point names, without building an env
    (no engine starts); ``None`` when the entry point is not a TextEnv class."""
    from gymnasium.envs.registration import load_env_creator

    entry = gym.spec(env_id).entry_point
    creator = load_env_creator(entry) if isinstance(entry, str) else entry
    return creator if isinstance(creator, type) and issubclass(creator, TextEnv) else None
