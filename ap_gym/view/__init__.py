"""``ap-gym view``: runs, episodes, memory decisions and provenance in a browser.

Why a memory design helped or hurt is in its episodes; this module makes them readable.
:class:`~ap_gym.view.index.RunIndex` indexes a run once (cached beside it);
:func:`create_app` serves a read-only JSON API and the single-page app in
``ap_gym/view/static`` (plain JavaScript, uPlot for the curves, vendored: no network at
view time); :func:`write_static` writes the same app with its data as a bundle that opens
from disk (``file://``) or from any web server.

Both modes answer the same questions through one client: the server pages and filters
episodes in SQLite; the bundle carries the episode rows and filters them in the page,
and keeps each episode's steps in a file of its own, read when it is opened.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ap_gym.protocol.results import EPISODES, run_state, setting_dirs
from ap_gym.view.app import STATIC, boot_script
from ap_gym.view.index import FILTERS, SORTS, RunIndex, curves
from ap_gym.view.search import SearchIndex
from ap_gym.view.training import find_logs, training_logs

log = logging.getLogger(__name__)

__all__ = ["RunIndex", "Viewer", "create_app", "serve", "write_static"]


def create_app(viewer: Viewer, **options: Any) -> Any:
    """The read-only FastAPI app over ``viewer`` (see :mod:`ap_gym.view.app`: ``api_key``,
    ``hosts``)."""
    from ap_gym.view.app import create_app as create

    return create(viewer, **options)

#: The file that marks a directory as a bundle ``write_static`` may overwrite.
BUNDLE_MARK = ".ap-gym-bundle"


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
            key = _report_key(ix)
            kept = self._reports.get(k)
            if kept is not None and kept[0] == key:
                return kept[1]
            path = ix.path.with_name("report.json")
            tables = _read_report(path, key)
            if tables is None:
                episodes = ix.conn.execute("SELECT COUNT(*) FROM episodes").fetchone()[0]
                tables = _report_elsewhere(ix.run) if episodes >= REPORT_CHILD_EPISODES else _report(ix.run)
                _write_report(path, key, tables)
            self._reports[k] = (key, tables)
            return tables


#: Runs of at least this many episodes have their report computed in a child process: it
#: reads every episode (20 s for 100k), and in the viewer's process it held the GIL from the
#: pages (a filtered episodes page took 1.9 s instead of 0.2 s meanwhile).
REPORT_CHILD_EPISODES = 5000


def _report_elsewhere(run: Path) -> dict[str, Any]:
    """:func:`_report` in a child process (:class:`~ap_gym.processes.Child`: dies with this one)."""
    from ap_gym.processes import Child

    child = Child(_report_child, str(run), name="ap-gym view report")
    try:
        status, value = child.conn.recv()
    except (EOFError, OSError):
        raise RuntimeError(f"the process computing the report of {run} died (exit code {child.exitcode}); "
                           "ap-gym report <run> computes the same tables and says why") from None
    finally:
        child.stop()
    if status != "ok":
        raise RuntimeError(f"computing the report of {run} failed: {value}")
    return value


def _report_child(conn: Any, run: str) -> None:
    try:
        conn.send(("ok", _report(Path(run))))
    except Exception as e:  # said to the parent, which raises it where the report was asked for
        conn.send(("error", f"{type(e).__name__}: {e}"))


def _report(run: Path) -> dict[str, Any]:
    from ap_gym.report import collect, reading_notes, report_tables

    tables = report_tables(collect([run]))
    # the notes too: without them the viewer's copy showed †, ‡ and § unexplained (issue 43)
    return {"notes": reading_notes(),
            "tables": [{"name": t.name, "title": t.title, "header": t.header, "intro": t.intro,
                        "rows": [[_cell(v) for v in row] for row in t.rows]} for t in tables if t.header]}


def _report_key(ix: RunIndex) -> str:
    """What a kept report was computed from: the run's files (the index's signature, and every
    setting's memory files: the audit reads the recorded worlds too) and the code that reads
    them (the report's modules and the results reader: a changed ap-gym computes it anew)."""
    import hashlib

    import ap_gym.protocol.results as results
    import ap_gym.report as report
    from ap_gym.view.index import _memory_stamp

    parts = [ix.signature]
    parts += [f"{d.relative_to(ix.run).as_posix()}|{_memory_stamp(d)}" for d in setting_dirs(ix.run)]
    for source in [*sorted(Path(report.__file__).parent.glob("*.py")), Path(results.__file__)]:
        with contextlib.suppress(OSError):
            st = source.stat()
            parts.append(f"{source.name}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _read_report(path: Path, key: str) -> dict[str, Any] | None:
    try:
        kept = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return kept.get("tables") if isinstance(kept, dict) and kept.get("key") == key else None


def _write_report(path: Path, key: str, tables: dict[str, Any]) -> None:
    """Kept whole or not at all (a temporary file swapped in); a cache that cannot be written
    costs the next open its time, nothing else."""
    from ap_gym.paths import umask_mode

    tmp = path.with_name(f".report.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        tmp.write_text(json.dumps({"key": key, "tables": tables}))
        os.chmod(tmp, umask_mode())
        os.replace(tmp, path)
    except OSError as e:
        log.info("ap-gym view: the report of %s is not kept (%s)", path.parent, e)
        tmp.unlink(missing_ok=True)


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


def _cell(value: Any) -> Any:
    """A table cell as JSON: NaN and infinities are not numbers JSON can carry."""
    import math

    return None if isinstance(value, float) and not math.isfinite(value) else value


def serve(runs: Sequence[str | Path], host: str = "127.0.0.1", port: int = 0, open_browser: bool = False,
          rebuild: bool = False, api_key: str | None = None) -> None:
    """Index ``runs`` and serve the viewer until interrupted; port 0 takes a free port.

    Beyond loopback the viewer needs ``api_key`` (runs hold whatever the agents saw), and
    the address printed carries it once (``/?key=...``); on loopback, requests must be
    addressed to a loopback name.
    """
    import socket
    import webbrowser

    import uvicorn

    from ap_gym.net import is_loopback

    if not is_loopback(host) and not api_key:
        raise ValueError(f"--host {host} serves the runs beyond this machine: give a key (--api-key or "
                         "AP_GYM_VIEW_KEY), or bind to 127.0.0.1 and reach it through an SSH tunnel")
    viewer = Viewer(runs, rebuild=rebuild, live=True)
    try:
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        sock.bind((host, port))
        sock.listen(128)  # connections queue from now on: the printed address answers at once
        url = f"http://{host}:{sock.getsockname()[1]}/" + ("?key=<your key>" if api_key else "")
        print(f"ap-gym view: {url}  ({len(runs)} run(s); Ctrl-C stops)", flush=True)
        if open_browser:
            webbrowser.open(url.replace("<your key>", api_key or ""))
        from ap_gym.view.app import create_app

        app = create_app(viewer, api_key=api_key, hosts=None if not is_loopback(host) else
                         ("localhost", "127.0.0.1", "::1", "[::1]", host.lower()))
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        _run_until_interrupted(server, sock)
    except KeyboardInterrupt:  # Ctrl-C: a line, not asyncio's traceback
        pass
    finally:
        viewer.close()


def _run_until_interrupted(server: Any, sock: Any) -> None:
    """Run uvicorn with a Ctrl-C that always stops it.

    Between ``server.run`` and uvicorn's own handlers, asyncio's runner installs one of its
    own that cancels the serving task; on a loaded machine a Ctrl-C once left the viewer
    serving on after its address was printed. With a handler of ours in place, asyncio
    installs none, and a Ctrl-C at any moment asks the server to exit, which it checks
    before and while it serves."""
    import signal
    import threading

    def stop(_sig: int, _frame: Any) -> None:
        server.should_exit = True

    if threading.current_thread() is not threading.main_thread():
        server.run(sockets=[sock])
        return
    previous = signal.signal(signal.SIGINT, stop)
    try:
        server.run(sockets=[sock])
    finally:
        signal.signal(signal.SIGINT, previous)


def _put(path: Path, key: str, payload: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(payload, separators=(",", ":")).replace("</", "<\\/")
    path.write_text(f"APGYM_PUT({json.dumps(key)},{text});\n", encoding="utf-8")


#: A bundle packs episodes into files of at least CHUNK_MIN episodes and at most
#: MAX_CHUNKS files in all: with a run's pages, assets and its own five files, a bundle of
#: one run of any size stays under 50 files (with 40 chunks a 100k-episode run had 55; with
#: 32, once search and its library joined the bundle, 51).
CHUNK_MIN, MAX_CHUNKS = 500, 28


def _write_chunks(ix: RunIndex, base: Path, k: int, chunk: int) -> None:
    """Episode ``i`` (ids from 1) goes to ``episodes-{(i - 1) // chunk}.js``, one
    ``APGYM_PUT`` per episode, streamed (a chunk is never held whole in memory)."""
    files: dict[int, Any] = {}
    try:
        for (episode_id,) in ix.conn.execute("SELECT id FROM episodes ORDER BY id"):
            n = (episode_id - 1) // chunk
            if n not in files:
                for f in files.values():
                    f.close()
                files = {n: open(base / f"episodes-{n}.js", "w", encoding="utf-8")}  # noqa: SIM115
            text = json.dumps(ix.episode(episode_id), separators=(",", ":")).replace("</", "<\\/")
            files[n].write(f"APGYM_PUT({json.dumps(f'run/{k}/episode/{episode_id}')},{text});\n")
    finally:
        for f in files.values():
            f.close()


#: Characters of searchable text a bundle carries per run (instructions, guidance, actions
#: and observations, each observation cut as the server's index cuts it); past it the
#: page's search says how many episodes it covers.
SEARCH_CHARS = 40_000_000


def _search_documents(ix: RunIndex) -> dict[str, Any]:
    """The documents the page's search (MiniSearch) indexes: those of the server's search."""
    from ap_gym.view.search import documents_at

    docs: list[tuple[str, int, int, str]] = []
    chars = indexed = 0
    total = ix.conn.execute("SELECT COUNT(*) FROM episodes").fetchone()[0]
    for episode_id, file, offset, length in ix.conn.execute("SELECT id, file, offset, length FROM episodes ORDER BY id"):
        found = documents_at(ix.run / file / EPISODES, episode_id, offset, length)
        chars += sum(len(d[0]) for d in found)
        if chars > SEARCH_CHARS:
            break
        docs += found
        indexed += 1
    return {"docs": docs, "indexed": indexed, "episodes": total}


def write_static(runs: Sequence[str | Path], out: str | Path, rebuild: bool = False) -> Path:
    """Write the viewer and the data of ``runs`` to ``out`` (``out/index.html`` opens from disk)."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / BUNDLE_MARK).is_file())):
        # only an empty directory or a bundle this function wrote: nothing else is overwritten
        raise FileExistsError(f"{out} exists and is not a viewer bundle (no {BUNDLE_MARK}); name a new or "
                              "empty directory")
    viewer = Viewer(runs, rebuild=rebuild)
    try:
        if (out / "data").is_dir():
            shutil.rmtree(out / "data")
        out.mkdir(parents=True, exist_ok=True)
        (out / BUNDLE_MARK).write_text("written by ap-gym view --static; ap-gym may replace this directory's "
                                       "index.html, static/ and data/\n")
        shutil.copytree(STATIC, out / "static", dirs_exist_ok=True)
        shutil.copy(STATIC / "index.html", out / "index.html")
        data = out / "data"
        data.mkdir()
        total = sum(ix.conn.execute("SELECT COUNT(*) FROM episodes").fetchone()[0] for ix in viewer.indexes)
        chunk = max(CHUNK_MIN, -(-total // MAX_CHUNKS))  # episodes per file: at most MAX_CHUNKS files in all
        (data / "boot.js").write_text(boot_script("static", chunk=chunk))
        _put(data / "runs.js", "runs", viewer.runs())
        _put(data / "training.js", "training", viewer.training())
        for k, ix in enumerate(viewer.indexes):
            base = data / f"run{k}"
            _put(base / "overview.js", f"run/{k}/overview", viewer.overview(k))
            _put(base / "report.js", f"run/{k}/report", viewer.report(k))
            _put(base / "provenance.js", f"run/{k}/provenance", ix.provenance())
            _put(base / "config.js", f"run/{k}/config", ix.meta.get("config"))
            _put(base / "episodes.js", f"run/{k}/episodes", list(ix.all_rows()))
            _write_chunks(ix, base, k, chunk)
            _put(base / "search.js", f"run/{k}/search", _search_documents(ix))
    finally:
        viewer.close()
    return out / "index.html"
