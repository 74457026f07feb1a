"""Policies: the acting agent and one module per memory design, all interchangeable.

Every policy is registered by name with what it needs and supports
(:mod:`ap_gym.policies.registry`); ``make_policy(name, backbone, **options)`` builds any
of them (configs, CLI). A memory policy is composed of the acting agent
(:mod:`~ap_gym.policies.react`), a memory (:mod:`ap_gym.memory`) and a design
(:mod:`~ap_gym.policies.design`); each design is one dataclass registered with
:func:`register_design`, which makes it a policy.
"""

from __future__ import annotations

from ap_gym.policies.abstraction import AbstractionDesign, AbstractionMemory
from ap_gym.policies.anti_persistence import (
    AntiPersistence,
    AntiPersistenceDesign,
    AntiPersistencePolicy,
)
from ap_gym.policies.autorefine import AutoRefine, AutoRefineDesign
from ap_gym.policies.bandit import MODES, BanditConfig, ModeBandit
from ap_gym.policies.base import BasePolicy
from ap_gym.policies.design import Composite, Design, TaskContext
from ap_gym.policies.joint import JointDesign, JointMemory
from ap_gym.policies.memory_policy import MemoryConfig, MemoryPolicy, register_design
from ap_gym.policies.react import AgentConfig, NoMemory, ReActAgent
from ap_gym.policies.reflexion import Reflexion, ReflexionDesign
from ap_gym.policies.registry import (
    OptionError,
    PolicyInfo,
    get_policy,
    make_policy,
    policy_names,
    register_policy,
    spec_of,
)
from ap_gym.policies.rules import ExploreRule, HouseholdRule
from ap_gym.policies.simple import RandomPolicy, WalkthroughPolicy
from ap_gym.policies.trajectory import TrajectoryDesign, TrajectoryMemory

__all__ = [
    "MODES",
    "AbstractionDesign",
    "AbstractionMemory",
    "AgentConfig",
    "AntiPersistence",
    "AntiPersistenceDesign",
    "AntiPersistencePolicy",
    "AutoRefine",
    "AutoRefineDesign",
    "BanditConfig",
    "BasePolicy",
    "Composite",
    "Design",
    "ExploreRule",
    "HouseholdRule",
    "JointDesign",
    "JointMemory",
    "MemoryConfig",
    "MemoryPolicy",
    "ModeBandit",
    "NoMemory",
    "OptionError",
    "PolicyInfo",
    "RandomPolicy",
    "ReActAgent",
    "Reflexion",
    "ReflexionDesign",
    "TaskContext",
    "TrajectoryDesign",
    "TrajectoryMemory",
    "WalkthroughPolicy",
    "get_policy",
    "make_policy",
    "policy_names",
    "register_design",
    "register_policy",
    "spec_of",
]
