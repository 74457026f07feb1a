"""Full-text search over a run: instructions, guidance, actions and observations.

The run index (:mod:`ap_gym.view.index`) never parses an episode's steps, so that a run
opens at once. Search needs them: :class:`SearchIndex` reads each episode line once, in
batches, into an SQLite FTS5 table beside the run index (``search.sqlite``), one document
per instruction, guidance block and step, each pointing at its episode and step. It
catches up as the run index does (episodes past the last one it read), and starts over
when the run index was rebuilt (its episode ids changed). The viewer builds it in a
background thread, so the first page never waits for it; until it is complete, search
answers from what it holds and says how far it got.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
import threading
from pathlib import Path
from typing import Any

import msgspec

from ap_gym.protocol.results import EPISODES, SCHEMA_VERSION, DamagedLine, SchemaError, parse_line

__all__ = ["SearchIndex"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE VIRTUAL TABLE IF NOT EXISTS docs USING fts5(text, episode UNINDEXED, step UNINDEXED, field UNINDEXED,
                                                    tokenize='unicode61');
"""
#: Characters of one document kept in the index: all of any the benchmarks write (a cut at
#: 2,000 found 89 of 93 documents holding "kitchen" and called the count complete); a
#: pathological observation past this is cut, and the cut is a document's end, nothing more.
MAX_CHARS = 1_000_000
_WORD = re.compile(r"\w+", re.UNICODE)


