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

Limits: ``max_tokens`` above ``max_tokens_cap`` or at or beyond the context is refused
(400); a request running longer than ``request_timeout_s`` stops generating and says so
(``finish_reason: "length"``, ``timed_out`` in the usage); a request whose body does not
arrive within ``body_timeout_s`` (a ``Content-Length`` larger than what is sent) is
answered 408 and its connection closed. An API key (``--api-key`` or
``$AP_GYM_API_KEY``) is required to bind beyond the loopback interface.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any, Literal

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ap_gym.backbones.base import GenerationConfig
from ap_gym.backbones.hf import ISOLATED

__all__ = ["BackboneServer", "build_app", "serve"]

LOOPBACK = ("127.0.0.1", "localhost", "::1")


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


class BodyDeadline:
    """ASGI middleware: a request body must arrive within ``seconds``, else 408."""

    def __init__(self, app: Any, seconds: float) -> None:
        self.app, self.seconds = app, seconds

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        import asyncio

        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def timed_receive() -> Any:
            try:
                return await asyncio.wait_for(receive(), self.seconds)
            except TimeoutError:
                raise _BodyTimeout from None

        async def tracked_send(message: Any) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, timed_receive, tracked_send)
        except _BodyTimeout:
            if not started:
                body = b'{"error": {"message": "the request body did not arrive in time", "type": "timeout"}}'
                await send({"type": "http.response.start", "status": 408,
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
        max_tokens_cap: the most tokens one request may generate.
        request_timeout_s: a request generates no longer than this.
        sessions: KV caches kept for ``user`` sessions (least recently used dropped).
        body_timeout_s: a request body must arrive within this.
    """

    def __init__(self, backbone: Any, host: str = "127.0.0.1", port: int = 8000, model_name: str | None = None,
                 *, embedder: Any = None, api_key: str | None = None, max_tokens_cap: int = 1024,
                 request_timeout_s: float = 120.0, sessions: int = 64, body_timeout_s: float = 30.0,
                 verbose: bool = False) -> None:
        import uvicorn

        if host not in LOOPBACK and not api_key:
            raise ValueError(f"binding to {host} exposes the model beyond this machine: pass --api-key "
                             "(or set AP_GYM_API_KEY), or bind to 127.0.0.1")
        self.backbone = backbone
        self.model_name = model_name or backbone.identity
        self.app = build_app(backbone, self.model_name, embedder=embedder, api_key=api_key,
                             max_tokens_cap=max_tokens_cap, request_timeout_s=request_timeout_s, sessions=sessions)
        self._config = uvicorn.Config(BodyDeadline(self.app, body_timeout_s), host=host, port=port,
                                      log_level="info" if verbose else "warning",
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
        self._server.run()

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(10)


def build_app(backbone: Any, model_name: str, *, embedder: Any = None, api_key: str | None = None,
              max_tokens_cap: int = 1024, request_timeout_s: float = 120.0, sessions: int = 64) -> FastAPI:
    """The FastAPI app over ``backbone`` (and ``embedder``); see the module docstring."""
    app = FastAPI(title="ap-gym serve", version="1")
    backbone.max_sessions = sessions

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'][1:]) or 'body'}: {e['msg']}" for e in error.errors())
        return JSONResponse(status_code=400, content={"error": {"message": problems, "type": "invalid_request_error"}})

    @app.exception_handler(HTTPException)
    async def _http(request: Request, error: HTTPException) -> JSONResponse:
        kind = "invalid_request_error" if error.status_code < 500 else "server_error"
        return JSONResponse(status_code=error.status_code, content={"error": {"message": error.detail, "type": kind}})

    def authorised(request: Request) -> None:
        if api_key and request.headers.get("authorization") != f"Bearer {api_key}":
            raise HTTPException(401, "missing or wrong API key (Authorization: Bearer KEY)")

    auth = [Depends(authorised)]

    def check_tokens(n: int) -> None:
        if n > max_tokens_cap:
            raise HTTPException(400, f"max_tokens {n} is above this server's cap of {max_tokens_cap}")
        if n >= backbone.max_context:
            raise HTTPException(400, f"max_tokens {n} leaves no room for a prompt in a context of {backbone.max_context}")

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models", dependencies=auth)
    @app.get("/models", dependencies=auth, include_in_schema=False)
    def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": model_name, "object": "model", "owned_by": "ap-gym",
                                            "max_model_len": backbone.max_context}]}

    @app.post("/v1/chat/completions", dependencies=auth)
    def chat(body: ChatRequest) -> dict[str, Any]:
        if body.stream:
            raise HTTPException(400, "streaming is not supported; send stream: false")
        config = body.generation(256)
        check_tokens(config.max_new_tokens)
        messages = [m.model_dump() for m in body.messages]
        # no session named: a cache of its own, shared with no other request
        completion = backbone.generate(messages, config, session=body.user or ISOLATED,
                                       deadline=time.monotonic() + request_timeout_s)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion", "created": int(time.time()),
            "model": model_name,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": completion.text},
                         "finish_reason": completion.finish_reason}],
            "usage": _usage(completion.prompt_tokens, completion.completion_tokens, completion.extra),
        }

    @app.post("/v1/completions", dependencies=auth)
    def completions(body: CompletionRequest) -> dict[str, Any]:
        if body.stream:
            raise HTTPException(400, "streaming is not supported; send stream: false")
        prompts = _prompt_ids(backbone, body.prompt)
        if any(not p for p in prompts):
            raise HTTPException(400, "empty prompt")
        if max(len(p) for p in prompts) + (body.max_tokens or 0) > backbone.max_context:
            raise HTTPException(400, f"prompt plus max_tokens exceed the context of {backbone.max_context} tokens")
        if body.max_tokens:
            check_tokens(body.max_tokens)
        want_logprobs = body.prompt_logprobs is not None or (body.echo and body.logprobs is not None)
        scored = backbone.prompt_logprobs(prompts) if want_logprobs else None
        choices, prompt_tokens, completion_tokens = [], 0, 0
        config = body.generation(16)
        for k, ids in enumerate(prompts):
            text, generated, finish = "", [], "length"
            if body.max_tokens:
                if scored is not None and body.max_tokens == 1 and config.greedy:
                    generated = [scored.next_tokens[k]]  # the pass that scored the prompt chose it too
                    text = backbone.tokenizer.decode(generated, skip_special_tokens=True)
                else:
                    completion = backbone.generate_ids(ids, config, deadline=time.monotonic() + request_timeout_s)
                    text, generated, finish = completion.text, completion.extra["token_ids"], completion.finish_reason
            choice: dict[str, Any] = {"index": k, "text": text, "logprobs": None, "finish_reason": finish}
            if scored is not None and body.prompt_logprobs is not None:
                choice["prompt_logprobs"] = [None] + [
                    {str(t): {"logprob": lp, "rank": None, "decoded_token": backbone.tokenizer.decode([t])}}
                    for t, lp in zip(ids[1:], scored.logprobs[k][1:], strict=True)]
                choice["prompt_token_ids"] = ids
            if body.echo and scored is not None and body.logprobs is not None:
                tokens = [backbone.tokenizer.decode([t]) for t in ids]
                choice["text"] = backbone.tokenizer.decode(ids) + text
                choice["logprobs"] = {"tokens": tokens, "token_logprobs": list(scored.logprobs[k]),
                                      "top_logprobs": None, "text_offset": None}
            choices.append(choice)
            prompt_tokens += len(ids)
            completion_tokens += len(generated)
        return {"id": f"cmpl-{uuid.uuid4().hex[:12]}", "object": "text_completion", "created": int(time.time()),
                "model": model_name, "choices": choices, "usage": _usage(prompt_tokens, completion_tokens, {})}

    @app.post("/tokenize", dependencies=auth)
    def tokenize(body: TokenizeRequest) -> dict[str, Any]:
        if (body.prompt is None) == (body.messages is None):
            raise HTTPException(400, "send either prompt or messages")
        if body.messages is not None:
            text = backbone.tokenizer.apply_chat_template([m.model_dump() for m in body.messages], tokenize=False,
                                                          add_generation_prompt=body.add_generation_prompt)
            special = bool(body.add_special_tokens)
        else:
            text, special = body.prompt, body.add_special_tokens is not False
        tokens = backbone.tokenizer(text, add_special_tokens=special)["input_ids"]
        return {"count": len(tokens), "max_model_len": backbone.max_context, "tokens": tokens}

    @app.post("/v1/embeddings", dependencies=auth)
    def embeddings(body: EmbeddingRequest) -> dict[str, Any]:
        if embedder is None:
            raise HTTPException(404, "this server has no embedder; start it with --embedder default")
        texts = [body.input] if isinstance(body.input, str) else body.input
        if not texts:
            raise HTTPException(400, "input is empty")
        vectors = embedder.embed(texts)
        return {"object": "list", "model": embedder.identity,
                "data": [{"object": "embedding", "index": i, "embedding": [float(x) for x in v]}
                         for i, v in enumerate(vectors)],
                "usage": {"prompt_tokens": 0, "total_tokens": 0}}

    return app


def _usage(prompt: int, completion: int, extra: Any) -> dict[str, Any]:
    usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    if extra and extra.get("timed_out"):
        usage["timed_out"] = True
    return usage


def _prompt_ids(backbone: Any, prompt: str | Sequence[Any]) -> list[list[int]]:
    def encode(text: str) -> list[int]:
        return backbone.tokenizer(text, add_special_tokens=False)["input_ids"]

    if isinstance(prompt, str):
        return [encode(prompt)]
    if prompt and all(isinstance(t, int) for t in prompt):
        return [list(prompt)]  # type: ignore[arg-type]
    return [encode(p) if isinstance(p, str) else list(p) for p in prompt]


def serve(model: str | None = None, host: str = "127.0.0.1", port: int = 8000, *, embedder: str | None = None,
          api_key: str | None = None, max_tokens_cap: int = 1024, request_timeout_s: float = 120.0,
          verbose: bool = False, **kwargs: Any) -> None:
    """Load a TransformersBackbone (and an embedder) and serve them until interrupted."""
    from ap_gym.backbones.hf import TransformersBackbone

    backbone = TransformersBackbone(model, **kwargs)
    embed = None
    if embedder:
        from ap_gym.backbones.embedders import SentenceTransformerEmbedder

        embed = SentenceTransformerEmbedder(None if embedder == "default" else embedder)
    server = BackboneServer(backbone, host, port, embedder=embed, api_key=api_key or os.environ.get("AP_GYM_API_KEY"),
                            max_tokens_cap=max_tokens_cap, request_timeout_s=request_timeout_s, verbose=verbose)
    print(f"serving {backbone.identity} at http://{host}:{port}/v1"
          + (f" (embeddings: {embed.identity})" if embed else ""), flush=True)
    server.run()
