"""The viewer's index of a run: one SQLite file, persisted beside the run, caught up as it grows.

A run of 100,000 episodes is gigabytes of JSONL, mostly prompts. Opening it must not
mean parsing it: the index keeps one row per episode (where it sits in the protocol,
its outcome, its memory decision, and the byte range of its line) and the provenance
links (retrieved record -> source episode, abstraction -> sources, parents, episodes
that saw it). An episode's steps are read from its byte range only when it is opened.

The index lives beside the run (``<run>/.view/index.sqlite``), or in the cache when the
run directory is read-only. It is built once (``ap-gym run`` builds it when a run ends)
and from then on updated incrementally by whoever opens it: each setting's episodes
file is read on from the byte where the index stopped, and a setting's memory is read
again only when its files changed. A full rebuild happens only for an index of another
version, a damaged one, or a run whose file shrank (a resume moved a damaged line
aside); it is written to a temporary file and swapped in, so a reader never sees half
an index. Catch-ups run in one write transaction each, so two viewers of one run never
index the same lines twice.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import math
import os
import re
import sqlite3
import tempfile
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ap_gym.errors import StoreError
from ap_gym.paths import cache_dir, umask_mode
from ap_gym.protocol.results import (
    EPISODES,
    DamagedLine,
    EpisodeHeader,
    load_abstractions,
    load_config,
    load_record_keys,
    misfiled,
    parse_header,
    read_at,
    setting_dirs,
)
from ap_gym.report.stats import wilson

__all__ = ["FILTERS", "SORTS", "RunIndex"]

log = logging.getLogger(__name__)

#: Bump when the index's tables change: an index of another version is rebuilt.
INDEX_VERSION = 11
#: Episode columns a client may filter on (exact match).
FILTERS = ("benchmark", "backbone", "policy", "seed", "iteration", "phase", "task_family", "task_id", "outcome")

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE episodes (
    id INTEGER PRIMARY KEY, setting TEXT NOT NULL, benchmark TEXT NOT NULL, backbone TEXT NOT NULL,
    policy TEXT NOT NULL, seed INTEGER NOT NULL, phase TEXT NOT NULL, iteration INTEGER NOT NULL,
    idx INTEGER NOT NULL, task_id TEXT NOT NULL, task_family TEXT NOT NULL, success INTEGER NOT NULL,
    score REAL, termination TEXT NOT NULL, outcome TEXT NOT NULL, num_steps INTEGER NOT NULL,
    llm_calls INTEGER NOT NULL, tokens INTEGER NOT NULL, mode TEXT, parse_failures INTEGER NOT NULL,
    file TEXT NOT NULL, offset INTEGER NOT NULL, length INTEGER NOT NULL, wall_s REAL NOT NULL
);
CREATE INDEX episodes_where ON episodes (setting, phase, iteration);
CREATE INDEX episodes_task ON episodes (task_id, phase);
CREATE INDEX episodes_key ON episodes (file, idx, phase, iteration);
CREATE TABLE records (setting TEXT NOT NULL, record_id INTEGER NOT NULL, episode_id INTEGER,
                      PRIMARY KEY (setting, record_id));
CREATE TABLE abstractions (
    setting TEXT NOT NULL, id INTEGER NOT NULL, text TEXT NOT NULL, kind TEXT NOT NULL,
    iteration INTEGER NOT NULL, active INTEGER NOT NULL, flagged INTEGER NOT NULL, reasons TEXT NOT NULL,
    sources TEXT NOT NULL, parents TEXT NOT NULL, PRIMARY KEY (setting, id)
);
CREATE TABLE seen (setting TEXT NOT NULL, abstraction_id INTEGER NOT NULL, episode_id INTEGER NOT NULL);
CREATE INDEX seen_by ON seen (setting, abstraction_id);
CREATE TABLE audits (setting TEXT PRIMARY KEY, row TEXT NOT NULL);
CREATE TABLE files (file TEXT PRIMARY KEY, bytes INTEGER NOT NULL, tail TEXT NOT NULL, memory TEXT NOT NULL);
CREATE TABLE rejected (setting TEXT NOT NULL, item TEXT NOT NULL);
"""
#: Episode columns the episode list may be sorted by.
SORTS = ("id", "setting", "policy", "seed", "iteration", "phase", "task_id", "task_family", "success", "score",
         "outcome", "num_steps", "llm_calls", "tokens", "mode", "parse_failures", "wall_s")
#: A condition of the filter builder: (column, operator, value); columns are SORTS' and the backbone's.
CONDITION_OPS = {"eq": "=", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "contains": "LIKE"}
NUMERIC = frozenset({"id", "seed", "iteration", "success", "score", "num_steps", "llm_calls", "tokens",
                     "parse_failures", "wall_s"})
#: Columns the episodes may be grouped by.
GROUPS = (*FILTERS, "mode", "termination", "success")


def _indexed_copy(conn: sqlite3.Connection, rel: str, key: tuple[Any, ...]) -> bool:
    """Whether an episode of ``key`` (benchmark, backbone, policy, seed, phase, iteration,
    idx) is already indexed from file ``rel``: one lookup through ``episodes_key``."""
    benchmark, backbone, policy, seed, phase, iteration, idx = key
    return conn.execute("SELECT 1 FROM episodes WHERE file=? AND idx=? AND phase=? AND iteration=? AND benchmark=? "
                        "AND backbone=? AND policy=? AND seed=? LIMIT 1",
                        (rel, idx, phase, iteration, benchmark, backbone, policy, seed)).fetchone() is not None


