"""``ap-gym view --static``: the viewer's app with its data as files, a bundle that opens
from disk (``file://``) or any web server; each episode's steps in a chunk read when it is
opened, and the search's documents beside them."""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ap_gym.protocol.results import EPISODES
from ap_gym.view.app import STATIC, boot_script
from ap_gym.view.index import RunIndex
from ap_gym.view.viewer import Viewer

log = logging.getLogger(__name__)

#: The file that marks a directory as a bundle ``write_static`` may overwrite.
BUNDLE_MARK = ".ap-gym-bundle"


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
