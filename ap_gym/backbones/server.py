"""``ap-gym serve``: a transformers model behind the same standard routes as vLLM.

Many env workers share one model process through it, and the client
(:class:`~ap_gym.backbones.openai.OpenAIBackbone`) needs no private route, so a run that
works against ``ap-gym serve`` works against vLLM and back. Routes (FastAPI, requests
validated by pydantic models; a malformed request is answered 4xx, never 500):

* ``GET /v1/models``, ``GET /health``;
* ``POST /v1/chat/completions``: chat generation (``user`` names a session whose KV cache
  the server keeps, so an episode's growing prompt is prefilled once; sessions never
  share a cache);
* ``POST /v1/completions``: text or token-id prompts; ``prompt_logprobs`` (vLLM's: the
  log-probability of every prompt token) and the legacy ``echo`` + ``logprobs``: what
  scoring candidate commands needs. Prompts that share a prefix are scored in one
  forward pass over it;
* ``POST /tokenize``: a text, or chat ``messages`` with the template applied;
* ``POST /v1/embeddings``: when started with an embedder.

The routes speak to a :class:`ServedModel` (:class:`~ap_gym.backbones.serving.PromptScorer`
over a transformers backbone), never to the backbone's internals.

Limits (:class:`ServerLimits`): ``max_tokens`` above ``max_tokens_cap`` or at or beyond
the context is refused (400); a request running longer than ``request_timeout_s`` stops
generating and says so (``finish_reason: "length"``, ``timed_out`` in the usage); a
request body larger than ``max_body_bytes`` is refused (413), and one that has not fully
arrived within ``body_timeout_s`` (counted from its first byte, so a client that drips
one byte a second is cut off too) is answered 408 and its connection closed. Token ids
outside the vocabulary are refused (400). An API key (``--api-key`` or
``$AP_GYM_API_KEY``) is required to bind beyond the loopback interface, and when one is
set every route but ``/health`` asks for it, the API documentation included.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any, Literal, Protocol

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ap_gym.backbones.base import Completion, GenerationConfig, Message
from ap_gym.backbones.serving import PromptLogprobs, PromptScorer
from ap_gym.net import is_loopback
from ap_gym.options import Options

__all__ = ["BackboneServer", "ServedModel", "ServerLimits", "build_app", "is_loopback", "serve"]


class ServedModel(Protocol):
    """What the routes need of a model (:class:`~ap_gym.backbones.serving.PromptScorer`)."""

    @property
    def identity(self) -> str: ...

    @property
    def max_context(self) -> int: ...

    @property
    def tokenizer(self) -> Any: ...

    def generate(self, messages: Sequence[Message], config: GenerationConfig, *, session: Any = None,
                 deadline: float | None = None) -> Completion: ...

    def generate_ids(self, ids: Sequence[int], config: GenerationConfig, *,
                     deadline: float | None = None) -> Completion: ...

    def prompt_logprobs(self, prompts: Sequence[Sequence[int]]) -> PromptLogprobs: ...


class ServerLimits(Options):
    """What one request may ask of the server (see the module docstring)."""

    max_tokens_cap: int = Field(default=1024, ge=1)
    request_timeout_s: float = Field(default=120.0, gt=0)
    body_timeout_s: float = Field(default=30.0, gt=0)
    max_body_bytes: int = Field(default=8 << 20, ge=1024)
    sessions: int = Field(default=64, ge=1)


class _Body(BaseModel):
    # OpenAI clients send fields this server ignores (n, stream_options, ...): accept them
    model_config = ConfigDict(extra="ignore")


class ChatMessage(_Body):
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str


class _Sampling(_Body):
    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    stop: str | list[str] | None = None
    seed: int | None = None
    user: str | None = Field(default=None, max_length=256)
    stream: bool = False

    @field_validator("temperature", "top_p", mode="before")
    @classmethod
    def _none_is_default(cls, value: Any, info: Any) -> Any:
        return {"temperature": 0.0, "top_p": 1.0}[info.field_name] if value is None else value

    def generation(self, default_tokens: int) -> GenerationConfig:
        stop = self.stop or ()
        return GenerationConfig(max_new_tokens=self.max_completion_tokens or self.max_tokens or default_tokens,
                                temperature=self.temperature, top_p=self.top_p,
                                stop=(stop,) if isinstance(stop, str) else tuple(stop), seed=self.seed)


class ChatRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)


class CompletionRequest(_Sampling):
    prompt: str | list[int] | list[str] | list[list[int]]
    max_tokens: int | None = Field(default=16, ge=0)
    echo: bool = False
    logprobs: int | None = Field(default=None, ge=0, le=20)
    prompt_logprobs: int | None = Field(default=None, ge=0, le=20)


class TokenizeRequest(_Body):
    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    add_generation_prompt: bool = True
    add_special_tokens: bool | None = None


class EmbeddingRequest(_Body):
    model: str | None = None
    input: str | list[str]


class _BodyTimeout(BaseException):
    """Raised through the app (past its 500 handler) when a request body stops arriving."""


class _BodyTooLarge(BaseException):
    """Raised through the app when a request body exceeds the server's limit."""


