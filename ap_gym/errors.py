"""Errors that cross package boundaries.

The split that matters is infrastructure versus task: an ``InfrastructureError``
(engine crash, unreachable backbone) is recorded on the Episode as such and never
counted as a failed task, so every component raises it for failures that are not
the agent's doing.
"""

from __future__ import annotations

__all__ = [
    "APGymError",
    "BackboneError",
    "EnvInfrastructureError",
    "InfrastructureError",
    "PromptRejected",
    "StoreError",
    "UnknownTaskError",
]


class APGymError(Exception):
    """Base class of every error ap-gym raises on purpose."""


class UnknownTaskError(APGymError, KeyError):
    """A task id that the environment's suite does not hold."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable.
        return str(self.args[0]) if self.args else "unknown task"


class InfrastructureError(APGymError):
    """A failure of the machinery, not of the agent: excluded from outcome statistics."""


class EnvInfrastructureError(InfrastructureError):
    """The environment's engine died or hung; the env can be reset afterwards."""


class BackboneError(InfrastructureError):
    """The language model could not be reached or kept failing after retries."""


class PromptRejected(APGymError):
    """The model refused the method's own prompt (a context overflow, a request it calls
    malformed): a failure of the method, recorded as the episode's termination
    ``prompt_rejected`` and counted in every rate (not an infrastructure failure)."""


class StoreError(APGymError):
    """A memory database that cannot be used as it is (corrupt, foreign, newer schema)."""
