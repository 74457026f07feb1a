"""The report tables the viewer shows beside a run: ``ap-gym report``'s, computed once per
run's files and code, kept beside the index, and for a large run computed in a child
process so the pages stay quick meanwhile."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

from ap_gym.protocol.results import setting_dirs
from ap_gym.view.index import RunIndex

log = logging.getLogger(__name__)

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


def _cell(value: Any) -> Any:
    """A table cell as JSON: NaN and infinities are not numbers JSON can carry."""
    import math

    return None if isinstance(value, float) and not math.isfinite(value) else value
