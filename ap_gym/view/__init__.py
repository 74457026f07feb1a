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

from typing import Any

from ap_gym.view.bundle import BUNDLE_MARK, write_static
from ap_gym.view.index import RunIndex
from ap_gym.view.server import serve
from ap_gym.view.viewer import Viewer

__all__ = ["BUNDLE_MARK", "RunIndex", "Viewer", "create_app", "serve", "write_static"]


def create_app(viewer: Viewer, **options: Any) -> Any:
    """The read-only FastAPI app over ``viewer`` (see :mod:`ap_gym.view.app`: ``api_key``,
    ``hosts``)."""
    from ap_gym.view.app import create_app as create

    return create(viewer, **options)