class BodyLimits:
    """ASGI middleware: a request body must arrive whole within ``seconds`` of its start
    (not per chunk: a client dripping a byte a second is cut off too) and hold at most
    ``max_bytes``; else 408 or 413, and the connection is closed."""

    def __init__(self, app: Any, seconds: float, max_bytes: int) -> None:
        self.app, self.seconds, self.max_bytes = app, seconds, max_bytes

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started, received, deadline = False, 0, None
        declared = dict(scope.get("headers") or []).get(b"content-length", b"0")
        if declared.isdigit() and int(declared) > self.max_bytes:
            await _refuse(send, 413, "the request body is larger than this server accepts")
            return

        async def limited_receive() -> Any:
            nonlocal received, deadline
            loop = asyncio.get_running_loop()
            deadline = deadline or loop.time() + self.seconds
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                raise _BodyTimeout from None
            received += len(message.get("body", b""))
            if received > self.max_bytes:
                raise _BodyTooLarge
            return message

        async def tracked_send(message: Any) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, tracked_send)
        except _BodyTimeout:
            if not started:
                await _refuse(send, 408, "the request body did not arrive in time")
        except _BodyTooLarge:
            if not started:
                await _refuse(send, 413, "the request body is larger than this server accepts")


async def _refuse(send: Any, status: int, message: str) -> None:
    import json

    body = json.dumps({"error": {"message": message, "type": "invalid_request_error"}}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


class BackboneServer:
    """The app and its uvicorn server; ``start()`` runs it in a thread (tests, notebooks).

    Args:
        backbone: a :class:`~ap_gym.backbones.hf.TransformersBackbone`.
        host, port: where to listen (port 0: a free one).
        model_name: the name ``/v1/models`` lists (default: the backbone's identity).
        embedder: serves ``/v1/embeddings`` when given.
        api_key: required as ``Authorization: Bearer KEY`` when set.
        limits: what one request may ask (:class:`ServerLimits`); keyword arguments of
            the same names override it.
    """

    def __init__(self, backbone: Any, host: str = "127.0.0.1", port: int = 8000, model_name: str | None = None,
                 *, embedder: Any = None, api_key: str | None = None, limits: ServerLimits | None = None,
                 verbose: bool = False, **overrides: Any) -> None:
        import uvicorn

        if not is_loopback(host) and not api_key:
            raise ValueError(f"binding to {host} exposes the model beyond this machine: pass --api-key "
                             "(or set AP_GYM_API_KEY), or bind to a loopback address such as 127.0.0.1")
        limits = (limits or ServerLimits()).replace(**overrides)
        model = PromptScorer(backbone, sessions=limits.sessions)
        self.model_name = model_name or backbone.identity
        self.app = build_app(model, self.model_name, embedder=embedder, api_key=api_key, limits=limits)
        self._config = uvicorn.Config(BodyLimits(self.app, limits.body_timeout_s, limits.max_body_bytes),
                                      host=host, port=port, log_level="info" if verbose else "warning",
                                      timeout_keep_alive=30, h11_max_incomplete_event_size=1 << 20)
        self._server = uvicorn.Server(self._config)
        self._thread: threading.Thread | None = None
        self._host = host

    @property
    def url(self) -> str:
        servers = getattr(self._server, "servers", None) or []
        port = servers[0].sockets[0].getsockname()[1] if servers else self._config.port
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{port}/v1"

    def start(self) -> BackboneServer:
        self._thread = threading.Thread(target=self._server.run, daemon=True, name="ap-gym-serve")
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"ap-gym serve could not start on {self._host}:{self._config.port}")
            time.sleep(0.01)
        return self

    def run(self) -> None:
        """Serve until interrupted (Ctrl-C or SIGTERM stop it quietly)."""
        with contextlib.suppress(KeyboardInterrupt):
            self._server.run()

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(10)


