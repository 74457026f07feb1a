"""ap-gym: text-agent benchmarks as Gymnasium environments, memory designs as policies.

Importing the package registers its environments with Gymnasium, so that
``gymnasium.make("ap_gym/ScienceWorld-v0")`` works after ``import ap_gym``.

The names a user extends ap-gym with (a new env: :class:`TextEnv`, :class:`StartResult`,
:class:`StepResult`, :class:`Grammar`; a new policy or memory design:
:func:`register_policy`, :func:`register_design`, :class:`BasePolicy`,
:class:`AgentConfig`; a run: :class:`RunConfig`, :class:`PolicySpec`) are importable from
here; those of the policies and the protocol load on first use, so ``import ap_gym``
stays as light as registering the envs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

from ap_gym import envs as _envs  # noqa: F401  (registration side effect)
from ap_gym.envs.base import StartResult, StepResult, TextEnv
from ap_gym.errors import (
    APGymError,
    BackboneError,
    EnvInfrastructureError,
    InfrastructureError,
    PromptRejected,
    UnknownTaskError,
)
from ap_gym.rollout import run_episode, run_episodes
from ap_gym.text import Grammar
from ap_gym.types import Episode, Policy, StatefulPolicy, Step, StepTrace, Termination, Usage
from ap_gym.vector import make_vec

__all__ = [
    "APGymError",
    "AgentConfig",
    "BackboneError",
    "BasePolicy",
    "EnvInfrastructureError",
    "Episode",
    "Grammar",
    "InfrastructureError",
    "Policy",
    "PolicySpec",
    "PromptRejected",
    "RunConfig",
    "StartResult",
    "StatefulPolicy",
    "Step",
    "StepResult",
    "StepTrace",
    "Termination",
    "TextEnv",
    "UnknownTaskError",
    "Usage",
    "__version__",
    "make_vec",
    "register_design",
    "register_policy",
    "run_episode",
    "run_episodes",
]

if TYPE_CHECKING:  # what a type checker sees of the lazy names below: the real ones, not Any
    from ap_gym.policies.base import BasePolicy
    from ap_gym.policies.memory_policy import register_design
    from ap_gym.policies.react import AgentConfig
    from ap_gym.policies.registry import register_policy
    from ap_gym.protocol.config import PolicySpec, RunConfig

#: Names loaded on first use: the module each comes from.
_LAZY = {
    "AgentConfig": "ap_gym.policies.react",
    "BasePolicy": "ap_gym.policies.base",
    "register_design": "ap_gym.policies.memory_policy",
    "register_policy": "ap_gym.policies.registry",
    "PolicySpec": "ap_gym.protocol.config",
    "RunConfig": "ap_gym.protocol.config",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'ap_gym' has no attribute {name!r}")
