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

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ap_gym.view.index import FILTERS, RunIndex, curves

__all__ = ["RunIndex", "Viewer", "create_app", "serve", "write_static"]


def create_app(viewer: Viewer, **options: Any) -> Any:
    """The read-only FastAPI app over ``viewer`` (see :mod:`ap_gym.view.app`: ``api_key``,
    ``hosts``)."""
    from ap_gym.view.app import create_app as create

    return create(viewer, **options)

STATIC = Path(__file__).parent / "static"
#: The file that marks a directory as a bundle ``write_static`` may overwrite.
BUNDLE_MARK = ".ap-gym-bundle"


class Viewer:
    """The runs a viewer shows, each with its index, and the answers both modes serve."""

    def __init__(self, runs: Sequence[str | Path], rebuild: bool = False) -> None:
        if not runs:
            raise ValueError("ap-gym view needs at least one run directory")
        self.indexes = [RunIndex(r, rebuild=rebuild) for r in runs]
        self._reports: dict[int, dict[str, Any]] = {}

    def close(self) -> None:
        for ix in self.indexes:
            ix.close()

    def index(self, k: int) -> RunIndex:
        if not 0 <= k < len(self.indexes):
            raise KeyError(f"no run {k}: this viewer shows {len(self.indexes)} run(s)")
        return self.indexes[k]

    def runs(self) -> list[dict[str, Any]]:
        out = []
        for k, ix in enumerate(self.indexes):
            config = ix.meta.get("config") or {}
            backbone = ix.meta.get("backbone")
            policies = config.get("policies") if isinstance(config.get("policies"), list) else []
            out.append({"run": k, "path": str(ix.run), "name": ix.run.name,
                        "description": config.get("description"), "version": ix.meta.get("ap_gym_version"),
                        "backbone": backbone.get("identity") if isinstance(backbone, dict) else backbone,
                        "policies": [p.get("label") for p in policies if isinstance(p, dict)]})
        return out

    def overview(self, k: int) -> dict[str, Any]:
        ix = self.index(k)
        settings = ix.settings()
        return {"settings": settings, "curves": curves(settings), "facets": ix.facets(), "filters": list(FILTERS)}

    def report(self, k: int) -> dict[str, Any]:
        """The tables of ``ap-gym report`` for this run (the same :class:`~ap_gym.report.Table`
        objects, computed once and kept while the viewer runs)."""
        if k not in self._reports:
            from ap_gym.report import collect, report_tables

            tables = report_tables(collect([self.index(k).run]))
            self._reports[k] = {"tables": [{"name": t.name, "title": t.title, "header": t.header,
                                            "rows": [[_cell(v) for v in row] for row in t.rows]}
                                           for t in tables if t.header]}
        return self._reports[k]


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
    viewer = Viewer(runs, rebuild=rebuild)
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
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:  # Ctrl-C: a line, not asyncio's traceback
        pass
    finally:
        viewer.close()


def _put(path: Path, key: str, payload: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(payload, separators=(",", ":")).replace("</", "<\\/")
    path.write_text(f"APGYM_PUT({json.dumps(key)},{text});\n", encoding="utf-8")


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
        (data / "boot.js").write_text("window.APGYM_MODE = 'static';\n")
        _put(data / "runs.js", "runs", viewer.runs())
        for k, ix in enumerate(viewer.indexes):
            base = data / f"run{k}"
            _put(base / "overview.js", f"run/{k}/overview", viewer.overview(k))
            _put(base / "report.js", f"run/{k}/report", viewer.report(k))
            _put(base / "provenance.js", f"run/{k}/provenance", ix.provenance())
            _put(base / "episodes.js", f"run/{k}/episodes", list(ix.all_rows()))
            for row in ix.all_rows():
                _put(base / "episode" / f"{row['id']}.js", f"run/{k}/episode/{row['id']}", ix.episode(row["id"]))
    finally:
        viewer.close()
    return out / "index.html"
