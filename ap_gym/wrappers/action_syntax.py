"""Action-syntax adapters: accept the commands other harnesses and prompts use.

ALFWorld 0.4 renamed ``put X in/on Y`` to ``move X to Y``, which silently broke other
projects' prompts and results. The engine ap-gym ships (alfworld 0.4.2) speaks
``move X to Y``; :func:`put_to_move` rewrites the old forms, and :class:`PutToMove`
applies it to any env.
"""

from __future__ import annotations

import re

import gymnasium as gym

__all__ = ["PutToMove", "put_to_move"]

_PUT = re.compile(r"^\s*put\s+(.+?)\s+(?:in/on|in|on|into|onto)\s+(.+?)\s*$", re.I)


def put_to_move(action: str) -> str:
    """``put mug 1 in/on coffeemachine 1`` -> ``move mug 1 to coffeemachine 1``; others unchanged."""
    if not isinstance(action, str):
        return action
    match = _PUT.match(action)
    return f"move {match.group(1)} to {match.group(2)}" if match else action


class PutToMove(gym.ActionWrapper[str, str, str], gym.utils.RecordConstructorArgs):
    """Accept ``put X in/on Y`` (ALFWorld < 0.4) as well as ``move X to Y``."""

    def __init__(self, env: gym.Env[str, str]) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.ActionWrapper.__init__(self, env)

    def action(self, action: str) -> str:
        return put_to_move(action)
