"""``ap-gym serve``: an OpenAI-compatible HTTP server over a :class:`TransformersBackbone`.

Many env workers share one model process through it. Endpoints: ``GET /v1/models``,
``POST /v1/chat/completions``, ``GET /health`` and the extension
``POST /v1/ap_gym/score`` (candidate log-likelihoods, which the chat API lacks).
Requests are served by threads; the backbone serialises model use.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ap_gym.backbones.base import GenerationConfig

__all__ = ["BackboneServer", "serve"]


class _Handler(BaseHTTPRequestHandler):
    server: BackboneServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet by default
        if self.server.verbose:
            super().log_message(format, *args)

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str) -> None:
        self._send(status, {"error": {"message": message, "type": "invalid_request_error"}})

    def do_GET(self) -> None:
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            self._send(200, {"object": "list", "data": [{"id": self.server.model_name, "object": "model"}]})
        elif self.path.rstrip("/") == "/health":
            self._send(200, {"status": "ok"})
        else:
            self._error(404, f"no route {self.path}")

    def do_POST(self) -> None:
        if self.server.stopping:  # a stopped server answers nothing on kept-alive connections
            self.close_connection = True
            return
        try:
            length = int(self.headers.get("Content-Length", 0))
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._error(400, "body is not JSON")
            return
        path = self.path.rstrip("/")
        try:
            if path in ("/v1/chat/completions", "/chat/completions"):
                self._send(200, self._chat(body))
            elif path == "/v1/ap_gym/score":
                scores = self.server.backbone.score(body["messages"], body["candidates"], body.get("reduction", "sum"))
                self._send(200, {"scores": list(scores.values), "usage": {
                    "prompt_tokens": scores.prompt_tokens, "candidate_tokens": scores.candidate_tokens}})
            else:
                self._error(404, f"no route {self.path}")
        except (KeyError, TypeError, ValueError) as e:
            self._error(400, f"bad request: {e}")
        except Exception as e:  # the model failed: tell the client to retry
            self._error(500, f"{type(e).__name__}: {e}")

    def _chat(self, body: dict[str, Any]) -> dict[str, Any]:
        stop = body.get("stop") or ()
        config = GenerationConfig(
            max_new_tokens=int(body.get("max_completion_tokens") or body.get("max_tokens") or 256),
            temperature=float(body.get("temperature") or 0.0),
            top_p=float(body.get("top_p") or 1.0),
            stop=(stop,) if isinstance(stop, str) else tuple(stop),
            seed=body.get("seed"),
        )
        completion = self.server.backbone.generate(body["messages"], config)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.server.model_name,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": completion.text},
                         "finish_reason": completion.finish_reason}],
            "usage": {"prompt_tokens": completion.prompt_tokens,
                      "completion_tokens": completion.completion_tokens,
                      "total_tokens": completion.prompt_tokens + completion.completion_tokens},
        }


class BackboneServer(ThreadingHTTPServer):
    """The HTTP server; ``start()`` runs it in a daemon thread (for tests and notebooks)."""

    daemon_threads = True

    def __init__(self, backbone: Any, host: str = "127.0.0.1", port: int = 8000,
                 model_name: str | None = None, verbose: bool = False) -> None:
        super().__init__((host, port), _Handler)
        self.backbone = backbone
        self.model_name = model_name or backbone.identity
        self.verbose = verbose
        self.stopping = False
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> BackboneServer:
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping = True
        self.shutdown()
        self.server_close()


def serve(model: str | None = None, host: str = "127.0.0.1", port: int = 8000, **kwargs: Any) -> None:
    """Load a TransformersBackbone and serve it until interrupted."""
    from ap_gym.backbones.hf import TransformersBackbone

    backbone = TransformersBackbone(model, **kwargs)
    server = BackboneServer(backbone, host, port)
    print(f"serving {backbone.identity} at {server.url}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
