"""The viewer's state: the runs it was given, their indexes, search indexes, kept reports and
the live thread that follows a run still being written. Both the server and the static
bundle answer through one :class:`Viewer`."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ap_gym.view.reports as reports
from ap_gym.protocol.results import EPISODES, run_state
from ap_gym.view.index import FILTERS, SORTS, RunIndex, curves
from ap_gym.view.search import SearchIndex
from ap_gym.view.training import find_logs, training_logs

log = logging.getLogger(__name__)

class Viewer:
    """The runs a viewer shows, each with its index, and the answers both modes serve.

    Args:
        runs: run directories; a directory that is not a run but holds training logs (or a
            ``training.jsonl`` itself) is shown on the Training page only.
        rebuild: rebuild their indexes even if current.
        live: keep up with runs still being written, and build the search index, in a
            background thread (``poll_s`` apart); the server's mode. Without it (a bundle,
            a test) :meth:`catch_up` does the same on demand.
    """

    def __init__(self, runs: Sequence[str | Path], rebuild: bool = False, live: bool = False,
                 poll_s: float = 2.0) -> None:
        if not runs:
            raise ValueError("ap-gym view needs at least one run directory")
        self.paths = [Path(r) for r in runs]
        # not a run (no config.json) but training logs: the Training page's; anything else is a run, refused
        # by RunIndex with its reason when it is not one
        for p in self.paths:
            if p.is_file() and not find_logs([p]):
                raise ValueError(f"{p} is neither a run directory nor a training log (training.jsonl): give ap-gym "
                                 "view a run (results/<name>), a folder of runs or logs, or a training log")
        logs_only = [p for p in self.paths if p.is_file() or (not (p / "config.json").exists() and find_logs([p]))]
        self.indexes = [RunIndex(r, rebuild=rebuild) for r in self.paths if r not in logs_only]
        self._reports: dict[int, tuple[str, dict[str, Any]]] = {}
        self._report_locks: dict[int, threading.Lock] = {}
        self._overviews: dict[int, tuple[str, dict[str, Any]]] = {}
        #: held by every answer and by the catch-up: a rebuild swaps an index's connection
        self.lock = threading.RLock()
        self._search: dict[int, SearchIndex] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if live:
            self._thread = threading.Thread(target=self._follow, args=(poll_s,), name="ap-gym view live", daemon=True)
            self._thread.start()

    def _follow(self, poll_s: float) -> None:
        while not self._stop.is_set():
            behind = False
            try:
                self.catch_up(search_batches=1)
                # a search index still reading a run goes on at once (a batch at a time, so that a
                # request waits at most one batch); one that is complete waits for the next poll
                behind = any(not s.status()["ready"] for s in list(self._search.values()))
            except Exception as e:  # a damaged file mid-write: said, and tried again next time
                log.warning("ap-gym view: catching up failed (%s); trying again", e)
            self._stop.wait(0.01 if behind else poll_s)

    def catch_up(self, search_batches: int | None = None) -> bool:
        """Index what the runs wrote since the last look, then extend the search index (by
        at most ``search_batches`` batches; ``None``: all of it). Returns whether new
        episodes arrived."""
        changed = False
        for k in range(len(self.indexes)):
            if not (self.indexes[k].run / "config.json").exists():  # deleted: its pages say so
                continue
            with self.lock:
                if self.indexes[k].refresh():
                    changed = True
            search = self.search_index(k)
            search.catch_up(None if search_batches is None else search_batches * search.batch)
        return changed

    def search_index(self, k: int) -> SearchIndex:
        with self.lock:
            if k not in self._search:
                self._search[k] = SearchIndex(self.index(k))
            return self._search[k]

    def close(self) -> None:
        """Stop following and close every index; a run deleted meanwhile leaves nothing to
        close cleanly, which is said once, never as a traceback."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        closings: list[Any] = [*self._search.values(), *self.indexes]
        for closing in closings:
            try:
                closing.close()
            except Exception as e:  # a deleted run's files: nothing left to lose
                log.warning("ap-gym view: closing %s: %s", getattr(closing, "path", closing), e)

    def status(self, k: int) -> dict[str, Any]:
        """Whether the run is still being written (``running``), ``finished`` or ``stopped``
        (killed: no summary and its process gone; see :func:`run_state`), what the index
        holds, how long ago the run last wrote, and how far the search index got."""
        ix = self.index(k)
        newest = max((p.stat().st_mtime for p in ix.run.glob(f"**/{EPISODES}")), default=None)
        count = ix.conn.execute("SELECT COUNT(*), COUNT(DISTINCT setting) FROM episodes").fetchone()
        state, why = run_state(ix.run)
        return {"live": state == "running", "state": state, "why": why, "episodes": count[0], "settings": count[1],
                "last_write_s": round(time.time() - newest, 1) if newest else None,
                "search": self.search_index(k).status() if k in self._search else None}

    def search(self, k: int, query: str, limit: int = 50) -> dict[str, Any]:
        """Search results with each episode's row (task, policy, seed, iteration)."""
        search = self.search_index(k)
        hits = search.search(query, limit)
        rows = {}
        ids = sorted({h["episode"] for h in hits})
        if ids:
            ix = self.index(k)
            rows = {r["id"]: ix._row(r) for r in ix.conn.execute(
                f"SELECT * FROM episodes WHERE id IN ({','.join('?' * len(ids))})", ids)}  # noqa: S608
        return {"query": query, "status": search.status(), "total": search.count(query),
                "hits": [{**h, "row": rows.get(h["episode"])} for h in hits if h["episode"] in rows]}

    def diff(self, a: int, b: int) -> dict[str, Any]:
        """The config keys (dotted paths) whose values differ between two runs."""
        left, right = _flat(self.index(a).meta.get("config") or {}), _flat(self.index(b).meta.get("config") or {})
        keys = sorted(set(left) | set(right))
        return {"a": self.index(a).run.name, "b": self.index(b).run.name,
                # a side without the key has no "a"/"b" at all (the page says "(absent)"): a None there read
                # as a difference of "null / null"
                "differences": [{"key": key, **({"a": left[key]} if key in left else {}),
                                 **({"b": right[key]} if key in right else {})} for key in keys
                                if left.get(key, _MISSING) != right.get(key, _MISSING)],
                "same": sum(1 for key in keys if left.get(key, _MISSING) == right.get(key, _MISSING))}

    def training(self) -> dict[str, Any]:
        """The training logs under every path given (re-read on each call: a trainer may be
        writing them)."""
        return training_logs(self.paths)

    def export(self, k: int, episode_id: int) -> dict[str, Any]:
        """An episode's whole line, as written (for a download)."""
        return self.index(k).episode(episode_id)["line"]

    def index(self, k: int) -> RunIndex:
        if not 0 <= k < len(self.indexes):
            raise KeyError(f"no run {k}: this viewer shows {len(self.indexes)} run(s)")
        if not (self.indexes[k].run / "config.json").exists():  # deleted (or moved) while the viewer runs
            raise KeyError(f"run {k} ({self.indexes[k].run}) no longer exists: it was deleted or moved; restart "
                           "ap-gym view on where it is now")
        return self.indexes[k]

    def runs(self) -> list[dict[str, Any]]:
        out = []
        for k, ix in enumerate(self.indexes):
            config = ix.meta.get("config") or {}
            backbone = ix.meta.get("backbone")
            listed = config.get("policies")
            policies = listed if isinstance(listed, list) else []
            out.append({"run": k, "path": str(ix.run), "name": ix.run.name,
                        "description": config.get("description"), "version": ix.meta.get("ap_gym_version"),
                        "backbone": backbone.get("identity") if isinstance(backbone, dict) else backbone,
                        "policies": [p.get("label") for p in policies if isinstance(p, dict)]})
        return out

    def overview(self, k: int) -> dict[str, Any]:
        """Settings, curves, costs and filter values: aggregates over every episode, computed
        once per state of the run (the Runs and Episodes pages both open with them)."""
        ix = self.index(k)
        kept = self._overviews.get(k)
        if kept is not None and kept[0] == ix.signature:
            return kept[1]
        settings = ix.settings()
        out = {"settings": settings, "curves": curves(settings), "spent": ix.spent(), "facets": ix.facets(),
               "filters": list(FILTERS), "sorts": list(SORTS)}
        self._overviews[k] = (ix.signature, out)
        return out

    def report(self, k: int) -> dict[str, Any]:
        """The tables of ``ap-gym report`` for this run (the same :class:`~ap_gym.report.Table`
        objects), computed once per state of the run and kept beside its index
        (``report.json``): they read every episode, seconds on a large run, so every later
        open reuses them. Computed outside the viewer's lock: the other pages answer while
        it runs (a 100k-episode run's report held every page for 20 s)."""
        ix = self.index(k)  # a run deleted meanwhile is said to be gone, even with its tables kept
        with self.lock:
            lock = self._report_locks.setdefault(k, threading.Lock())
        with lock:
            key = reports._report_key(ix)
            kept = self._reports.get(k)
            if kept is not None and kept[0] == key:
                return kept[1]
            path = ix.path.with_name("report.json")
            tables = reports._read_report(path, key)
            if tables is None:
                episodes = ix.conn.execute("SELECT COUNT(*) FROM episodes").fetchone()[0]
                tables = reports._report_elsewhere(ix.run) if episodes >= reports.REPORT_CHILD_EPISODES \
                    else reports._report(ix.run)
                reports._write_report(path, key, tables)
            self._reports[k] = (key, tables)
            return tables


_MISSING = object()


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    """A nested config as ``{"a.b.c": value}`` (lists kept whole, policies by label)."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, sub in value.items():
            out.update(_flat(sub, f"{prefix}{key}."))
        return out
    if isinstance(value, list) and value and all(isinstance(v, dict) and "label" in v for v in value):
        return _flat({str(v["label"]): v for v in value}, prefix)
    return {prefix.rstrip("."): value}
