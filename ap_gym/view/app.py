"""The viewer's HTTP side: a read-only JSON API over :class:`~ap_gym.view.Viewer` and the page.

Only GET routes exist; nothing a request says reaches the file system except through
the run's index (episode ids, filters from :data:`~ap_gym.view.index.FILTERS`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles

if TYPE_CHECKING:
    from ap_gym.view import Viewer

__all__ = ["create_app"]


def create_app(viewer: Viewer) -> FastAPI:
    """The read-only FastAPI app: ``/api/...`` answers, ``/`` the page."""
    from ap_gym.view import STATIC

    app = FastAPI(title="ap-gym view", docs_url=None, redoc_url=None, openapi_url=None)

    def answer(fn: Any, *args: Any) -> Any:
        try:
            return JSONResponse(fn(*args))
        except KeyError as e:
            raise HTTPException(404, str(e.args[0] if e.args else e)) from None
        except ValueError as e:
            raise HTTPException(400, str(e)) from None

    @app.get("/api/runs")
    def runs() -> Any:
        return answer(viewer.runs)

    @app.get("/api/run/{k}/overview")
    def overview(k: int) -> Any:
        return answer(viewer.overview, k)

    @app.get("/api/run/{k}/report")
    def report(k: int) -> Any:
        return answer(viewer.report, k)

    @app.get("/api/run/{k}/provenance")
    def provenance(k: int) -> Any:
        return answer(lambda: viewer.index(k).provenance())

    @app.get("/api/run/{k}/episodes")
    def episodes(k: int, request: Request, page: int = 0, per_page: int = 50) -> Any:
        filters = {key: v for key, v in request.query_params.items() if key not in ("page", "per_page")}

        def run() -> dict[str, Any]:
            p = viewer.index(k).episodes(filters, page, per_page)
            return {"rows": p.rows, "total": p.total, "page": p.page, "per_page": p.per_page}

        return answer(run)

    @app.get("/api/run/{k}/episode/{episode_id}")
    def episode(k: int, episode_id: int) -> Any:
        return answer(lambda: viewer.index(k).episode(episode_id))

    @app.get("/data/boot.js")
    def boot() -> Any:
        return Response("window.APGYM_MODE = 'server';\n", media_type="text/javascript")

    @app.get("/")
    def page() -> Any:
        return FileResponse(STATIC / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app
