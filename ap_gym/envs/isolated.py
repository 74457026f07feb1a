"""Game generation in helper processes: native code must not crash the caller.

Making a game runs native code: Inform 7's compiler for TextWorld, fast-downward's
planner (a C++ extension, in-process) for ALFWorld's solvability check. On a fresh machine
this happens in the middle of whatever first needs the game (a test, an evaluation
worker), so a crash there would take that process down with it. :func:`isolated` runs
the work in a helper process (one per calling process, started on first use and kept);
if the helper dies, the work is retried once in a new helper, then reported as an
:class:`~ap_gym.errors.EnvInfrastructureError`. A warm cache never starts a helper.
:func:`isolated_map` runs many items on several helpers (``ap-gym games``).

Helpers are :class:`~ap_gym.processes.Child` processes: they never run the caller's
``__main__`` (a plain script needs no main guard), die with their owner, and are shut
down when the owner exits.
"""

from __future__ import annotations

import atexit
import os
import threading
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any, TypeVar

from ap_gym.errors import EnvInfrastructureError
from ap_gym.processes import Child

__all__ = ["isolated", "isolated_map", "prepare"]

T = TypeVar("T")
_FOLLOWED = ("AP_GYM_CACHE", "XDG_CACHE_HOME", "HOME", "ALFWORLD_DATA")


def _serve(conn: Connection) -> None:
    """In a helper: ``(fn, env, args)`` in, ``("ok", result)`` or ``("error", exception)`` out."""
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        fn, env, args = request
        for key, value in env.items():  # the caller's cache location as it is now
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        try:
            conn.send(("ok", fn(*args)))
        except Exception as e:  # the caller raises it; a crash of native code is EOF instead
            try:
                conn.send(("error", e))
            except Exception:  # an exception that does not pickle
                conn.send(("error", RuntimeError(f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=4)}")))


class _Helpers:
    """This process's helpers, shared by its threads; stopped at exit."""

    def __init__(self) -> None:
        self._idle: list[Child] = []
        self._all: set[Child] = set()
        self._lock = threading.Lock()
        atexit.register(self.stop)

    def take(self) -> Child:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        child = Child(_serve, name="ap-gym game generation")
        with self._lock:
            self._all.add(child)
        return child

    def give_back(self, child: Child) -> None:
        with self._lock:
            self._idle.append(child)

    def discard(self, child: Child) -> None:
        with self._lock:
            self._all.discard(child)
        child.stop(timeout=0)

    def stop(self) -> None:
        with self._lock:
            children, self._idle, self._all = list(self._all), [], set()
        for child in children:
            child.stop(timeout=2)


_HELPERS = _Helpers()


def _request(child: Child, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    child.conn.send((fn, {key: os.environ.get(key) for key in _FOLLOWED}, args))


def _answer(child: Child) -> Any:
    status, value = child.conn.recv()
    if status == "error":
        raise value
    return value


def isolated(fn: Callable[..., T], *args: Any, what: str = "game generation", timeout_s: float = 1800) -> T:
    """``fn(*args)`` in a helper process; see the module docstring."""
    for attempt in (1, 2):
        child = _HELPERS.take()
        try:
            _request(child, fn, args)
            if not child.conn.poll(timeout_s):
                _HELPERS.discard(child)
                raise EnvInfrastructureError(f"{what} took longer than {timeout_s:g} s; the helper was stopped")
            result = _answer(child)
        except (EOFError, OSError) as e:
            code = child.exitcode
            _HELPERS.discard(child)
            if attempt == 2:
                raise EnvInfrastructureError(
                    f"{what} crashed its helper process twice (exit code {code}); run it alone to see why "
                    "(for example `ap-gym games textworld`)") from e
            continue
        except BaseException:
            _HELPERS.give_back(child)  # fn raised: the helper is fine
            raise
        _HELPERS.give_back(child)
        return result
    raise AssertionError("unreachable")


def isolated_map(fn: Callable[[Any], T], items: Sequence[Any], workers: int = 1, *, what: str = "game generation",
                 on_done: Callable[[int], None] | None = None) -> list[T]:
    """``[fn(item) for item in items]``, ``workers`` helpers at a time, in item order; a
    helper that dies is replaced and its item tried once more."""
    results: list[Any] = [None] * len(items)
    queue = list(enumerate(items))
    tries: dict[int, int] = {}
    busy: dict[Connection, tuple[Child, int]] = {}
    try:
        while queue or busy:
            while queue and len(busy) < max(1, workers):
                index, item = queue.pop(0)
                child = _HELPERS.take()
                _request(child, fn, (item,))
                busy[child.conn] = (child, index)
            for conn in wait(list(busy)):
                child, index = busy.pop(conn)  # type: ignore[call-overload]  # wait() types its items loosely
                try:
                    results[index] = _answer(child)
                except (EOFError, OSError) as e:
                    _HELPERS.discard(child)
                    tries[index] = tries.get(index, 0) + 1
                    if tries[index] > 1:
                        raise EnvInfrastructureError(f"{what} of {items[index]} crashed its helper twice") from e
                    queue.insert(0, (index, items[index]))
                    continue
                _HELPERS.give_back(child)
                if on_done is not None:
                    on_done(index)
    finally:
        for child, _ in busy.values():
            _HELPERS.discard(child)
    return results


def prepare(fn: Callable[[Any], Any], items: Sequence[Any], workers: int, what: str,
            progress: Callable[[int, int], None] | None = None) -> int:
    """``fn`` over ``items`` on ``workers`` helpers, reporting ``progress(done, total)``: an
    env's :meth:`~ap_gym.envs.base.TextEnv.prepare_suite` for generated games."""
    done = 0

    def advance(_: int) -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, len(items))

    isolated_map(fn, items, workers, what=what, on_done=advance)
    return len(items)