class SearchIndex:
    """The search index of one run index; see the module docstring.

    Args:
        index: the run's :class:`~ap_gym.view.index.RunIndex`.
        batch: episodes read per transaction while catching up.
    """

    def __init__(self, index: Any, batch: int = 2000) -> None:
        self.index = index
        self.path = Path(index.path).with_name("search.sqlite")
        self.batch = batch
        self._lock = threading.Lock()
        self._write = sqlite3.connect(self.path, check_same_thread=False, timeout=30)
        self._write.executescript("PRAGMA journal_mode=WAL;" + _SCHEMA)
        self._read: sqlite3.Connection | None = None
        self._follow()

    def _follow(self) -> None:
        """Read the run index through a connection of our own (the background thread's), and
        start over when the run index was rebuilt: its episode ids mean other episodes."""
        if self._read is not None and self._meta("build") == self.index.build_id:
            return
        if self._read is not None:
            self._read.close()
        self._read = sqlite3.connect(f"file:{self.index.path}?mode=ro", uri=True, check_same_thread=False,
                                     timeout=30)
        self._read.row_factory = sqlite3.Row
        if self._meta("build") != self.index.build_id:
            with self._write:
                self._write.execute("DELETE FROM docs")
                self._write.execute("INSERT OR REPLACE INTO meta VALUES ('build', ?)", (self.index.build_id,))
                self._write.execute("INSERT OR REPLACE INTO meta VALUES ('last', '0')")

    def _meta(self, key: str) -> str | None:
        row = self._write.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else None

    @property
    def last(self) -> int:
        return int(self._meta("last") or 0)

    def status(self) -> dict[str, Any]:
        with self._lock:
            self._follow()
            assert self._read is not None
            total = self._read.execute("SELECT COALESCE(MAX(id), 0) FROM episodes").fetchone()[0]
        done = min(self.last, total)
        return {"indexed": done, "episodes": total, "ready": done >= total}

    def catch_up(self, limit: int | None = None) -> int:
        """Read the episodes the run index holds past the last one indexed (at most
        ``limit``); returns how many were read."""
        with self._lock:
            self._follow()
            assert self._read is not None
            read = 0
            while limit is None or read < limit:
                rows = self._read.execute(
                    "SELECT id, file, offset, length FROM episodes WHERE id > ? ORDER BY id LIMIT ?",
                    (self.last, self.batch)).fetchall()
                if not rows:
                    break
                docs: list[tuple[str, int, int, str]] = []
                with contextlib.ExitStack() as files:
                    handles: dict[str, Any] = {}
                    for r in rows:
                        f = handles.get(r["file"])
                        if f is None:
                            try:
                                f = handles[r["file"]] = files.enter_context(
                                    open(self.index.run / r["file"] / EPISODES, "rb"))  # noqa: SIM115
                            except OSError:
                                continue  # a setting gone since it was indexed: nothing to search in it
                        f.seek(r["offset"])
                        docs += _documents(f.read(r["length"]), r["id"])
                with self._write:
                    self._write.executemany("INSERT INTO docs (text, episode, step, field) VALUES (?,?,?,?)", docs)
                    self._write.execute("INSERT OR REPLACE INTO meta VALUES ('last', ?)", (str(rows[-1]["id"]),))
                read += len(rows)
            return read

    def search(self, query: str, limit: int = 50) -> list[dict[str, Any]]:
        """Documents matching every word of ``query`` (any order), best first: the episode,
        the step (-1 for the instruction and the guidance), the field and a snippet."""
        words = _WORD.findall(query or "")
        if not words:
            return []
        match = " ".join('"' + w.replace('"', "") + '"' for w in words[:12])
        with self._lock:
            rows = self._write.execute(
                "SELECT episode, step, field, snippet(docs, 0, '[', ']', '...', 12) FROM docs WHERE docs MATCH ? "
                "ORDER BY rank LIMIT ?", (match, max(1, min(int(limit), 500)))).fetchall()
        return [{"episode": int(e), "step": int(s), "field": f, "snippet": snip} for e, s, f, snip in rows]

    def count(self, query: str) -> int:
        """How many documents match ``query`` (what :meth:`search` returns the best of)."""
        words = _WORD.findall(query or "")
        if not words:
            return 0
        match = " ".join('"' + w.replace('"', "") + '"' for w in words[:12])
        with self._lock:
            return int(self._write.execute("SELECT COUNT(*) FROM docs WHERE docs MATCH ?", (match,)).fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._write.close()
            if self._read is not None:
                self._read.close()


def documents_at(path: Path, episode: int, offset: int, length: int) -> list[tuple[str, int, int, str]]:
    """The searchable texts of the episode line at ``offset`` of ``path`` (none when it
    cannot be read)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            raw = f.read(length)
    except OSError:
        return []
    return _documents(raw, episode)


class _Message(msgspec.Struct):
    role: Any
    content: Any


class _Trace(msgspec.Struct):
    candidates: list[tuple[Any, float]] | None = None
    messages: list[_Message] | None = None


class _Step(msgspec.Struct):
    action: str
    observation: str
    reward: float
    seconds: float | None = None
    trace: _Trace | None = None


class _Info(msgspec.Struct):
    guidance: Any = None


class _Head(msgspec.Struct):
    instruction: str = ""
    policy_info: _Info | None = None


class _Line(msgspec.Struct):
    schema: int
    head: _Head
    steps: list[_Step]


#: The fast reader's types: only what a document needs, each typed so that whatever the full
#: parse (:func:`~ap_gym.protocol.results.parse_line`) would refuse, it refuses too (then the
#: full parse decides). Fields it does not name are skipped, not built.
_FAST = msgspec.json.Decoder(_Line)


def _documents_full(raw: bytes, episode: int) -> list[tuple[str, int, int, str]]:
    """An episode line's searchable texts, ``(text, episode, step, field)``, through the full
    parse (the reference the fast reader must agree with)."""
    try:
        line = parse_line(raw)
    except (DamagedLine, SchemaError):
        return []
    h = line.header
    out = [(h.instruction[:MAX_CHARS], episode, -1, "instruction")]
    guidance = h.decisions.guidance
    if guidance:
        out.append((guidance[:MAX_CHARS], episode, -1, "guidance"))
    for n, step in enumerate(line.steps):
        out.append((f"{step.action}\n{step.observation[:MAX_CHARS]}", episode, n, "step"))
    return [d for d in out if d[0].strip()]


def _documents(raw: bytes, episode: int) -> list[tuple[str, int, int, str]]:
    """The same texts as :func:`_documents_full`, read by typed decoding of only the fields
    they come from; a line of another schema, or one whose fields are not what the current
    schema writes, goes to the full parse (tests hold the two equal on damaged lines too).

    Only for lines whose head the run index accepted (every line search reads is one of its
    episodes): the head's own checks were made there and are not repeated here."""
    try:
        x = _FAST.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return _documents_full(raw, episode)
    if x.schema != SCHEMA_VERSION:
        return _documents_full(raw, episode)
    info = x.head.policy_info
    out = [(x.head.instruction[:MAX_CHARS], episode, -1, "instruction")]
    if info is not None and isinstance(info.guidance, str) and info.guidance:
        out.append((info.guidance[:MAX_CHARS], episode, -1, "guidance"))
    for n, step in enumerate(x.steps):
        out.append((f"{step.action}\n{step.observation[:MAX_CHARS]}", episode, n, "step"))
    return [d for d in out if d[0].strip()]
