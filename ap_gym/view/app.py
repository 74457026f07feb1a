"""The viewer's HTTP side: a read-only JSON API over :class:`~ap_gym.view.Viewer` and the page.

Only GET routes exist; nothing a request says reaches the file system except through
the run's index (episode ids, filters from :data:`~ap_gym.view.index.FILTERS`).

Runs can hold anything an agent saw, so the viewer follows :mod:`ap_gym.net`: on loopback
it answers only requests addressed to a loopback name (no DNS rebinding); bound beyond it,
it needs a key, given once as ``/?key=...`` (kept in a cookie for the page's own requests)
or as ``Authorization: Bearer ...``.
"""

from __future__ import annotations

import hmac
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, HTTPException, Query, Request
from fastapi import Path as PathParam
from fastapi.responses import (
    FileResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)
from fastapi.staticfiles import StaticFiles

if TYPE_CHECKING:
    from ap_gym.view import Viewer

__all__ = ["STATIC", "create_app"]

#: The page and its assets (``ap-gym view --static`` copies them).
STATIC = Path(__file__).parent / "static"


_COOKIE = "ap_gym_view_key"


def boot_script(mode: str, **extra: Any) -> str:
    """The page's boot script: its mode, the record's decision keys with what each holds
    (:data:`ap_gym.types.DECISION_FIELDS`) and the line's own keys
    (:func:`~ap_gym.protocol.results.record_fields`): the viewer's field lists are the declaration's."""
    import json

    from ap_gym.protocol.results import record_fields
    from ap_gym.types import DECISION_FIELDS

    lines = [f"window.APGYM_MODE = {json.dumps(mode)};", f"window.APGYM_DECISIONS = {json.dumps(DECISION_FIELDS)};",
             f"window.APGYM_RECORD = {json.dumps(record_fields())};"]
    lines += [f"window.APGYM_{k.upper()} = {json.dumps(v)};" for k, v in extra.items()]
    return "\n".join(lines) + "\n"


def _answer(fn: Any, *args: Any) -> Any:
    """``fn(*args)`` as JSON; an unknown run or episode is a 404, a bad filter a 400."""
    try:
        return JSONResponse(fn(*args))
    except KeyError as e:
        raise HTTPException(404, str(e.args[0] if e.args else e)) from None
    except ValueError as e:
        raise HTTPException(400, str(e)) from None


def _guard(app: FastAPI, api_key: str | None, hosts: tuple[str, ...] | None) -> None:
    """Refuse requests to other host names (when ``hosts``) and without the key (when set)."""
    from ap_gym.net import is_loopback

    @app.middleware("http")
    async def check(request: Request, call_next: Any) -> Any:
        if hosts is not None:
            name = (request.url.hostname or "").lower()
            if name not in hosts and not is_loopback(name):
                return PlainTextResponse(f"ap-gym view answers only requests addressed to {hosts[0]}; "
                                         f"this one was addressed to {name!r}", status_code=421)
        if api_key:
            given = request.query_params.get("key")
            if given is not None and request.url.path == "/" and hmac.compare_digest(given, api_key):
                response = RedirectResponse("/", status_code=303)
                response.set_cookie(_COOKIE, api_key, httponly=True, samesite="strict")
                return response
            header = request.headers.get("authorization", "")
            offered = request.cookies.get(_COOKIE) or (header[7:] if header.lower().startswith("bearer ") else "")
            if not hmac.compare_digest(offered.encode(), api_key.encode()):
                return PlainTextResponse("this viewer needs its key: open /?key=<key> once, or send "
                                         "'Authorization: Bearer <key>'", status_code=401)
        return await call_next(request)


