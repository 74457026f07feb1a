"""Game generation in a helper process: native code must not crash the caller.

Making a game runs native code: Inform 7's compiler for TextWorld, fast-downward's
planner (a C++ extension, in-process) for ALFWorld's solvability check. On a fresh machine
this happens in the middle of whatever first needs the game (a test, an evaluation
worker), so a crash there would take that process down with it. :func:`isolated` runs
the work in a spawned helper process (one per calling process, started on first use and
kept); if the helper dies, the work is retried once in a new helper, then reported as an
:class:`~ap_gym.errors.EnvInfrastructureError`. A warm cache never starts a helper.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from ap_gym.errors import EnvInfrastructureError

__all__ = ["isolated"]

T = TypeVar("T")


class _Helper:
    """The helper process, shared by the threads of one process."""

    def __init__(self) -> None:
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

    def pool(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn"))
            return self._pool

    def discard(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)
                self._pool = None


_HELPER = _Helper()
_FOLLOWED = ("AP_GYM_CACHE", "XDG_CACHE_HOME", "HOME")


def _run(fn: Callable[..., T], env: dict[str, str | None], args: tuple[Any, ...]) -> T:
    """In the helper: the caller's cache location as it is now, then the work."""
    import os

    for key, value in env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    return fn(*args)


def isolated(fn: Callable[..., T], *args: Any, what: str = "game generation", timeout_s: float = 1800) -> T:
    """``fn(*args)`` in the helper process; see the module docstring."""
    for attempt in (1, 2):
        try:
            env = {key: os.environ.get(key) for key in _FOLLOWED}
            return _HELPER.pool().submit(_run, fn, env, args).result(timeout_s)
        except BrokenProcessPool as e:
            _HELPER.discard()
            if attempt == 2:
                raise EnvInfrastructureError(
                    f"{what} crashed its helper process twice ({e}); run it alone to see why "
                    "(for example `ap-gym games textworld` or `ap-gym games alfworld`)") from e
        except TimeoutError as e:
            _HELPER.discard()
            raise EnvInfrastructureError(f"{what} took longer than {timeout_s:g} s; the helper was stopped") from e
    raise AssertionError("unreachable")