def parse_conditions(value: Any) -> list[tuple[str, str, Any]]:
    """The filter builder's conditions: a JSON list of ``[column, op, value]`` (the URL's
    ``where``), each checked: a column of :data:`SORTS` (or ``backbone``), an operator of
    :data:`CONDITION_OPS`, a number for a numeric column."""
    if value in (None, "", []):
        return []
    try:
        items = json.loads(value) if isinstance(value, str) else value
    except RecursionError:
        raise ValueError("where= is nested too deeply: give a flat list of [column, op, value]") from None
    except ValueError as e:
        raise ValueError(f"where= is not JSON ({e}); give a list of [column, op, value]") from None
    if not isinstance(items, list):
        raise ValueError("where= must be a JSON list of [column, op, value]")
    if len(items) > MAX_CONDITIONS:
        raise ValueError(f"where= holds {len(items)} conditions; at most {MAX_CONDITIONS} are taken")
    out = []
    for item in items:
        if not (isinstance(item, list) and len(item) == 3 and all(isinstance(x, str | int | float) for x in item)):
            raise ValueError(f"condition {item!r} is not [column, op, value]")
        column, op, raw = str(item[0]), str(item[1]), item[2]
        if column not in (*SORTS, "backbone"):
            raise ValueError(f"unknown column {column!r} in a condition; columns: {', '.join((*SORTS, 'backbone'))}")
        if op not in CONDITION_OPS:
            raise ValueError(f"unknown operator {op!r}; operators: {', '.join(CONDITION_OPS)}")
        if op == "contains":
            out.append((column, op, str(raw)))
            continue
        if column in NUMERIC:
            try:
                raw = float(raw)
            except OverflowError:
                raw = math.inf  # refused below, with the limit
            except ValueError:
                raise ValueError(f"{column} is numeric: {str(raw)[:40]!r} is not a number") from None
            if not math.isfinite(raw) or abs(raw) > MAX_NUMBER:
                raise ValueError(f"{column}: {str(item[2])[:40]!r} is not a finite number of at most {MAX_NUMBER:g} "
                                 "in size (NaN matches no row)")
        out.append((column, op, raw if column in NUMERIC else str(raw)))
    return out


#: The most conditions a query takes, and the largest number a condition compares with.
MAX_CONDITIONS = 64
MAX_NUMBER = 1e15


def _whole_filter(key: str, value: Any) -> int:
    """A seed or iteration filter: a whole number SQLite can hold, or a clear 400."""
    text = str(value).strip()
    if not re.fullmatch(r"-?\d{1,15}", text):
        raise ValueError(f"{key} is a whole number of at most 15 digits, not {text[:40]!r}")
    return int(text)


