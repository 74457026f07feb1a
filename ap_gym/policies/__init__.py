"""Policies: the acting agent and one module per memory design, all interchangeable."""

from __future__ import annotations

from ap_gym.policies.base import BasePolicy
from ap_gym.policies.react import AgentConfig, NoMemory, ReActAgent
from ap_gym.policies.simple import RandomPolicy, WalkthroughPolicy

__all__ = ["AgentConfig", "BasePolicy", "NoMemory", "RandomPolicy", "ReActAgent", "WalkthroughPolicy"]
