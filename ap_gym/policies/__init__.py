"""Policies: the acting agent and one module per memory design, all interchangeable.

``make_policy(name, backbone, **options)`` builds any of them by name (configs, CLI).
"""

from __future__ import annotations

from typing import Any

from ap_gym.policies.abstraction import AbstractionMemory
from ap_gym.policies.anti_persistence import AntiPersistence
from ap_gym.policies.autorefine import AutoRefine
from ap_gym.policies.bandit import MODES, BanditConfig, ModeBandit
from ap_gym.policies.base import BasePolicy
from ap_gym.policies.joint import JointMemory
from ap_gym.policies.memory import MemoryConfig, MemoryPolicy
from ap_gym.policies.react import AgentConfig, NoMemory, ReActAgent
from ap_gym.policies.reflexion import Reflexion
from ap_gym.policies.simple import RandomPolicy, WalkthroughPolicy
from ap_gym.policies.trajectory import TrajectoryMemory

__all__ = [
    "MODES",
    "POLICIES",
    "AbstractionMemory",
    "AgentConfig",
    "AntiPersistence",
    "AutoRefine",
    "BanditConfig",
    "BasePolicy",
    "JointMemory",
    "MemoryConfig",
    "MemoryPolicy",
    "ModeBandit",
    "NoMemory",
    "RandomPolicy",
    "ReActAgent",
    "Reflexion",
    "TrajectoryMemory",
    "WalkthroughPolicy",
    "make_policy",
]

POLICIES: dict[str, type] = {
    "no_memory": NoMemory,
    "trajectory": TrajectoryMemory,
    "abstraction": AbstractionMemory,
    "joint": JointMemory,
    "reflexion": Reflexion,
    "autorefine": AutoRefine,
    "anti_persistence": AntiPersistence,
    "random": RandomPolicy,
    "walkthrough": WalkthroughPolicy,
}


def make_policy(name: str, backbone: Any = None, **options: Any) -> BasePolicy:
    """A policy by registry name; ``options`` are its constructor's keyword arguments.

    Nested option dicts are turned into their config objects (``agent``, ``memory``,
    ``bandit``), so a policy can be described by plain YAML.
    """
    from ap_gym.backbones.base import GenerationConfig

    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}")
    cls = POLICIES[name]
    if name in ("random", "walkthrough"):
        return cls(**options)
    opts = dict(options)
    if isinstance(opts.get("agent"), dict):
        agent = dict(opts["agent"])
        if isinstance(agent.get("generation"), dict):
            agent["generation"] = GenerationConfig(**{**agent["generation"], "stop": tuple(agent["generation"].get("stop", ()))})
        opts["agent"] = AgentConfig(**agent)
    if isinstance(opts.get("memory"), dict):
        mem = dict(opts["memory"])
        if isinstance(mem.get("synthesis"), dict):
            mem["synthesis"] = GenerationConfig(**{**mem["synthesis"], "stop": tuple(mem["synthesis"].get("stop", ()))})
        opts["memory"] = MemoryConfig(**mem)
    if isinstance(opts.get("bandit"), dict):
        opts["bandit"] = BanditConfig(**opts["bandit"])
    if name == "no_memory":
        opts.pop("embedder", None)
        opts.pop("db_path", None)
        opts.pop("seed", None)
        return cls(backbone, opts.pop("agent", None))
    return cls(backbone, **opts)
