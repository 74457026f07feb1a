"""ap-gym: text-agent benchmarks as Gymnasium environments, memory designs as policies.

Importing the package registers its environments with Gymnasium, so that
``gymnasium.make("ap_gym/ScienceWorld-v0")`` works after ``import ap_gym``.
"""

from __future__ import annotations

__version__ = "0.1.0"

from ap_gym import envs as _envs  # noqa: F401  (registration side effect)
from ap_gym.errors import (
    APGymError,
    BackboneError,
    EnvInfrastructureError,
    InfrastructureError,
    UnknownTaskError,
)
from ap_gym.rollout import run_episode
from ap_gym.types import Episode, Policy, StatefulPolicy, Step, Termination, Usage
from ap_gym.vector import make_vec

__all__ = [
    "APGymError",
    "BackboneError",
    "EnvInfrastructureError",
    "Episode",
    "InfrastructureError",
    "Policy",
    "StatefulPolicy",
    "Step",
    "Termination",
    "UnknownTaskError",
    "Usage",
    "__version__",
    "make_vec",
    "run_episode",
]