def create_app(viewer: Viewer, *, api_key: str | None = None,
               hosts: tuple[str, ...] | None = ("localhost", "127.0.0.1", "::1", "[::1]")) -> FastAPI:
    """The read-only FastAPI app: ``/api/...`` answers, ``/`` the page.

    Args:
        viewer: the runs.
        api_key: required of every request when set (a server bound beyond loopback).
        hosts: the host names requests may be addressed to; ``None`` accepts any (a
            server bound beyond loopback, behind its key).
    """

    app = FastAPI(title="ap-gym view", docs_url=None, redoc_url=None, openapi_url=None)
    _guard(app, api_key, hosts)

    def answer(fn: Any, *args: Any) -> Any:
        with viewer.lock:  # a catch-up may swap an index's connection: one answer at a time
            return _answer(fn, *args)

    _run_routes(app, viewer, answer)
    _finding_routes(app, viewer, answer)

    @app.get("/data/boot.js")
    def boot() -> Any:
        return Response(boot_script("server"), media_type="text/javascript")

    @app.get("/")
    def page() -> Any:
        return FileResponse(STATIC / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


def _run_routes(app: FastAPI, viewer: Viewer, answer: Any) -> None:
    """What a run holds: its settings, report, provenance, episodes."""

    @app.get("/api/runs")
    def runs() -> Any:
        return answer(viewer.runs)

    @app.get("/api/training")
    def training() -> Any:
        return answer(viewer.training)

    @app.get("/api/run/{k}/overview")
    def overview(k: int) -> Any:
        return answer(viewer.overview, k)

    @app.get("/api/run/{k}/report")
    def report(k: int) -> Any:
        return _answer(viewer.report, k)  # its own lock: the other pages answer while it is computed

    @app.get("/api/run/{k}/provenance")
    def provenance(k: int) -> Any:
        return answer(lambda: viewer.index(k).provenance())

    @app.get("/api/run/{k}/episodes")
    def episodes(k: int, request: Request, page: int = Query(0, ge=0, le=10**9),
                 per_page: int = Query(50, ge=1, le=1000), sort: str = "id", desc: bool = False,
                 where: str = Query("", max_length=20_000)) -> Any:
        filters = {key: v for key, v in request.query_params.items()
                   if key not in ("page", "per_page", "sort", "desc", "where")}

        def run() -> dict[str, Any]:
            p = viewer.index(k).episodes(filters, page, per_page, sort, desc, where=where)
            return {"rows": p.rows, "total": p.total, "page": p.page, "per_page": p.per_page}

        return answer(run)

    @app.get("/api/run/{k}/groups")
    def groups(k: int, request: Request, by: str = Query(..., max_length=500),
               where: str = Query("", max_length=20_000)) -> Any:
        filters = {key: v for key, v in request.query_params.items() if key not in ("by", "where")}
        return answer(lambda: viewer.index(k).groups([b for b in by.split(",") if b], filters, where=where))

    @app.get("/api/run/{k}/episode/{episode_id}")
    def episode(k: int, episode_id: int = PathParam(ge=0, le=2**62)) -> Any:
        return answer(lambda: viewer.index(k).episode(episode_id))

    @app.get("/api/run/{k}/episode/{episode_id}/export")
    def export(k: int, episode_id: int = PathParam(ge=0, le=2**62)) -> Any:
        response = answer(viewer.export, k, episode_id)
        response.headers["content-disposition"] = f'attachment; filename="run{k}-episode{episode_id}.json"'
        return response


def _finding_routes(app: FastAPI, viewer: Viewer, answer: Any) -> None:
    """What a reader looks for across a run: its live state, search, the matrix, a diff."""

    @app.get("/api/run/{k}/status")
    def status(k: int) -> Any:
        return answer(viewer.status, k)

    @app.get("/api/run/{k}/search")
    def search(k: int, q: str = Query("", max_length=500), limit: int = Query(50, ge=1, le=500)) -> Any:
        return _answer(viewer.search, k, q, limit)  # its own connections: no need to wait on a catch-up

    @app.get("/api/run/{k}/matrix")
    def matrix(k: int, benchmark: str | None = None, iteration: int | None = Query(None, ge=0, le=10**6),
               split_seeds: bool = False) -> Any:
        return answer(lambda: viewer.index(k).matrix(benchmark, iteration, split_seeds))

    @app.get("/api/diff")
    def diff(a: int, b: int) -> Any:
        return answer(viewer.diff, a, b)
