"""Any OpenAI-compatible chat endpoint (vLLM, SGLang, llama.cpp server, Ollama, ``ap-gym serve``).

Retries with exponential backoff on 429, 5xx and connection errors; a concurrency limit
shared by every thread that uses the backbone; and, when it finally gives up, a
:class:`~ap_gym.errors.BackboneError`, which the rollout loop records as an
infrastructure failure rather than a failed task.

``score`` needs candidate log-likelihoods, which the chat API does not give: it uses
``ap-gym serve``'s ``/v1/ap_gym/score`` extension. Against other servers use the
agent's ``generate`` action mode.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from ap_gym.backbones.base import Completion, GenerationConfig, Message, Reduction, Scores
from ap_gym.errors import BackboneError

__all__ = ["OpenAIBackbone"]

_RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


class OpenAIBackbone:
    """A chat model behind an OpenAI-compatible HTTP API.

    Args:
        base_url: e.g. ``http://127.0.0.1:8000/v1``.
        model: the served model's name (``/v1/models`` lists them); ``None`` takes the first.
        api_key: defaults to ``$AP_GYM_API_KEY`` or ``$OPENAI_API_KEY`` (or none).
        timeout_s: per-request timeout.
        max_retries: retries after the first attempt, with exponential backoff.
        backoff_s: the first backoff; doubled each retry, capped at 30 s.
        concurrency: requests in flight at once, across threads.
    """

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        *,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        max_retries: int = 4,
        backoff_s: float = 0.5,
        concurrency: int = 8,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        key = api_key or os.environ.get("AP_GYM_API_KEY") or os.environ.get("OPENAI_API_KEY")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.Client(timeout=timeout_s, headers=headers)
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.concurrency = concurrency
        self._slots = threading.BoundedSemaphore(concurrency)
        self.model = model or self._first_model()
        self.identity = f"{self.model} @ {self.base_url}"

    def _first_model(self) -> str:
        data = self._request("GET", "/models")
        models = [m["id"] for m in data.get("data", [])]
        if not models:
            raise BackboneError(f"{self.base_url}/models lists no model; pass model=")
        return models[0]

    def _request(self, method: str, path: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
        url = self.base_url + path
        delay = self.backoff_s
        last = ""
        for attempt in range(self.max_retries + 1):
            with self._slots:
                try:
                    response = self._client.request(method, url, json=payload)
                except (httpx.TransportError, OSError) as e:
                    last = f"{type(e).__name__}: {e}"
                else:
                    if response.status_code < 300:
                        try:
                            return response.json()
                        except ValueError:
                            last = f"invalid JSON from {url}: {response.text[:200]!r}"
                    elif response.status_code in _RETRY_STATUS:
                        last = f"HTTP {response.status_code}: {response.text[:200]}"
                    else:
                        raise BackboneError(f"{url} answered HTTP {response.status_code}: {response.text[:500]}")
            if attempt < self.max_retries:
                time.sleep(delay)
                delay = min(2 * delay, 30.0)
        raise BackboneError(f"{url} failed after {self.max_retries + 1} attempts ({last}); is the server up?")

    def generate(self, messages: Sequence[Message], config: GenerationConfig = GenerationConfig()) -> Completion:
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": [dict(m) for m in messages],
            "max_tokens": config.max_new_tokens,
            "temperature": config.temperature,
            "top_p": config.top_p,
        }
        if config.stop:
            payload["stop"] = list(config.stop)
        if config.seed is not None:
            payload["seed"] = config.seed
        t0 = time.perf_counter()
        data = self._request("POST", "/chat/completions", payload)
        try:
            choice = data["choices"][0]
            text = choice["message"]["content"] or ""
        except (KeyError, IndexError, TypeError) as e:
            raise BackboneError(f"malformed chat completion from {self.base_url}: {str(data)[:300]}") from e
        usage = data.get("usage") or {}
        return Completion(
            text=text,
            prompt_tokens=int(usage.get("prompt_tokens", 0)),
            completion_tokens=int(usage.get("completion_tokens", 0)),
            latency_s=time.perf_counter() - t0,
            finish_reason=str(choice.get("finish_reason") or "stop"),
        )

    def generate_batch(
        self, batch: Sequence[Sequence[Message]], config: GenerationConfig = GenerationConfig()
    ) -> list[Completion]:
        """Concurrent requests, at most ``concurrency`` in flight."""
        if not batch:
            return []
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(batch))) as pool:
            return list(pool.map(lambda m: self.generate(m, config), batch))

    def score(
        self, messages: Sequence[Message], candidates: Sequence[str], reduction: Reduction = "sum"
    ) -> Scores:
        data = self._request("POST", "/ap_gym/score", {
            "model": self.model, "messages": [dict(m) for m in messages],
            "candidates": list(candidates), "reduction": reduction,
        })
        scores = data.get("scores")
        if not isinstance(scores, list) or len(scores) != len(candidates):
            raise BackboneError(
                f"{self.base_url} cannot score candidates (needs ap-gym serve's /v1/ap_gym/score); "
                "use the agent's 'generate' action mode with other servers"
            )
        usage = data.get("usage") or {}
        return Scores(tuple(float(s) for s in scores), int(usage.get("prompt_tokens", 0)),
                      int(usage.get("candidate_tokens", 0)))

    def describe(self) -> dict[str, Any]:
        return {"kind": "openai", "identity": self.identity, "base_url": self.base_url, "model": self.model}

    def close(self) -> None:
        self._client.close()
