"""A vector env that survives a sub-env's failure: an error, then a fresh start on reset.

Gymnasium's async vector env shuts a worker down when its env raises (its pipe is closed
and set to ``None``), so the next ``reset`` failed with ``AttributeError: 'NoneType'
object has no attribute 'send'``; a worker process that died (killed, out of memory)
surfaced as a raw ``BrokenPipeError`` or ``EOFError``. :class:`RecoveringVectorEnv`
changes one thing: any failure of the vector env reaches the caller as
:class:`~ap_gym.errors.EnvInfrastructureError` (the rollout's infrastructure failure,
never a task's), and the next ``reset`` builds the vector env anew, as the sync one recovers.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from gymnasium.vector import VectorEnv, VectorWrapper

from ap_gym.errors import EnvInfrastructureError

__all__ = ["RecoveringVectorEnv"]


class RecoveringVectorEnv(VectorWrapper):
    """A vector env made by ``build``, made again on ``reset`` after a failure.

    Args:
        build: makes the vector env (the same sub-envs each time).
    """

    def __init__(self, build: Callable[[], VectorEnv]) -> None:
        self._build = build
        super().__init__(build())
        self._broken: str | None = None

    def _lost_a_worker(self) -> bool:
        """Whether the async env shut a worker down (it does after the worker's env raised)."""
        pipes = getattr(self.env.unwrapped, "parent_pipes", None) or []
        return any(p is None for p in pipes)

    def _failed(self, error: BaseException) -> BaseException:
        """``error`` as an infrastructure failure when it broke the vector env, else as it is
        (a wrong number of actions is the caller's error, and breaks nothing)."""
        if isinstance(error, EnvInfrastructureError | BrokenPipeError | EOFError | ConnectionError) \
                or self._lost_a_worker():
            self._broken = f"{type(error).__name__}: {error}"
            if isinstance(error, EnvInfrastructureError):
                return error
            return EnvInfrastructureError(f"the vector env failed ({self._broken}); the next reset starts it anew")
        return error

    def reset(self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None) -> Any:
        if self._broken is not None:
            with contextlib.suppress(Exception):  # its workers may be gone already
                self.env.close(terminate=True)
            self.env = self._build()
            self._broken = None
        try:
            return self.env.reset(seed=seed, options=options)  # type: ignore[arg-type]  # a seed per env is valid
        except (Exception, EOFError) as e:
            failure = self._failed(e)
            if failure is e:
                raise
            raise failure from e

    def step(self, actions: Any) -> Any:
        if self._broken is not None:
            raise EnvInfrastructureError(f"the vector env failed ({self._broken}); reset it before stepping")
        try:
            return self.env.step(actions)
        except (Exception, EOFError) as e:
            failure = self._failed(e)
            if failure is e:
                raise
            raise failure from e
