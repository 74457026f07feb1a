"""Child processes that never run the caller's ``__main__``, and die with their parent.

ap-gym starts Python children of its own: a helper that generates games, an engine
process per env, worker processes for held-out evaluation. Python's ``spawn`` (and
``forkserver``) start method re-imports the caller's main module in every child, so a
user's plain script without ``if __name__ == "__main__":`` would run itself again in each
of them (the README's "Ten lines of Python" did, and died). ``fork`` copies threads'
locks and native engines mid-flight. So :class:`Child` starts ``python -m
ap_gym.processes``: a fresh interpreter that imports only what its target needs, reached
over a :mod:`multiprocessing` pipe (pickled messages). Targets and their arguments are
pickled by reference, so a target is a module-level function.

A child asks Linux to kill it when its parent dies (the parent-death signal), and checks
that its parent is still the one that started it after asking: a parent killed while
the child was starting leaves no orphan. Linux sends that signal when the *thread* that
forked the child ends, not the process: a child started from a short-lived thread (an env
made in a worker thread, an engine restarted there) was killed with the thread. So every
child is forked by one long-lived thread of the process (:class:`_Spawner`). A killed process cannot remove its temporary
files either, so :func:`owned_tempdir` names the owner in the directory, and the next
process to make one removes those whose owner is gone.
"""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

__all__ = ["Child", "cpu_budget", "die_with_parent", "owned_tempdir", "process_alive"]


def cpu_budget() -> int:
    """The cores this process may use for its math: ``OMP_NUM_THREADS`` where it is set
    (two runs sharing a machine, a test process among others), else the cores it may run on.

    Workers divide this budget among them. More torch threads than free cores does not
    share gracefully: OpenMP threads spin at each barrier, so a process with two threads
    next to another busy process ran a small model ~10x slower than with one (MiniLM: 0.95
    against 0.09 s an embedding here; a test file of tiny-model policies 288 s against 26 s).
    """
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    if value.isdigit() and int(value) > 0:
        return int(value)
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def process_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def process_started(pid: int) -> str | None:
    """When ``pid`` started (clock ticks since boot, from ``/proc``): with the pid, a name for
    one process that a later process reusing the pid does not share. ``None`` when unknown."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def owned_tempdir(prefix: str) -> Path:
    """A new temporary directory named after this host and process; first, the ones of
    this prefix that a process on this host left behind when it was killed are removed.

    A worker killed with its driver (SIGKILL) never reaches its ``finally``; without this,
    each killed run left its workers' scratch memories in the temporary directory.
    """
    host = socket.gethostname().replace("_", "-")
    root = Path(tempfile.gettempdir())
    for stale in root.glob(f"{prefix}{host}_*_*"):
        pid = stale.name[len(prefix) + len(host) + 1:].split("_", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not process_alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{host}_{os.getpid()}_"))


def die_with_parent(parent: int | None = None) -> None:
    """Ask Linux to kill this process when its parent dies (no orphans after a SIGKILL).

    The signal only covers a death after the request: a parent killed while this child was
    still starting (imports take seconds on a loaded machine) would leave an orphan. So
    once the request is in place, a child whose parent is no longer ``parent`` (the pid
    that started it; by default the multiprocessing parent) exits at once.
    """
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if parent is None:
        import multiprocessing as mp

        started_by = mp.parent_process()
        parent = started_by.pid if started_by is not None else None
    if parent is not None and os.getppid() != parent:  # orphaned before the request took effect
        os._exit(1)


class _Spawner:
    """One daemon thread that forks every child of this process: the parent-death signal
    follows the forking thread, and this one lives as long as the process."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[Callable[[], Any], queue.SimpleQueue[tuple[bool, Any]]]] = \
            queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._lock = threading.Lock()

    def run(self, fn: Callable[[], Any]) -> Any:
        with self._lock:
            if self._thread is None or not self._thread.is_alive() or self._pid != os.getpid():  # a forked copy
                self._queue, self._pid = queue.SimpleQueue(), os.getpid()
                self._thread = threading.Thread(target=self._serve, args=(self._queue,), name="ap-gym-spawner",
                                                daemon=True)
                self._thread.start()
            jobs = self._queue
        answer: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()
        jobs.put((fn, answer))
        ok, value = answer.get()
        if not ok:
            raise value
        return value

    @staticmethod
    def _serve(jobs: queue.SimpleQueue[tuple[Callable[[], Any], queue.SimpleQueue[tuple[bool, Any]]]]) -> None:
        while True:
            fn, answer = jobs.get()
            try:
                answer.put((True, fn()))
            except BaseException as e:  # the caller raises it
                answer.put((False, e))


_SPAWNER = _Spawner()


class Child:
    """A Python child process running ``target(conn, *args)``; ``conn`` is this end of its pipe.

    Args:
        target: a module-level function (pickled by reference).
        args: its arguments after the connection (they must pickle).
        name: shown in errors and in ``ps`` (the child's last argument), so a person can
            tell a worker from an engine.
        env: extra environment variables for the child (``None`` values are removed).
    """

    def __init__(self, target: Callable[..., Any], *args: Any, name: str = "ap-gym child",
                 env: dict[str, str | None] | None = None) -> None:
        self.name = name
        self.conn, theirs = Pipe()
        environ = dict(os.environ)
        for key, value in (env or {}).items():
            if value is None:
                environ.pop(key, None)
            else:
                environ[key] = value
        fd = theirs.fileno()
        command = [sys.executable, "-m", "ap_gym._child", str(fd), str(os.getpid()), name]
        self._popen: subprocess.Popen[bytes] = _SPAWNER.run(  # forked by the long-lived thread (see the module)
            lambda: subprocess.Popen(command, pass_fds=(fd,), env=environ, stdin=subprocess.DEVNULL))
        theirs.close()
        with contextlib.suppress(OSError):  # it died at once: exitcode says how, the first recv raises
            self.conn.send((target, args))

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def exitcode(self) -> int | None:
        return self._popen.poll()

    def is_alive(self) -> bool:
        return self._popen.poll() is None

    def join(self, timeout: float | None = None) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._popen.wait(timeout)

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self._popen.kill()

    def stop(self, timeout: float = 5.0) -> None:
        """Close the pipe (a served child ends), wait ``timeout``, then kill; reaps it."""
        with contextlib.suppress(OSError):
            self.conn.close()
        self.join(timeout)
        if self.is_alive():
            self.kill()
            self.join(5)


def _main(argv: list[str]) -> None:
    fd, parent = int(argv[1]), int(argv[2])
    die_with_parent(parent)
    conn = Connection(fd)
    try:
        target, args = conn.recv()
    except (EOFError, OSError):
        return
    target(conn, *args)


if __name__ == "__main__":  # the entry before ap_gym._child: a run started by older code still spawns this
    _main(sys.argv)
