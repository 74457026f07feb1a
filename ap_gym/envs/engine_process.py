"""A game engine in a child process of its own, recycled, under a watchdog.

Some engines leak native memory that ``close()`` never returns: ALFWorld's grows about
1.4 MB per reset inside fast-downward's ``pddl2sas`` (C++), roughly 3 GB per worker at the
paper's scale. Python cannot free it, but the operating system can, when the process
that holds it ends. :class:`EngineProcess` runs the engine in a spawned child, talks to
it over a pipe, and replaces the child after ``recycle_every`` games. The same boundary
gives a watchdog (a call that takes longer than ``timeout_s`` kills the child) and
containment (a native crash in the engine ends the child, not the caller); both become
:class:`~ap_gym.errors.EnvInfrastructureError`, and the next game starts a new child.

Starting a child (spawn, imports, ``factory()``) has a budget of its own,
``start_timeout_s``: on a cold machine it can take longer than any one call, and counted
against the first call it made a tight ``timeout_s`` fail the first game of every child.

Every answer carries the seconds the engine spent on it in its own process, so
:meth:`EngineProcess.timings` can say where a step's time goes: in the engine, or at the
boundary (the pipe, the pickling, waking the other process); :meth:`EngineProcess.ping`
times the boundary alone.

The child is a plain object built by ``factory()`` (a picklable, module-level callable);
:meth:`EngineProcess.call` runs one of its methods by name. Arguments and results must
pickle; keep them to strings, lists and dicts. The child is a fresh interpreter
(:class:`~ap_gym.processes.Child`): it never runs the caller's ``__main__``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from ap_gym.errors import EnvInfrastructureError
from ap_gym.processes import Child, die_with_parent

__all__ = ["EngineProcess", "EngineTiming", "die_with_parent"]

_FOLLOWED = ("AP_GYM_CACHE", "XDG_CACHE_HOME", "HOME", "ALFWORLD_DATA")


@dataclass(frozen=True)
class EngineTiming:
    """One engine method's calls so far: how many, the seconds the engine spent on them in
    its own process, and the seconds the caller waited for them (the engine's time plus the
    boundary's)."""

    calls: int
    engine_s: float
    waited_s: float

    @property
    def boundary_s(self) -> float:
        """What the process boundary added: the wait beyond the engine's own time."""
        return self.waited_s - self.engine_s


def _serve(conn: Connection, factory: Callable[[], Any]) -> None:
    """The child: build the engine, then answer ``(method, args)`` until ``None`` or EOF,
    each answer with the seconds the engine spent on it (the empty method: a ping that
    touches no engine)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    try:
        engine = factory()
    except Exception as e:  # said to the parent, which raises it with the engine's name
        conn.send(("error", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=4)}"))
        return
    conn.send(("ready", None))
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            break
        if request is None:
            break
        method, args = request
        started = time.perf_counter()
        try:
            value = getattr(engine, method)(*args) if method else None
            conn.send(("ok", value, time.perf_counter() - started))
        except Exception as e:  # the engine's error goes back to the parent, which decides
            conn.send(("error", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=4)}",
                       time.perf_counter() - started))
    with contextlib.suppress(Exception):
        engine.close()


class EngineProcess:
    """An engine object living in a child process; see the module docstring.

    Args:
        factory: builds the engine in the child (module-level, so that it pickles).
        name: the engine's name in error messages.
        timeout_s: the longest one call may take before the child is killed.
        recycle_every: start a new child after this many calls to :meth:`new_game`
            (0: never).
        start_timeout_s: the longest a new child may take to be ready (spawn, imports,
            ``factory()``), apart from any call's ``timeout_s``.
    """

    def __init__(self, factory: Callable[[], Any], *, name: str, timeout_s: float = 120.0,
                 recycle_every: int = 50, start_timeout_s: float = 300.0) -> None:
        self.factory = factory
        self.name = name
        self.timeout_s = timeout_s
        self.start_timeout_s = start_timeout_s
        self.recycle_every = recycle_every
        self._process: Child | None = None
        self._conn: Connection | None = None
        self._games = 0
        self.started = 0  # children started so far (recycling shows up here)
        self._times: dict[str, tuple[int, float, float]] = {}

    @property
    def pid(self) -> int | None:
        """The child's pid, while one runs (for measuring its memory)."""
        return self._process.pid if self._process is not None and self._process.is_alive() else None

    def new_game(self) -> None:
        """Count a game; recycle the child first when it has served ``recycle_every``."""
        if self._process is not None and self.recycle_every and self._games >= self.recycle_every:
            self.close()
        self._ensure()
        self._games += 1

    def call(self, method: str, *args: Any, timeout_s: float | None = None) -> Any:
        """``engine.method(*args)`` in the child.

        Raises:
            EnvInfrastructureError: the engine raised, crashed or did not answer in time;
                the child is gone afterwards (the next call starts a new one).
        """
        if not method:
            raise ValueError("name the engine's method (the empty name is ping())")
        return self._timed_call(method, args, timeout_s)

    def ping(self) -> float:
        """The seconds of one round trip to the child that does no engine work (started
        first if none runs): the boundary's own cost."""
        self._ensure()
        started = time.perf_counter()
        self._timed_call("", (), None)
        return time.perf_counter() - started

    def timings(self) -> dict[str, EngineTiming]:
        """Per engine method, its calls so far (over every child), the engine's own seconds
        and the caller's wait: where a step's time goes."""
        return {m: EngineTiming(*t) for m, t in self._times.items()}

    def _timed_call(self, method: str, args: tuple[Any, ...], timeout_s: float | None) -> Any:
        conn = self._ensure()
        limit = self.timeout_s if timeout_s is None else timeout_s
        started = time.perf_counter()
        label = method or "a ping"
        status, value, engine_s = self._exchange(
            conn, (method, args), limit,
            timed_out=f"{self.name}'s engine did not answer {label} within {limit:g} s; it was killed "
                      "(call reset() to go on with a new engine)",
            died=f"{self.name}'s engine process died during {label} (exit code {{code}}); "
                 "call reset() to go on with a new engine")
        if method:  # a ping is no engine call
            calls, in_engine, waited = self._times.get(method, (0, 0.0, 0.0))
            self._times[method] = (calls + 1, in_engine + (engine_s or 0.0), waited + time.perf_counter() - started)
        if status == "error":
            self.close(kill=True)
            raise EnvInfrastructureError(f"{self.name}'s engine failed in {method}: {value}")
        return value

    def _ensure(self) -> Connection:
        if self._process is not None and self._process.is_alive() and self._conn is not None:
            return self._conn
        self.close(kill=True)
        process = Child(_serve, self.factory, name=f"ap-gym {self.name} engine",
                        env={key: os.environ.get(key) for key in _FOLLOWED})
        parent = process.conn
        self._process, self._conn, self._games = process, parent, 0
        self.started += 1
        status, value, _ = self._exchange(
            parent, None, self.start_timeout_s,
            timed_out=f"{self.name}'s engine process was not ready within {self.start_timeout_s:g} s of its start; "
                      "it was killed (a machine this loaded needs a larger start_timeout_s)",
            died=f"{self.name}'s engine process died while starting (exit code {{code}}); "
                 "call reset() to try a new one")
        if status != "ready":
            self.close(kill=True)
            raise EnvInfrastructureError(f"{self.name}'s engine could not be built: {value}")
        return parent

    def _exchange(self, conn: Connection, request: tuple[str, tuple[Any, ...]] | None, limit_s: float, *,
                  timed_out: str, died: str) -> tuple[str, Any, float | None]:
        """Send ``request`` (``None``: only wait) and read the child's ``(status, value)``
        and, for a call, the engine's seconds on it (``None`` for the start-up handshake).

        A child that does not answer within ``limit_s``, or whose pipe ends, is killed and
        the caller gets :class:`EnvInfrastructureError` with ``timed_out`` or ``died``
        (``{code}`` there is the child's exit code): a call and the start-up handshake
        fail the same way, so they share this.
        """
        try:
            if request is not None:
                conn.send(request)
            if not conn.poll(limit_s):
                self.close(kill=True)
                raise EnvInfrastructureError(timed_out)
            status, value, *seconds = conn.recv()
        except (EOFError, OSError) as e:  # BrokenPipeError is an OSError
            code = self._process.exitcode if self._process is not None else None
            self.close(kill=True)
            raise EnvInfrastructureError(died.replace("{code}", str(code))) from e
        return status, value, (seconds[0] if seconds else None)

    def close(self, *, kill: bool = False) -> None:
        """End the child: politely (it closes its engine), or at once with ``kill``."""
        process, conn, self._process, self._conn = self._process, self._conn, None, None
        if conn is not None and not kill:
            with contextlib.suppress(Exception):
                conn.send(None)
        if process is not None:
            process.join(0 if kill else 5)
            if process.is_alive():
                process.kill()
                process.join(5)
        if conn is not None:
            conn.close()

    def __del__(self) -> None:
        # at interpreter exit module globals (contextlib among them) may already be None: a
        # plain try keeps the garbage collector's last call silent
        try:  # noqa: SIM105
            self.close(kill=True)
        except Exception:  # nothing to tell anyone at exit
            pass