class _Routes:
    """The routes' work, over a :class:`ServedModel` (see the module docstring)."""

    def __init__(self, model: ServedModel, name: str, embedder: Any, limits: ServerLimits) -> None:
        self.model, self.name, self.embedder, self.limits = model, name, embedder, limits

    def check_tokens(self, n: int) -> None:
        if n > self.limits.max_tokens_cap:
            raise HTTPException(400, f"max_tokens {n} is above this server's cap of {self.limits.max_tokens_cap}")
        if n >= self.model.max_context:
            raise HTTPException(400, f"max_tokens {n} leaves no room for a prompt in a context of "
                                     f"{self.model.max_context}")

    def deadline(self) -> float:
        return time.monotonic() + self.limits.request_timeout_s

    def models(self) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": self.name, "object": "model", "owned_by": "ap-gym",
                                            "max_model_len": self.model.max_context}]}

    def chat(self, body: ChatRequest) -> dict[str, Any]:
        if body.stream:
            raise HTTPException(400, "streaming is not supported; send stream: false")
        config = body.generation(256)
        self.check_tokens(config.max_new_tokens)
        # no session named: a cache of its own, shared with no other request
        completion = self.model.generate([m.model_dump() for m in body.messages], config, session=body.user,
                                         deadline=self.deadline())
        return {"id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion", "created": int(time.time()),
                "model": self.name,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": completion.text},
                             "finish_reason": completion.finish_reason}],
                "usage": _usage(completion.prompt_tokens, completion.completion_tokens, completion.extra)}

    def prompts(self, body: CompletionRequest) -> list[list[int]]:
        prompts = _prompt_ids(self.model.tokenizer, body.prompt)
        vocab = len(self.model.tokenizer)
        if any(not p for p in prompts):
            raise HTTPException(400, "empty prompt")
        if any(t < 0 or t >= vocab for p in prompts for t in p):
            raise HTTPException(400, f"token ids must lie in [0, {vocab}) (this model's vocabulary)")
        if max(len(p) for p in prompts) + (body.max_tokens or 0) > self.model.max_context:
            raise HTTPException(400, f"prompt plus max_tokens exceed the context of {self.model.max_context} tokens")
        if body.max_tokens:
            self.check_tokens(body.max_tokens)
        return prompts

    def completions(self, body: CompletionRequest) -> dict[str, Any]:
        if body.stream:
            raise HTTPException(400, "streaming is not supported; send stream: false")
        prompts = self.prompts(body)
        want = body.prompt_logprobs is not None or (body.echo and body.logprobs is not None)
        scored = self.model.prompt_logprobs(prompts) if want else None
        choices, completion_tokens = [], 0
        for k, ids in enumerate(prompts):
            text, generated, finish = self._complete(body, ids, scored, k)
            choices.append(self._choice(body, k, ids, text, finish, scored))
            completion_tokens += len(generated)
        return {"id": f"cmpl-{uuid.uuid4().hex[:12]}", "object": "text_completion", "created": int(time.time()),
                "model": self.name, "choices": choices,
                "usage": _usage(sum(map(len, prompts)), completion_tokens, {})}

    def _complete(self, body: CompletionRequest, ids: list[int], scored: PromptLogprobs | None,
                  k: int) -> tuple[str, list[int], str]:
        if not body.max_tokens:
            return "", [], "length"
        config = body.generation(16)
        if scored is not None and body.max_tokens == 1 and config.greedy:
            generated = [scored.next_tokens[k]]  # the pass that scored the prompt chose it too
            return self.model.tokenizer.decode(generated, skip_special_tokens=True), generated, "length"
        completion = self.model.generate_ids(ids, config, deadline=self.deadline())
        return completion.text, completion.extra["token_ids"], completion.finish_reason

    def _choice(self, body: CompletionRequest, k: int, ids: list[int], text: str, finish: str,
                scored: PromptLogprobs | None) -> dict[str, Any]:
        tokenizer = self.model.tokenizer
        choice: dict[str, Any] = {"index": k, "text": text, "logprobs": None, "finish_reason": finish}
        if scored is not None and body.prompt_logprobs is not None:
            choice["prompt_logprobs"] = [None] + [
                {str(t): {"logprob": lp, "rank": None, "decoded_token": tokenizer.decode([t])}}
                for t, lp in zip(ids[1:], scored.logprobs[k][1:], strict=True)]
            choice["prompt_token_ids"] = ids
        if body.echo and scored is not None and body.logprobs is not None:
            choice["text"] = tokenizer.decode(ids) + text
            choice["logprobs"] = {"tokens": [tokenizer.decode([t]) for t in ids],
                                  "token_logprobs": list(scored.logprobs[k]), "top_logprobs": None,
                                  "text_offset": None}
        return choice

    def tokenize(self, body: TokenizeRequest) -> dict[str, Any]:
        if (body.prompt is None) == (body.messages is None):
            raise HTTPException(400, "send either prompt or messages")
        tokenizer = self.model.tokenizer
        if body.messages is not None:
            text = tokenizer.apply_chat_template([m.model_dump() for m in body.messages], tokenize=False,
                                                 add_generation_prompt=body.add_generation_prompt)
            special = bool(body.add_special_tokens)
        else:
            text, special = body.prompt, body.add_special_tokens is not False
        tokens = tokenizer(text, add_special_tokens=special)["input_ids"]
        return {"count": len(tokens), "max_model_len": self.model.max_context, "tokens": tokens}

    def embeddings(self, body: EmbeddingRequest) -> dict[str, Any]:
        if self.embedder is None:
            raise HTTPException(404, "this server has no embedder; start it with --embedder default")
        texts = [body.input] if isinstance(body.input, str) else body.input
        if not texts:
            raise HTTPException(400, "input is empty")
        vectors = self.embedder.embed(texts)
        return {"object": "list", "model": self.embedder.identity,
                "data": [{"object": "embedding", "index": i, "embedding": [float(x) for x in v]}
                         for i, v in enumerate(vectors)],
                "usage": {"prompt_tokens": 0, "total_tokens": 0}}