def _clause(filters: Mapping[str, Any], conditions: Sequence[tuple[str, str, Any]] = ()) -> tuple[str, list[Any]]:
    """SQL ``WHERE`` of exact filters and builder conditions (columns from fixed lists, values
    as parameters)."""
    where, args = [], []
    for key, value in filters.items():
        if key not in FILTERS:
            raise ValueError(f"unknown filter {key!r}; filters are {', '.join(FILTERS)}")
        if value in (None, ""):
            continue
        where.append(f"{key} = ?")
        args.append(_whole_filter(key, value) if key in ("seed", "iteration") else str(value))
    for column, op, value in conditions:
        if op == "contains":  # a substring, case-insensitive; % and _ in it are literal
            where.append(f"CAST({column} AS TEXT) LIKE ? ESCAPE '\\'")
            args.append("%" + str(value).replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%")
        else:
            where.append(f"{column} {CONDITION_OPS[op]} ?")
            args.append(value)
    return ("WHERE " + " AND ".join(where)) if where else "", args


def _mean_ci(total: float, squares: float, n: int, low: float | None = None, high: float | None = None
             ) -> tuple[float | None, tuple[float, float] | None]:
    """Mean and 95 % normal interval from sums (the index aggregates in SQL), kept inside the
    quantity's range ``[low, high]`` (a normal interval on three scores of 0, 0 and 2 reached
    below 0: 0.67 [-0.64, 1.97])."""
    if n <= 0:
        return None, None
    mean = total / n
    if n < 2:
        return mean, None
    var = max(0.0, (squares - n * mean * mean) / (n - 1))
    half = 1.96 * math.sqrt(var / n)
    lo, hi = mean - half, mean + half
    return mean, (max(lo, low) if low is not None else lo, min(hi, high) if high is not None else hi)


def _row_of(h: EpisodeHeader, rel: str, start: int, length: int) -> tuple[Any, ...]:
    """An episode header's row of the index."""
    mode = h.decisions.mode
    return (h.setting, h.benchmark, h.backbone or "", h.policy, h.seed, h.phase, h.iteration, h.index, h.task_id,
            h.task_family, int(h.success), h.score, h.termination.value, h.outcome, h.num_steps,
            h.usage.llm_calls, h.tokens, mode if isinstance(mode, str) else None, h.parse_failures, rel, start, length,
            h.wall_time_s)


def _signature(run: Path) -> str:
    """What the index was built from: every result file's path, size and mtime (the episodes,
    and each setting's memory files, :func:`_memory_stamp`)."""
    parts = [f"v{INDEX_VERSION}"]
    for directory in setting_dirs(run):
        path = directory / EPISODES
        with contextlib.suppress(OSError):
            st = path.stat()
            parts.append(f"{path.relative_to(run).as_posix()}:{st.st_size}:{st.st_mtime_ns}")
        parts.append(_memory_stamp(directory))
    for name in ("config.json", "summary.json", "labeller.json"):
        with contextlib.suppress(OSError):
            st = (run / name).stat()
            parts.append(f"{name}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _memory_stamp(directory: Path) -> str:
    """What a setting's memory was read from: every file of its directory but the episodes
    (the store, its WAL, the recorded worlds, the benchmark's description), size and mtime."""
    parts = []
    with contextlib.suppress(OSError):
        for path in sorted(directory.iterdir()):
            if path.name == EPISODES or not path.is_file():
                continue
            with contextlib.suppress(OSError):
                st = path.stat()
                parts.append(f"{path.name}:{st.st_size}:{st.st_mtime_ns}")
    return "\n".join(parts)


#: Bytes before where the index stopped that a catch-up checks are still there, the same at
#: the file's start, and how many evenly spaced blocks of how many bytes in between.
TAIL_BYTES = 4096
SAMPLES, SAMPLE_BYTES = 64, 512


def _tail(path: Path, end: int) -> str:
    """A digest of the indexed region of ``path`` (its first ``end`` bytes): the bytes just
    before ``end``, its first bytes and 64 evenly spaced blocks between. A catch-up reads on
    from ``end`` only if it is unchanged: a file edited or rewritten before that point, not
    appended to, has other byte offsets, and its index is rebuilt. Only the tail was checked
    once, so a same-length edit further back kept a stale row for good; a sample is a few
    dozen reads however large the run, and an edit that misses every sampled byte still goes
    unseen (each line's own bytes are read again when an episode is opened)."""
    try:
        with open(path, "rb") as f:
            parts = []
            for start, size in ((0, TAIL_BYTES), *((end * k // (SAMPLES + 1), SAMPLE_BYTES)
                                                  for k in range(1, SAMPLES + 1)),
                                (max(0, end - TAIL_BYTES), TAIL_BYTES)):
                f.seek(start)
                parts.append(f.read(max(0, min(size, end - start))))
            return hashlib.sha256(b"\0".join(parts)).hexdigest()
    except OSError:
        return ""


def _randomise_exposure(meta: Mapping[str, Any]) -> float:
    """The run config's ``audit.randomise_exposure`` (0 when absent or unreadable)."""
    audit = (meta.get("config") or {}).get("audit") if isinstance(meta.get("config"), dict) else None
    value = audit.get("randomise_exposure") if isinstance(audit, dict) else None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _index_path(run: Path) -> Path:
    """``<run>/.view/index.sqlite`` when the run is writable, else a cache file named after it."""
    local = run / ".view"
    with contextlib.suppress(OSError):
        local.mkdir(exist_ok=True)
        target = local / "index.sqlite"
        if os.access(local, os.W_OK) and (target.is_file() or not target.exists()):
            return target
        if target.exists():  # a directory (or anything not a file) in the index's place: the cache instead
            log.warning("%s is not a file; the view index goes to the cache instead", target)
    name = hashlib.sha256(str(run.resolve()).encode()).hexdigest()[:16]
    return cache_dir("view", name) / "index.sqlite"


def disk_full(error: BaseException) -> bool:
    """Whether ``error`` is a full disk (as the OS or SQLite says it)."""
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return isinstance(error, sqlite3.OperationalError) and "disk is full" in str(error)


def _memory_path(run: Path) -> Path:
    """Where an index goes when the disk is full: a RAM-backed tmpfs where there is one."""
    shm = Path("/dev/shm")
    root = shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())
    name = hashlib.sha256(str(run.resolve()).encode()).hexdigest()[:16]
    directory = root / f"ap-gym-view-{os.getuid() if hasattr(os, 'getuid') else 0}" / name
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    return directory / "index.sqlite"


@dataclass(frozen=True)
class Page:
    """One page of episode rows and how many rows match in all."""

    rows: list[dict[str, Any]]
    total: int
    page: int
    per_page: int


class RunIndex:
    """The index of one run directory (built or reused on construction)."""

    def __init__(self, run: str | Path, rebuild: bool = False) -> None:
        self.run = Path(run)
        self.meta = load_config(self.run)  # refuses a directory that is not a run
        self.path = _index_path(self.run)
        try:
            self._prepare(rebuild)
        except (OSError, sqlite3.OperationalError) as e:
            if not disk_full(e):
                raise
            self._to_memory(e)
            try:
                self._prepare(True)
            except (OSError, sqlite3.OperationalError) as again:
                raise StoreError(f"cannot index {self.run}: the disk is full ({e}), and so is {self.path.parent} "
                                 f"({again}); free some space and open it again") from None

    def _to_memory(self, error: BaseException) -> None:
        """The index is a cache: on a full disk it is kept in memory for this viewer (a
        tmpfs, where there is one), with a warning, instead of a raw SQLite error."""
        with contextlib.suppress(sqlite3.Error, AttributeError):
            self.conn.close()
        fallback = _memory_path(self.run)
        log.warning("%s: the disk is full (%s); the view index is kept in memory at %s for this viewer only "
                    "(free some space to keep it between viewers)", self.path, error, fallback)
        self.path = fallback

    def _prepare(self, rebuild: bool) -> None:
        signature = _signature(self.run)
        if rebuild or not self._usable():
            self._build(signature)
        self._open()
        if self.signature != signature:  # written since the index was: read on from where it stopped
            try:
                self.refresh()
            except sqlite3.DatabaseError as e:  # damaged since: it is only a cache
                log.warning("%s: the view index is damaged (%s); rebuilding it", self.path, e)
                self.conn.close()
                self._build(_signature(self.run))
                self._open()

    def close(self) -> None:
        self.conn.close()

    def _open(self) -> None:
        self.conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False)
        self.conn.row_factory = sqlite3.Row
        self.signature = self.conn.execute("SELECT value FROM meta WHERE key='signature'").fetchone()[0]
        build = self.conn.execute("SELECT value FROM meta WHERE key='build'").fetchone()
        self.build_id = build[0] if build else ""

    def refresh(self) -> bool:
        """Catch up with a run that was written since the last look (still being written, or
        resumed since the index was made): index the lines appended since then, reading each
        file from where the index stopped (never the whole file again), any new setting, and
        again the memory of a setting whose memory files changed. A file that shrank (a
        resume quarantined a damaged line), whose bytes before that point changed (edited,
        not appended to) or that is gone means a rebuild. Returns whether anything new was
        indexed."""
        try:
            return self._refresh()
        except (OSError, sqlite3.OperationalError) as e:
            if not disk_full(e):
                raise
            self._to_memory(e)
            self._prepare(True)
            return True

    def _refresh(self) -> bool:
        current = _signature(self.run)
        if current == self.signature:
            return False
        conn = sqlite3.connect(self.path, timeout=60)
        try:
            conn.execute("BEGIN IMMEDIATE")  # one catch-up at a time: another viewer's is waited for, then seen
            indexed = {f: (b, t, m) for f, b, t, m in conn.execute("SELECT file, bytes, tail, memory FROM files")}
            todo: list[tuple[Path, int, str]] = []
            found, rewritten = set(), False
            for directory in setting_dirs(self.run):
                rel = directory.relative_to(self.run).as_posix()
                try:
                    size = (directory / EPISODES).stat().st_size
                except OSError:
                    continue
                found.add(rel)
                before, tail, stamp = indexed.get(rel, (0, "", None))
                if size < before or (before and _tail(directory / EPISODES, before) != tail):
                    rewritten = True
                    break
                memory = _memory_stamp(directory)
                if size > before or memory != stamp:
                    todo.append((directory, before, memory))
            if rewritten or set(indexed) - found:  # rewritten or removed, not appended to: built anew
                conn.rollback()
                conn.close()
                self.conn.close()
                self._build(current)
                self._open()
                return True
            for directory, before, memory in todo:
                self._index_setting(conn, directory, before, memory)
            conn.execute("UPDATE meta SET value=? WHERE key='signature'", (current,))
            conn.commit()
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.rollback()
            raise
        finally:
            conn.close()
        self.signature = current
        return bool(todo)

    # -- building ---------------------------------------------------------------------
    def _usable(self) -> bool:
        """Whether an index of this version is there to catch up (else: build one)."""
        if not self.path.exists():
            return False
        try:
            conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
            try:
                meta = dict(conn.execute("SELECT key, value FROM meta"))
                conn.execute("SELECT file, bytes, tail, memory FROM files LIMIT 1").fetchall()
            finally:
                conn.close()
        except sqlite3.DatabaseError:
            return False  # a damaged index is only a cache: rebuild it
        return meta.get("version") == str(INDEX_VERSION) and "signature" in meta

    def _build(self, signature: str) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".index.", suffix=".tmp")
        os.chmod(fd, umask_mode())  # as the user's umask allows, not mkstemp's owner-only
        os.close(fd)
        try:
            conn = sqlite3.connect(tmp)
            conn.executescript("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;" + _SCHEMA)
            with conn:
                for directory in setting_dirs(self.run):
                    self._index_setting(conn, directory, 0, _memory_stamp(directory))
                conn.execute("INSERT INTO meta VALUES ('signature', ?)", (signature,))
                conn.execute("INSERT INTO meta VALUES ('version', ?)", (str(INDEX_VERSION),))
                conn.execute("INSERT INTO meta VALUES ('build', ?)", (os.urandom(8).hex(),))
            conn.close()
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def _index_setting(self, conn: sqlite3.Connection, directory: Path, start: int, memory: str) -> None:
        """Index the complete lines of a setting's episodes file from byte ``start`` (0: all;
        later, where the last catch-up stopped), then its memory's provenance and audit
        (``memory``: the stamp of the memory files read, :func:`_memory_stamp`)."""
        rel = directory.relative_to(self.run).as_posix()
        path = directory / EPISODES
        rows, seen, rejected = [], [], []
        damaged, copies, end = 0, 0, start
        # a line written twice (an edit, a second writer) counts once, as every reader counts it
        # (ap_gym.protocol.results.episode_key): the first, also across catch-ups
        # (a catch-up looks each new line's key up in the index, not every key of the file)
        keys: set[tuple[Any, ...]] = set()
        indexed = conn.execute("SELECT 1 FROM episodes WHERE file=? LIMIT 1", (rel,)).fetchone() is not None
        with open(path, "rb") as f:
            f.seek(start)
            offset = start
            for raw in f:
                if not raw.endswith(b"\n"):
                    break  # a line still being written: the next catch-up reads it whole
                line_start, offset = offset, offset + len(raw)
                end = offset
                if not raw.strip():
                    continue
                try:
                    header = parse_header(raw.rstrip(b"\r\n"))
                except DamagedLine:  # a damaged line: resuming the run moves it aside
                    damaged += 1
                    continue
                if misfiled(header, rel):  # a line of another setting than its directory's
                    damaged += 1
                    continue
                row = _row_of(header, rel, line_start, len(raw))
                key = tuple(row[1:8])
                if key in keys or (indexed and _indexed_copy(conn, rel, key)):
                    copies += 1
                    continue
                keys.add(key)
                decided = header.decisions
                rows.append(row)
                seen.append(list(decided.abstractions_in_prompt))
                rejected += [{"family": header.task_family, "item": r} for r in decided.rejected_abstractions]
        if damaged or copies:
            log.warning("%s: %d damaged line(s) and %d copies of an earlier line left out of the viewer", path,
                        damaged, copies)
        first = conn.execute("SELECT COALESCE(MAX(id), 0) FROM episodes").fetchone()[0] + 1
        conn.executemany("INSERT INTO episodes (setting, benchmark, backbone, policy, seed, phase, iteration, idx, "
                         "task_id, task_family, success, score, termination, outcome, num_steps, llm_calls, tokens, "
                         "mode, parse_failures, file, offset, length, wall_s) VALUES "
                         "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
        conn.executemany("INSERT INTO seen VALUES (?,?,?)",
                         [(row[0], a, first + n) for n, (row, ids) in enumerate(zip(rows, seen, strict=True))
                          for a in ids])
        conn.execute("INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?)", (rel, end, _tail(path, end), memory))
        known = conn.execute("SELECT setting FROM episodes WHERE file=? LIMIT 1", (rel,)).fetchone()
        setting = known[0] if known else rel
        conn.executemany("INSERT INTO rejected VALUES (?, ?)", [(setting, json.dumps(r)) for r in rejected])
        self._index_memory(conn, directory, setting)

    def _index_memory(self, conn: sqlite3.Connection, directory: Path, setting: str) -> None:
        """A setting's record -> episode links, abstractions and audit (replaced whole: the
        memory changes as the run goes on)."""
        for table in ("records", "abstractions", "audits"):
            conn.execute(f"DELETE FROM {table} WHERE setting=?", (setting,))  # noqa: S608 (fixed names)
        train = {(task, it): i for i, task, it in conn.execute(
            "SELECT id, task_id, iteration FROM episodes WHERE setting=? AND phase='train' ORDER BY id", (setting,))}
        try:
            keys = load_record_keys(directory)
            stored = load_abstractions(directory)
        except StoreError as e:  # the viewer shows the episodes; the memory is said unreadable
            log.warning("%s: memory not readable (%s); provenance links left out", setting, e)
            conn.execute("INSERT INTO audits VALUES (?, ?)", (setting, json.dumps({"error": str(e)})))
            return
        conn.executemany("INSERT INTO records VALUES (?,?,?)",
                         [(setting, rid, train.get((task, it))) for rid, task, it in keys])
        rejected = [json.loads(r) for (r,) in conn.execute("SELECT item FROM rejected WHERE setting=?", (setting,))]
        any_seen = conn.execute("SELECT 1 FROM seen WHERE setting=? LIMIT 1", (setting,)).fetchone()
        if stored or rejected or any_seen:
            self._index_abstractions(conn, directory, setting, stored, rejected)

    def _index_abstractions(self, conn: sqlite3.Connection, directory: Path, setting: str, stored: list[Any],
                            rejected: list[Any]) -> None:
        """Label every stored abstraction and audit the setting as ``ap-gym report`` does
        (:func:`~ap_gym.report.audit.audit_setting`: rejected invocations count in q, alpha, eta)."""
        from ap_gym.report.audit import audit_setting

        result = audit_setting(directory, [(r["family"], r["item"]) for r in rejected], setting)
        if result is None:
            return
        record_episode = dict(conn.execute("SELECT record_id, episode_id FROM records WHERE setting=?", (setting,)))
        for a in result.stored:
            label = result.labels[a.id]
            conn.execute("INSERT INTO abstractions VALUES (?,?,?,?,?,?,?,?,?,?)",
                         (setting, a.id, a.text, a.kind, a.iteration, int(a.active), int(label.flagged),
                          json.dumps(list(label.reasons)),
                          json.dumps([{"record": i, "episode": record_episode.get(i)} for i in a.sources]),
                          json.dumps(list(a.parents))))
        row = result.row
        conn.execute("INSERT INTO audits VALUES (?, ?)", (setting, json.dumps({
            "abstractions": row.abstractions, "flagged": row.flagged, "q": _finite(row.q), "alpha": _finite(row.alpha),
            "eta": _finite(row.eta), "invocations": row.invocations, "exposed_invocations": row.exposed_invocations,
            "flagged_exposed_invocations": row.flagged_exposed_invocations,
            "admitted_invocations": row.admitted_invocations, "labeller": result.labeller,
            # the observational, family-stratified and randomised gaps side by side ([value, low, high])
            "estimates": {name: [_finite(e.value), _finite(e.low), _finite(e.high)]
                          for name, e in row.estimates().items() if name in ("gap", "stratified_gap", "randomised_gap")},
            "randomised_units": sum(1 for u in row.units if u.reachable and u.coin in ("expose", "withhold")),
            # whether the run randomised exposure is the run's config and its recorded coins, never the count
            # of usable units (a randomised run whose tasks retrieved no flagged abstraction has none)
            "randomise_exposure": _randomise_exposure(self.meta),
            "coins": sum(1 for u in row.units if u.coin in ("expose", "withhold"))})))

    # -- reading ----------------------------------------------------------------------
    def settings(self) -> list[dict[str, Any]]:
        """Per setting and iteration, held-out episodes: success with its Wilson interval,
        score, LLM calls and tokens with normal intervals (infrastructure failures counted
        apart, never as failures)."""
        out = []
        query = """SELECT setting, benchmark, backbone, policy, seed, iteration, COUNT(*) AS episodes,
                   SUM(outcome='infrastructure_failure') AS infra,
                   SUM(success * (outcome!='infrastructure_failure')) AS successes,
                   SUM(CASE WHEN outcome!='infrastructure_failure' THEN COALESCE(score, 0) END) AS s1,
                   SUM(CASE WHEN outcome!='infrastructure_failure' THEN COALESCE(score, 0) * COALESCE(score, 0) END) AS s2,
                   MIN(CASE WHEN outcome!='infrastructure_failure' THEN COALESCE(score, 0) END) AS smin,
                   MAX(CASE WHEN outcome!='infrastructure_failure' THEN COALESCE(score, 0) END) AS smax,
                   SUM(CASE WHEN outcome!='infrastructure_failure' THEN llm_calls END) AS c1,
                   SUM(CASE WHEN outcome!='infrastructure_failure' THEN llm_calls * llm_calls END) AS c2,
                   SUM(CASE WHEN outcome!='infrastructure_failure' THEN tokens END) AS t1,
                   SUM(CASE WHEN outcome!='infrastructure_failure' THEN 1.0 * tokens * tokens END) AS t2,
                   SUM(CASE WHEN outcome!='infrastructure_failure' THEN num_steps END) AS n1
                   FROM episodes WHERE phase='eval' GROUP BY setting, iteration ORDER BY setting, iteration"""
        for r in self.conn.execute(query):
            n = r["episodes"] - r["infra"]
            # a score's range: from the lowest to the highest this group reached (each benchmark has its own
            # scale, and ScienceWorld's goes below 0); calls and tokens cannot be negative
            score, score_ci = _mean_ci(r["s1"] or 0.0, r["s2"] or 0.0, n, min(0.0, r["smin"] or 0.0),
                                       max(0.0, r["smax"] or 0.0))
            calls, calls_ci = _mean_ci(r["c1"] or 0, r["c2"] or 0, n, 0.0)
            tokens, tokens_ci = _mean_ci(r["t1"] or 0, r["t2"] or 0, n, 0.0)
            out.append({"setting": r["setting"], "benchmark": r["benchmark"], "backbone": r["backbone"],
                        "policy": r["policy"], "seed": r["seed"], "iteration": r["iteration"],
                        "episodes": r["episodes"], "infrastructure_failures": r["infra"], "valid": n,
                        "successes": r["successes"], "success_rate": (r["successes"] / n) if n else None,
                        "success_ci": wilson(r["successes"], n), "score": score, "score_ci": score_ci,
                        "llm_calls": calls, "llm_calls_ci": calls_ci, "tokens": tokens, "tokens_ci": tokens_ci,
                        "steps": (r["n1"] / n) if n else None})
        return out

    def spent(self) -> list[dict[str, Any]]:
        """Per setting and iteration, the LLM calls, tokens and episode-seconds (each episode's
        own wall time, summed: compute spent, not the clock of a parallel run) its training
        episodes had spent by the end of that iteration (cumulative; the held-out episodes
        measure, they do not buy learning): the x axes that compare methods at equal cost."""
        out: list[dict[str, Any]] = []
        totals: defaultdict[str, list[float]] = defaultdict(lambda: [0, 0, 0.0])
        query = """SELECT setting, iteration, SUM(CASE WHEN phase='train' THEN llm_calls ELSE 0 END) AS calls,
                   SUM(CASE WHEN phase='train' THEN tokens ELSE 0 END) AS tokens,
                   SUM(CASE WHEN phase='train' THEN wall_s ELSE 0 END) AS wall
                   FROM episodes GROUP BY setting, iteration ORDER BY setting, iteration"""
        for r in self.conn.execute(query):
            total = totals[r["setting"]]
            total[0] += r["calls"] or 0
            total[1] += r["tokens"] or 0
            total[2] += r["wall"] or 0.0
            out.append({"setting": r["setting"], "iteration": r["iteration"], "train_llm_calls": total[0],
                        "train_tokens": total[1], "train_wall_s": round(total[2], 3)})
        return out

    def facets(self) -> dict[str, list[Any]]:
        """The distinct values of every filter (for the filter menus)."""
        out = {}
        for column in FILTERS:
            out[column] = [r[0] for r in self.conn.execute(
                f"SELECT DISTINCT {column} FROM episodes ORDER BY {column}")]  # noqa: S608 (column from FILTERS)
        out["eval_task_id"] = [r[0] for r in self.conn.execute(
            "SELECT DISTINCT task_id FROM episodes WHERE phase='eval' ORDER BY task_id")]
        return out

    def episodes(self, filters: Mapping[str, Any], page: int = 0, per_page: int = 50, sort: str = "id",
                 descending: bool = False, where: Any = None) -> Page:
        """Episode rows matching every filter (exact values) and every condition of ``where``
        (:func:`parse_conditions`), sorted by a column of :data:`SORTS` (ties by id), a page at
        a time: filtering, sorting and paging happen in SQLite, so a 100k-episode run costs
        the same as a small one."""
        if sort not in SORTS:
            raise ValueError(f"unknown sort column {sort!r}; sortable: {', '.join(SORTS)}")
        clause, args = _clause(filters, parse_conditions(where))
        total = self.conn.execute(f"SELECT COUNT(*) FROM episodes {clause}", args).fetchone()[0]
        per_page = max(1, min(int(per_page), 500))
        order = f"{sort} {'DESC' if descending else 'ASC'}, id" if sort != "id" else f"id {'DESC' if descending else ''}"
        rows = self.conn.execute(f"SELECT * FROM episodes {clause} ORDER BY {order} LIMIT ? OFFSET ?",  # noqa: S608
                                 [*args, per_page, max(0, int(page)) * per_page]).fetchall()
        return Page([self._row(r) for r in rows], total, page, per_page)

    def groups(self, by: Sequence[str], filters: Mapping[str, Any], where: Any = None) -> list[dict[str, Any]]:
        """The matching episodes grouped by ``by`` (columns of :data:`GROUPS`): per group its
        count, infrastructure failures, successes with the Wilson interval of the rate, and
        the mean steps, LLM calls and tokens (infrastructure failures left out of the rate and
        the means, as everywhere in ap-gym)."""
        bad = [b for b in by if b not in GROUPS]
        if bad or not by:
            raise ValueError(f"cannot group by {', '.join(bad) or 'nothing'}; group by any of {', '.join(GROUPS)}")
        clause, args = _clause(filters, parse_conditions(where))
        cols = ", ".join(by)
        query = f"""SELECT {cols}, COUNT(*) AS episodes, SUM(outcome='infrastructure_failure') AS infra,
                    SUM(success * (outcome!='infrastructure_failure')) AS successes,
                    AVG(CASE WHEN outcome!='infrastructure_failure' THEN num_steps END) AS steps,
                    AVG(CASE WHEN outcome!='infrastructure_failure' THEN llm_calls END) AS llm_calls,
                    AVG(CASE WHEN outcome!='infrastructure_failure' THEN tokens END) AS tokens
                    FROM episodes {clause} GROUP BY {cols} ORDER BY {cols}"""  # noqa: S608 (columns from GROUPS)
        out = []
        for r in self.conn.execute(query, args):
            n = r["episodes"] - r["infra"]
            out.append({"key": {b: (bool(r[b]) if b == "success" else r[b]) for b in by}, "episodes": r["episodes"],
                        "infrastructure_failures": r["infra"], "successes": r["successes"],
                        "success_rate": r["successes"] / n if n else None, "success_ci": wilson(r["successes"], n),
                        "steps": r["steps"], "llm_calls": r["llm_calls"], "tokens": r["tokens"]})
        return out

    def matrix(self, benchmark: str | None = None, iteration: int | None = None,
               split_seeds: bool = False) -> dict[str, Any]:
        """Held-out success per task (rows) and policy (columns) at one iteration (default:
        each setting's last), seeds pooled or one cell per seed: which tasks each design
        wins and loses, side by side. Infrastructure failures are left out of a cell."""
        benchmarks = [r[0] for r in self.conn.execute("SELECT DISTINCT benchmark FROM episodes ORDER BY benchmark")]
        benchmark = benchmark or (benchmarks[0] if benchmarks else "")
        if benchmark not in benchmarks:
            raise ValueError(f"no benchmark {benchmark!r} in this run; it has {', '.join(benchmarks)}")
        last = dict(self.conn.execute("SELECT setting, MAX(iteration) FROM episodes WHERE phase='eval' AND benchmark=? "
                                      "GROUP BY setting", (benchmark,)))
        cells: dict[str, dict[str, dict[str, int]]] = defaultdict(lambda: defaultdict(lambda: {"n": 0, "won": 0}))
        policies: set[str] = set()
        for r in self.conn.execute("SELECT setting, policy, seed, iteration, task_id, success, outcome FROM episodes "
                                   "WHERE phase='eval' AND benchmark=?", (benchmark,)):
            wanted = iteration if iteration is not None else last.get(r["setting"])
            if r["iteration"] != wanted or r["outcome"] == "infrastructure_failure":
                continue
            column = f"{r['policy']} seed{r['seed']}" if split_seeds else r["policy"]
            policies.add(column)
            cell = cells[r["task_id"]][column]
            cell["n"] += 1
            cell["won"] += int(r["success"])
        columns = sorted(policies)
        return {"benchmark": benchmark, "benchmarks": benchmarks, "iteration": iteration, "columns": columns,
                "rows": [{"task_id": task, "cells": {c: by[c] for c in columns if c in by}}
                         for task, by in sorted(cells.items())]}

    def all_rows(self) -> Iterator[dict[str, Any]]:
        for r in self.conn.execute("SELECT * FROM episodes ORDER BY id"):
            yield self._row(r)

    @staticmethod
    def _row(r: sqlite3.Row) -> dict[str, Any]:
        row = {k: r[k] for k in r.keys() if k not in ("file", "offset", "length")}  # noqa: SIM118
        row["success"] = bool(row["success"])
        return row

    def episode(self, episode_id: int) -> dict[str, Any]:
        """The whole episode line (read from its byte range), with its memory decision's
        links resolved: each retrieved record's source episode, each abstraction's text."""
        r = self.conn.execute("SELECT * FROM episodes WHERE id=?", (int(episode_id),)).fetchone()
        if r is None:
            raise KeyError(f"no episode {episode_id} in {self.run}")
        try:
            line = read_at(self.run / r["file"] / EPISODES, r["offset"], r["length"])
        except (OSError, DamagedLine) as e:
            raise ValueError(f"episode {episode_id}'s line in {r['file']}/{EPISODES} is damaged ({e}); resuming the "
                             "run moves it to episodes.jsonl.bad and keeps every valid line") from None
        decided = line.header.decisions
        retrieved = list(decided.retrieved_records)
        links = dict(self.conn.execute(
            f"SELECT record_id, episode_id FROM records WHERE setting=? AND record_id IN ({','.join('?' * len(retrieved))})",
            [r["setting"], *retrieved]).fetchall()) if retrieved else {}
        shown = list(decided.abstractions_in_prompt)
        texts = {row["id"]: {"id": row["id"], "text": row["text"], "flagged": bool(row["flagged"])}
                 for row in self.conn.execute(
                     f"SELECT id, text, flagged FROM abstractions WHERE setting=? AND id IN ({','.join('?' * len(shown))})",
                     [r["setting"], *shown])} if shown else {}
        return {"id": r["id"], "row": self._row(r), "line": line.to_dict(),
                "retrieved": [{"record": i, "episode": links.get(i)} for i in retrieved],
                "abstractions": [texts.get(i, {"id": i, "text": None, "flagged": False}) for i in shown]}

    def provenance(self) -> list[dict[str, Any]]:
        """Per setting with abstractions: each abstraction (flag, reasons, sources with their
        episodes, parents, the episodes that saw it) and the setting's audit (q, alpha, eta)."""
        out = []
        audits = {s: json.loads(row) for s, row in self.conn.execute("SELECT setting, row FROM audits")}
        seen: dict[tuple[str, int], list[int]] = defaultdict(list)
        for s, a, e in self.conn.execute("SELECT setting, abstraction_id, episode_id FROM seen ORDER BY episode_id"):
            seen[(s, a)].append(e)
        by_setting: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in self.conn.execute("SELECT * FROM abstractions ORDER BY setting, id"):
            by_setting[row["setting"]].append({
                "id": row["id"], "text": row["text"], "kind": row["kind"], "iteration": row["iteration"],
                "active": bool(row["active"]), "flagged": bool(row["flagged"]), "reasons": json.loads(row["reasons"]),
                "sources": json.loads(row["sources"]), "parents": json.loads(row["parents"]),
                "seen_by": seen.get((row["setting"], row["id"]), [])})
        for setting in sorted(set(by_setting) | set(audits)):
            out.append({"setting": setting, "audit": audits.get(setting), "abstractions": by_setting.get(setting, [])})
        return out


def _finite(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def curves(settings: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Learning curves: per benchmark@backbone panel, per policy, the held-out success per
    iteration as the mean over seeds (with the seeds' own rates, for the hover)."""
    groups: dict[tuple[str, str], dict[int, list[Mapping[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for s in settings:
        panel = s["benchmark"] + (f" @ {s['backbone']}" if s["backbone"] else "")
        groups[(panel, s["policy"])][s["iteration"]].append(s)
    panels: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for (panel, policy), by_it in sorted(groups.items()):
        points = []
        for it, rows in sorted(by_it.items()):
            rates = [r["success_rate"] for r in rows if r["success_rate"] is not None]
            successes, valid = sum(r["successes"] or 0 for r in rows), sum(r["valid"] for r in rows)
            points.append({"iteration": it, "success": (sum(rates) / len(rates)) if rates else None,
                           # the pooled held-out episodes' Wilson interval (the seeds' episodes together)
                           "interval": wilson(successes, valid), "successes": successes, "valid": valid,
                           "seeds": {str(r["seed"]): r["success_rate"] for r in rows},
                           "episodes": sum(r["episodes"] for r in rows),
                           "llm_calls": _avg([r["llm_calls"] for r in rows])})
        panels[panel].append({"policy": policy, "points": points})
    return [{"panel": p, "series": s} for p, s in sorted(panels.items())]


def _avg(xs: Sequence[float | None]) -> float | None:
    known = [x for x in xs if x is not None]
    return sum(known) / len(known) if known else None
