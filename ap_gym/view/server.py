"""``ap-gym view`` served: the viewer's app under uvicorn until Ctrl-C or SIGTERM, which
stop it cleanly (the live thread and the indexes closed)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ap_gym.view.viewer import Viewer

log = logging.getLogger(__name__)

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