def build_app(model: ServedModel, model_name: str, *, embedder: Any = None, api_key: str | None = None,
              limits: ServerLimits | None = None) -> FastAPI:
    """The FastAPI app over ``model`` (and ``embedder``); see the module docstring."""
    routes = _Routes(model, model_name, embedder, limits or ServerLimits())
    app = FastAPI(title="ap-gym serve", version="1", docs_url=None, redoc_url=None, openapi_url=None)
    _errors(app)

    def authorised(request: Request) -> None:
        if api_key and request.headers.get("authorization") != f"Bearer {api_key}":
            raise HTTPException(401, "missing or wrong API key (Authorization: Bearer KEY)")

    auth = [Depends(authorised)]
    app.get("/health")(lambda: {"status": "ok"})
    app.get("/v1/models", dependencies=auth)(routes.models)
    app.get("/models", dependencies=auth, include_in_schema=False)(routes.models)
    app.post("/v1/chat/completions", dependencies=auth)(routes.chat)
    app.post("/v1/completions", dependencies=auth)(routes.completions)
    app.post("/tokenize", dependencies=auth)(routes.tokenize)
    app.post("/v1/embeddings", dependencies=auth)(routes.embeddings)
    app.get("/openapi.json", dependencies=auth, include_in_schema=False)(lambda: JSONResponse(app.openapi()))
    app.get("/docs", dependencies=auth, include_in_schema=False)(
        lambda: HTMLResponse(get_swagger_ui_html(openapi_url="/openapi.json", title="ap-gym serve").body))
    return app


def _errors(app: FastAPI) -> None:
    """Every error as OpenAI's ``{"error": {"message", "type"}}``, a malformed request as 400."""

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'][1:]) or 'body'}: {e['msg']}" for e in error.errors())
        return JSONResponse(status_code=400, content={"error": {"message": problems, "type": "invalid_request_error"}})

    @app.exception_handler(HTTPException)
    async def _http(request: Request, error: HTTPException) -> JSONResponse:
        kind = "invalid_request_error" if error.status_code < 500 else "server_error"
        return JSONResponse(status_code=error.status_code, content={"error": {"message": error.detail, "type": kind}})


def _usage(prompt: int, completion: int, extra: Any) -> dict[str, Any]:
    usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    if extra and extra.get("timed_out"):
        usage["timed_out"] = True
    return usage


def _prompt_ids(tokenizer: Any, prompt: str | Sequence[Any]) -> list[list[int]]:
    def encode(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    if isinstance(prompt, str):
        return [encode(prompt)]
    if prompt and all(isinstance(t, int) for t in prompt):
        return [list(prompt)]
    return [encode(p) if isinstance(p, str) else list(p) for p in prompt]


def serve(model: str | None = None, host: str = "127.0.0.1", port: int = 8000, *, embedder: str | None = None,
          api_key: str | None = None, verbose: bool = False, limits: ServerLimits | None = None,
          **kwargs: Any) -> None:
    """Load a TransformersBackbone (and an embedder) and serve them until interrupted."""
    from ap_gym.backbones.hf import TransformersBackbone

    backbone = TransformersBackbone(model, **kwargs)
    embed = None
    if embedder:
        from ap_gym.backbones.embedders import SentenceTransformerEmbedder

        embed = SentenceTransformerEmbedder(None if embedder == "default" else embedder)
    server = BackboneServer(backbone, host, port, embedder=embed, api_key=api_key or os.environ.get("AP_GYM_API_KEY"),
                            limits=limits, verbose=verbose)
    print(f"serving {backbone.identity} at http://{host}:{port}/v1"
          + (f" (embeddings: {embed.identity})" if embed else ""), flush=True)
    server.run()
