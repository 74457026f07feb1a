"""Any OpenAI-compatible server as a backbone: vLLM, SGLang, llama.cpp, Ollama, ``ap-gym serve``.

Everything goes through standard routes, so the same run works against vLLM and against
``ap-gym serve``:

* ``generate``: ``/v1/chat/completions`` (``user`` carries a session id per episode and
  thread, so a server that keeps KV caches per session never mixes two episodes);
* ``score`` (the agent's ``choose`` mode): the chat prompt is tokenized with the model's
  template (``/tokenize`` with ``messages``), each candidate is appended as tokens, and
  ``/v1/completions`` returns every prompt token's log-probability (vLLM's
  ``prompt_logprobs``; where a server lacks it, the legacy ``echo`` + ``logprobs``). vLLM's
  prefix caching shares the prompt's computation between candidates. A server that
  offers neither is refused by :meth:`OpenAIBackbone.check` at the start of a run, with
  an error that names the ``generate`` and ``react`` modes.

Every call has an overall deadline (``deadline_s``: a server that sends one byte a
second is cut off, unlike with a per-read timeout), is retried with exponential backoff
on 429, 5xx, timeouts and connection errors (``retries``), and waits for one of
``concurrency`` slots shared by every thread. When it finally gives up it raises
:class:`~ap_gym.errors.BackboneError`, which the rollout loop records as an
infrastructure failure rather than a failed task.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
import uuid
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from pydantic import Field
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from ap_gym.backbones.base import (
    Best,
    Choice,
    Completion,
    GenerationConfig,
    Message,
    Reduction,
    Scores,
)
from ap_gym.backbones.dialects import Dialect, get_dialect
from ap_gym.backbones.search import Expand, best_first
from ap_gym.errors import BackboneError, PromptRejected
from ap_gym.net import may_send_credentials, refuse_userinfo
from ap_gym.options import Options

__all__ = ["OpenAIBackbone", "ServingOptions", "Unreachable"]

_RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}
#: A refusal the request itself may have caused (the prompt overflowing the context): decided
#: from the request's token count against the server's declared context, never its wording.
_CLIENT_ERROR = (400, 413, 422)
#: Special tokens that may join commands into one /tokenize request (the first the server
#: tokenizes as one token, checked to leave the commands' tokens as they are alone).
SEPARATORS = ("<|im_end|>", "<|eot_id|>", "<|endoftext|>", "</s>", "<end_of_turn>", "<|end|>")
#: The most token ids vLLM reads the log-probabilities of in one request row.
MAX_LOGPROB_TOKEN_IDS = 128


class ServingOptions(Options):
    """How a served backbone is called; settable from a run config (``serving:``) and the CLI.

    Attributes:
        deadline_s: the longest one call may take, all bytes included.
        retries: attempts after the first, with exponential backoff.
        backoff_s: the first backoff (doubled each retry, at most 30 s).
        concurrency: requests in flight at once, across threads.
        check_deadline_s: the deadline of the start-up check (model listed, scoring available).
        max_retry_after_s: the longest wait a server's ``Retry-After`` (on 429/503) may ask
            for; a longer one is cut to this.
        insecure_credentials: send the API key over plain HTTP to another machine (by
            default a key goes only to HTTPS or to loopback).
        search_budget: the exact search's expansions per step at most (``choose``); past
            it the step fails loudly (an infrastructure failure) rather than pick inexactly.
        search_batch: prefixes the exact search expands per round trip.
        dialect: what the server engine offers beyond chat completions and how it is asked
            (:mod:`ap_gym.backbones.dialects`: ``vllm``, the default, which ``ap-gym serve``
            speaks too; ``openai``, chat completions only).
    """

    deadline_s: float = Field(default=120.0, gt=0)
    retries: int = Field(default=4, ge=0)
    backoff_s: float = Field(default=0.5, ge=0)
    concurrency: int = Field(default=8, ge=1)
    check_deadline_s: float = Field(default=15.0, gt=0)
    max_retry_after_s: float = Field(default=60.0, ge=0)
    insecure_credentials: bool = False
    search_budget: int = Field(default=4096, ge=1)
    search_batch: int = Field(default=16, ge=1)
    dialect: str = "vllm"


def _serving_options(options: ServingOptions | None, overrides: dict[str, Any]) -> ServingOptions:
    """``options`` with keyword overrides; ``timeout_s`` (the name before ``ServingOptions``)
    still works, with a warning, so that older scripts keep their limit."""
    if "timeout_s" in overrides:
        warnings.warn("OpenAIBackbone(timeout_s=...) is deprecated: it sets deadline_s, the limit of "
                      "a whole call (see ServingOptions)", DeprecationWarning, stacklevel=3)
        overrides = {**overrides}
        overrides.setdefault("deadline_s", overrides.pop("timeout_s"))
    known = set(ServingOptions.model_fields)
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise TypeError(f"OpenAIBackbone got unknown option(s) {', '.join(unknown)}; "
                        f"the serving options are {', '.join(sorted(known))}")
    return (options or ServingOptions()).replace(**overrides)


class _Retryable(Exception):
    """A failure worth another attempt (timeout, connection, 429/5xx, bad JSON); a server's
    ``Retry-After`` in seconds rides along."""

    def __init__(self, message: str, retry_after: float | None = None, deadline: bool = False) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        #: the attempt ran out of its deadline (the server may be up and slow)
        self.deadline = deadline


class _Refused(Exception):
    """A 4xx answer, decided by the caller, who knows the request (never retried)."""


class Unreachable(BackboneError):
    """Every attempt failed in transport (refused, reset, timed out, 5xx): the server is
    down or faulty now, which says nothing about what it can do once it is back."""


def _retry_after(value: str | None) -> float | None:
    """``Retry-After`` as seconds: a number, or an HTTP date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        from email.utils import parsedate_to_datetime

        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError, OverflowError):
        return None


class OpenAIBackbone:
    """A chat model behind an OpenAI-compatible HTTP API; see the module docstring.

    Args:
        base_url: e.g. ``http://127.0.0.1:8000/v1``.
        model: the served model's name (``/v1/models`` lists them); ``None`` takes the first.
        api_key: defaults to ``$AP_GYM_API_KEY`` or ``$OPENAI_API_KEY`` (or none).
        options: deadlines, retries and concurrency (:class:`ServingOptions`).
        dialect: the engine's extensions (a :class:`~ap_gym.backbones.dialects.Dialect`, its
            class or name); default the one ``options.dialect`` names.
    """

    def __init__(self, base_url: str, model: str | None = None, *, api_key: str | None = None,
                 options: ServingOptions | None = None, dialect: str | Dialect | type[Dialect] | None = None,
                 **overrides: Any) -> None:
        try:
            self.base_url = refuse_userinfo(base_url).rstrip("/")
        except ValueError as e:
            raise BackboneError(str(e)) from None
        self.options = _serving_options(options, overrides)
        self.dialect = get_dialect(dialect if dialect is not None else self.options.dialect)
        key = api_key or os.environ.get("AP_GYM_API_KEY") or os.environ.get("OPENAI_API_KEY")
        if key and not may_send_credentials(self.base_url) and not self.options.insecure_credentials:
            if api_key:
                raise BackboneError(f"an API key would travel in clear text to {self.base_url}; use https, a "
                                    "loopback address, or serving: {insecure_credentials: true} if you mean it")
            warnings.warn(f"not sending $AP_GYM_API_KEY/$OPENAI_API_KEY to {self.base_url} (plain http to another "
                          "machine); use https, or serving: {insecure_credentials: true}", stacklevel=2)
            key = None
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.Client(headers=headers, timeout=httpx.Timeout(self.options.deadline_s, connect=10.0))
        self._slots = threading.BoundedSemaphore(self.options.concurrency)
        self._local = threading.local()
        self._candidate_ids: OrderedDict[str, list[int]] = OrderedDict()
        self._token_lock = threading.Lock()
        self._join: tuple[str, int] | bool | None = False  # False: not probed yet; None: no separator
        self._probe_lock = threading.Lock()
        self._search: bool | None = None  # None: not probed yet
        self._context_len: int | bool | None = False  # False: not read yet
        self._scoring: str | None | bool = False  # False: not probed yet
        self._choice: bool | None = None  # None: not probed yet
        self.model = model or self._first_model(self.options.check_deadline_s)
        self.identity = f"{self.model} @ {self.base_url}"

    # ------------------------------------------------------------- transport
    @property
    def _root(self) -> str:
        """The server's root: vLLM's ``/tokenize`` sits beside ``/v1``, not under it."""
        return self.base_url[:-3] if self.base_url.endswith("/v1") else self.base_url

    def _request(self, method: str, path: str, payload: dict[str, Any] | None = None, *,
                 deadline_s: float | None = None, retries: int | None = None, root: bool = False) -> dict[str, Any]:
        url = (self._root if root else self.base_url) + path
        attempts = (self.options.retries if retries is None else retries) + 1
        backoff = wait_exponential(multiplier=self.options.backoff_s, max=30)

        def wait(state: Any) -> float:  # the server's Retry-After when it gives one (capped)
            error = state.outcome.exception() if state.outcome is not None else None
            asked = getattr(error, "retry_after", None)
            return min(max(backoff(state), asked), self.options.max_retry_after_s) if asked else backoff(state)

        retrying = Retrying(stop=stop_after_attempt(attempts), reraise=True, wait=wait,
                            retry=retry_if_exception_type(_Retryable))
        try:
            for attempt in retrying:
                with attempt:
                    return self._once(method, url, payload, deadline_s or self.options.deadline_s)
        except _Retryable as e:
            limit = deadline_s or self.options.deadline_s
            if e.deadline:  # the server answered too slowly: a deadline, not an outage
                raise Unreachable(f"{url} did not answer in {attempts} attempts of at most {limit:g} s each ({e}): the "
                                  "deadline ran out, which is not an outage (the server may be up and slow, or "
                                  "hung); if it is up, raise the deadline (serving: {deadline_s: ...} in the "
                                  "config, or --deadline)") from None
            raise Unreachable(f"{url} failed after {attempts} attempts of at most {limit:g}"
                              f" s each ({e}); is the server up? Deadlines and retries: serving: in the config, or "
                              "--deadline/--retries") from None
        except _Refused as e:
            raise self._refusal(str(e), path, payload) from None
        raise AssertionError("unreachable")

    def _refusal(self, message: str, path: str, payload: dict[str, Any] | None) -> BackboneError | PromptRejected:
        """A 4xx refusal as what it is: :class:`~ap_gym.errors.PromptRejected` (the method's
        failure) only when the request's prompt did not fit the server's declared context;
        anything else (a max_tokens that fits no prompt, a wrong parameter or model name, a
        rate limit, a refusal we cannot measure) is the infrastructure's."""
        fits = self._fits(payload) if path in ("/chat/completions", "/completions") and payload else None
        if fits is False:
            return PromptRejected(f"{message} (the prompt did not fit the context of {self._context} tokens)")
        why = "the prompt fits the server's context, so it is not the method's prompt" if fits else \
            "the server declares no context length (max_model_len), so a prompt at fault cannot be told"
        return BackboneError(f"{message}; {why}: an infrastructure failure, check the server and the serving options")

    @property
    def _context(self) -> int | None:
        """The server's declared context length (``/v1/models``' ``max_model_len``), read once."""
        if self._context_len is False:
            self._context_len = None
            with contextlib.suppress(BackboneError):
                models = self._request("GET", "/models", deadline_s=self.options.check_deadline_s, retries=1)
                for card in models.get("data") or []:
                    if isinstance(card, dict) and card.get("id") == self.model:
                        value = card.get("max_model_len")
                        self._context_len = int(value) if isinstance(value, int) and value > 0 else None
        return self._context_len if isinstance(self._context_len, int) else None

    def _fits(self, payload: dict[str, Any]) -> bool | None:
        """Whether the request's prompt and its ``max_tokens`` fit the declared context:
        ``False`` when the prompt left no room (the method's prompt at fault), ``True``
        when they fit or ``max_tokens`` alone exceeds the context (no prompt could fit: the
        configuration is at fault), ``None`` when it cannot be told."""
        context = self._context
        if context is None:
            return None
        max_tokens = int(payload.get("max_tokens") or 1)
        if max_tokens >= context:
            return True
        prompt = payload.get("prompt")
        try:
            if "messages" in payload:
                tokens = len(self._tokenize({"messages": payload["messages"], "add_generation_prompt": True},
                                            deadline_s=self.options.check_deadline_s, retries=1))
            elif isinstance(prompt, list) and prompt and isinstance(prompt[0], list):
                tokens = max(len(p) for p in prompt)
            elif isinstance(prompt, list):
                tokens = len(prompt)
            else:
                tokens = len(self._tokenize({"prompt": str(prompt)}, deadline_s=self.options.check_deadline_s,
                                            retries=1))
        except (BackboneError, PromptRejected):
            return None
        return tokens + max_tokens <= context

    def _once(self, method: str, url: str, payload: dict[str, Any] | None, deadline_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + deadline_s
        with self._slots:
            try:
                with self._client.stream(method, url, json=payload,
                                         timeout=httpx.Timeout(deadline_s, connect=min(10.0, deadline_s))) as response:
                    body = bytearray()
                    for part in response.iter_bytes():  # an overall deadline, not a per-read one
                        body += part
                        if time.monotonic() > deadline:
                            raise _Retryable(f"no complete answer within the {deadline_s:g} s deadline",
                                             deadline=True)
                    status = response.status_code
            except httpx.TimeoutException as e:
                raise _Retryable(f"timed out ({type(e).__name__})", deadline=not isinstance(e, httpx.ConnectTimeout)) \
                    from None
            except (httpx.TransportError, OSError) as e:
                raise _Retryable(f"{type(e).__name__}: {e}") from None
        text = body.decode("utf-8", errors="replace")
        if status in _RETRY_STATUS:
            raise _Retryable(f"HTTP {status}: {text[:200]}", _retry_after(response.headers.get("retry-after")))
        if status in _CLIENT_ERROR:
            raise _Refused(f"{url} answered HTTP {status}: {text[:500]}")
        if status >= 300:
            raise BackboneError(f"{url} answered HTTP {status}: {text[:500]}")
        try:
            data = httpx.Response(200, content=bytes(body)).json()
        except ValueError:
            raise _Retryable(f"invalid JSON from {url}: {text[:200]!r}") from None
        if not isinstance(data, dict):
            raise BackboneError(f"{url} answered {type(data).__name__}, not a JSON object: {text[:200]!r}")
        return data

    def _first_model(self, deadline_s: float) -> str:
        data = self._request("GET", "/models", deadline_s=deadline_s, retries=1)
        models = [m.get("id") for m in data.get("data", []) if isinstance(m, dict)]
        if not models:
            raise BackboneError(f"{self.base_url}/models lists no model; pass model=")
        return str(models[0])

    # -------------------------------------------------------------- sessions
    @property
    def session(self) -> str:
        """This thread's session id (a new one per episode, see :meth:`reset_cache`)."""
        if getattr(self._local, "session", None) is None:
            self._local.session = uuid.uuid4().hex
        return str(self._local.session)

    def reset_cache(self) -> None:
        """A new episode on this thread: a new session, so no server cache is shared."""
        self._local.session = uuid.uuid4().hex

    # ------------------------------------------------------------- generate
    def generate(self, messages: Sequence[Message], config: GenerationConfig = GenerationConfig()) -> Completion:
        payload: dict[str, Any] = {
            "model": self.model, "messages": [dict(m) for m in messages], "max_tokens": config.max_new_tokens,
            "temperature": config.temperature, "top_p": config.top_p, "user": self.session,
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
            usage = data.get("usage") or {}
            prompt_tokens, completion_tokens = int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise BackboneError(f"malformed chat completion from {self.base_url}: {str(data)[:300]}") from e
        return Completion(text=str(text), prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                          latency_s=time.perf_counter() - t0, finish_reason=str(choice.get("finish_reason") or "stop"))

    def generate_batch(
        self, batch: Sequence[Sequence[Message]], config: GenerationConfig = GenerationConfig()
    ) -> list[Completion]:
        """Concurrent requests, at most ``concurrency`` in flight."""
        if not batch:
            return []
        with ThreadPoolExecutor(max_workers=min(self.options.concurrency, len(batch))) as pool:
            return list(pool.map(lambda m: self.generate(m, config), batch))

    # ---------------------------------------------------------------- score
    def _tokenize(self, payload: dict[str, Any], deadline_s: float | None = None, retries: int | None = None) -> list[int]:
        if not self.dialect.tokenize:
            raise BackboneError(f"the {self.dialect.name} dialect has no /tokenize ({self.base_url})")
        data = self._request("POST", "/tokenize", {"model": self.model, **payload}, root=True,
                             deadline_s=deadline_s, retries=retries)
        tokens = data.get("tokens")
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise BackboneError(f"{self._root}/tokenize answered without token ids: {str(data)[:200]}")
        return tokens

    def candidate_ids(self, candidates: Sequence[str]) -> list[list[int]]:
        """Each command's token ids, tokenized once per text (a bounded cache): the commands
        not seen before go to the server in one ``/tokenize`` request per step, joined by a
        special token (text on either side of a special token is tokenized as if alone; the
        join is checked once against single requests), never one request per command."""
        with self._token_lock:
            missing = [c for c in dict.fromkeys(candidates) if c not in self._candidate_ids]
        if missing:
            found = self._tokenize_many(missing)
            with self._token_lock:
                for text, ids in zip(missing, found, strict=True):
                    self._candidate_ids[text] = ids or [0]
                while len(self._candidate_ids) > 50_000:
                    self._candidate_ids.popitem(last=False)
        with self._token_lock:
            return [list(self._candidate_ids[c]) for c in candidates]

    def _tokenize_many(self, texts: list[str]) -> list[list[int]]:
        separator = self._separator() if len(texts) > 1 else None
        if separator is None or any(separator[0] in t for t in texts):
            return [self._tokenize({"prompt": t, "add_special_tokens": False}) for t in texts]
        text, sep_id = separator
        ids = self._tokenize({"prompt": text.join(texts), "add_special_tokens": False})
        parts: list[list[int]] = [[]]
        for token in ids:
            if token == sep_id:
                parts.append([])
            else:
                parts[-1].append(token)
        if len(parts) != len(texts):  # a command held the separator's tokens: ask one by one
            return [self._tokenize({"prompt": t, "add_special_tokens": False}) for t in texts]
        return parts

    def _separator(self) -> tuple[str, int] | None:
        """A special token whose text the server tokenizes as that one token, checked to join
        commands without changing their tokens (probed once)."""
        with self._probe_lock:
            if self._join is False:
                self._join = self._probe_separator()
        return self._join if isinstance(self._join, tuple) else None

    def _probe_separator(self) -> tuple[str, int] | None:
        probe = ["look around", "open the door 2", "go to cabinet 1"]
        alone = [self._tokenize({"prompt": t, "add_special_tokens": False}) for t in probe]
        for text in SEPARATORS:
            one = self._tokenize({"prompt": text, "add_special_tokens": False})
            if len(one) != 1:
                continue
            joined = self._tokenize({"prompt": text.join(probe), "add_special_tokens": False})
            if joined == [t for i, ids in enumerate(alone) for t in ([one[0]] if i else []) + ids]:
                return text, one[0]
        return None

    def _prompt_logprobs(self, prompts: list[list[int]], method: str, deadline_s: float | None = None,
                         retries: int | None = None) -> list[list[float | None]]:
        payload: dict[str, Any] = {"model": self.model, "prompt": prompts, "max_tokens": 1, "temperature": 0.0,
                                   **self.dialect.scoring_payload(method)}
        data = self._request("POST", "/completions", payload, deadline_s=deadline_s, retries=retries)
        try:
            choices = sorted(data["choices"], key=lambda c: c["index"])
            out = [self.dialect.read_scoring(choice, ids, method) for choice, ids in zip(choices, prompts, strict=True)]
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise BackboneError(f"{self.base_url}/completions answered no {method} for the prompts: "
                                f"{str(data)[:300]}") from e
        return out

    def score(self, messages: Sequence[Message], candidates: Sequence[str], reduction: Reduction = "sum") -> Scores:
        """Log-likelihood of each candidate as the assistant's reply (see the module docstring)."""
        if not candidates:
            return Scores(())
        method = self.scoring_method()
        if method is None:
            with contextlib.suppress(BackboneError):  # what it can do instead, for the message
                self.supports_choice()
            raise BackboneError(self._no_scoring())
        prompt = self._tokenize({"messages": [dict(m) for m in messages], "add_generation_prompt": True})
        cands = self.candidate_ids(candidates)
        logprobs = self._prompt_logprobs([prompt + c for c in cands], method)
        values = []
        for lp, c in zip(logprobs, cands, strict=True):
            total = sum(v for v in lp[len(prompt):len(prompt) + len(c)] if v is not None)
            if not math.isfinite(total):
                raise BackboneError(f"{self.base_url} returned a log-probability of {total} for a candidate; "
                                    "the server is faulty (an infrastructure failure, not the agent's)")
            values.append(total / len(c) if reduction == "mean" else total)
        return Scores(tuple(values), len(prompt), sum(len(c) for c in cands))

    def scoring_method(self) -> str | None:
        """How this server scores candidates (``prompt_logprobs``, ``echo``), or ``None``; probed once."""
        if self._scoring is False:
            # An outage (Unreachable) leaves the question open: it is asked again next time,
            # rather than deciding for the whole run that the server cannot score.
            self._probe_faults = []
            if not (self.dialect.tokenize and self.dialect.scoring):
                self._probe_faults.append(f"the {self.dialect.name} dialect declares no token scoring "
                                          f"({self.dialect.offers()}), so none was asked for")
                self._scoring = None
                return None
            try:
                probe = self._tokenize({"prompt": "look around", "add_special_tokens": False},
                                       deadline_s=self.options.check_deadline_s, retries=1)
            except Unreachable:
                raise
            except BackboneError as e:
                self._probe_faults.append(f"/tokenize: {e}")
                self._scoring = None
                return None
            probe = probe or [0]
            for method in self.dialect.scoring:
                try:
                    lp = self._prompt_logprobs([probe + probe], method, deadline_s=self.options.check_deadline_s,
                                               retries=1)[0]
                except Unreachable:
                    raise
                except BackboneError as e:
                    self._probe_faults.append(f"{method}: {e}")
                    continue
                if len(lp) == 2 * len(probe) and all(v is not None and math.isfinite(v) for v in lp[1:]):
                    self._scoring = method
                    return method
                self._probe_faults.append(f"{method}: {len(lp)} log-probabilities for {2 * len(probe)} tokens, "
                                          f"some missing or not finite")
            self._scoring = None
        return self._scoring  # type: ignore[return-value]  # probed above: a method name or None, never False

    def _no_scoring(self) -> str:
        seen = "; ".join(getattr(self, "_probe_faults", [])) or "no answer"
        if not (self.dialect.tokenize and self.dialect.scoring) and not self.dialect.choice:
            return (f"{self.base_url} is served as the {self.dialect.name} dialect, which declares neither token "
                    "scoring nor a choice grammar, so the agent's 'choose' mode cannot run on it. Use the agent's "
                    "'generate' or 'react' action mode (agent: {action_mode: react}), or, if the server is vLLM "
                    "or ap-gym serve, serving: {dialect: vllm}")
        if self._choice:  # it does constrain a generation: that is another rule, named, never chosen for you
            return (f"{self.base_url} cannot score candidate commands (neither /tokenize with /v1/completions "
                    "prompt_logprobs nor echo + logprobs; what it answered: "
                    f"{seen[:600]}), but it offers structured outputs (choice): choose_method: constrained uses them "
                    "(greedy decoding under a choice grammar, another decision rule than the argmax of "
                    "log-likelihoods, reported as such), or use the agent's 'generate' or 'react' action mode")
        return (f"{self.base_url} cannot score candidate commands: it offers neither /tokenize with "
                "/v1/completions prompt_logprobs (vLLM, ap-gym serve) nor echo + logprobs, nor structured outputs (choice) "
                "(what it answered: "
                f"{seen[:600]}). Use the agent's 'generate' or 'react' action mode with this server "
                "(agent: {action_mode: react})")

    # --------------------------------------------------------------- choose
    def _choice_request(self, messages: Sequence[Message], candidates: Sequence[str],
                        deadline_s: float | None = None, retries: int | None = None) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "model": self.model, "messages": [dict(m) for m in messages], "temperature": 0.0,
            # a token is at least one character: the longest command bounds the answer
            "max_tokens": max(len(c) for c in candidates) + 8, "logprobs": True, "user": self.session,
            **self.dialect.choice_payload(candidates),
        }
        return self._request("POST", "/chat/completions", payload, deadline_s=deadline_s, retries=retries)

    def supports_choice(self) -> bool:
        """Whether the server constrains a generation to a list of choices (probed once, with
        two strings no model would write unasked: a server that ignores the field answers
        free text). An outage leaves the question open."""
        if self._choice is None and not self.dialect.choice:
            self._choice = False
        if self._choice is None:
            probes = ["zq-apgym-probe-one", "zq-apgym-probe-two"]
            try:
                data = self._choice_request([{"role": "user", "content": "Pick one."}], probes,
                                            deadline_s=self.options.check_deadline_s, retries=1)
                text = str(data["choices"][0]["message"]["content"] or "").strip()
            except Unreachable:
                raise
            except (BackboneError, KeyError, IndexError, TypeError):
                text = ""
            self._choice = text in probes
        return self._choice

    def choose(self, messages: Sequence[Message], candidates: Sequence[str]) -> Choice:
        """The command greedy decoding under a choice grammar writes, in one request over the
        server's prefix cache. Another decision rule than the argmax of log-likelihoods (the
        grammar accepts any tokenization of a command), and its log-probability is taken
        after the mask: kept as ``masked_logprob``, never as a log-likelihood."""
        if not candidates:
            raise ValueError("choose needs at least one candidate")
        data = self._choice_request(messages, candidates)
        try:
            choice = data["choices"][0]
            text = str(choice["message"]["content"] or "").strip()
            usage = data.get("usage") or {}
            content = (choice.get("logprobs") or {}).get("content") or []
            masked = float(sum(float(t["logprob"]) for t in content)) if content else None
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise BackboneError(f"malformed constrained choice from {self.base_url}: {str(data)[:300]}") from e
        if text not in candidates:
            raise BackboneError(f"{self.base_url} answered {text[:80]!r}, not one of the {len(candidates)} choices "
                                "it was constrained to; does it support structured outputs (choice)?")
        if masked is not None and not math.isfinite(masked):
            raise BackboneError(f"{self.base_url} returned a log-probability of {masked} for its choice")
        return Choice(text, masked, int(usage.get("prompt_tokens", 0) or 0),
                      int(usage.get("completion_tokens", 0) or 0))

    # --------------------------------------------------------------- search
    def _next_logprobs(self, rows: list[tuple[list[int], list[int]]], deadline_s: float | None = None,
                       retries: int | None = None) -> list[list[float]]:
        """For each ``(prompt ids, token ids)``, the raw log-probability of each token id as the
        next token (``logprob_token_ids``, at most 128 ids a row), one request for all rows."""
        ids = sorted({t for _, tokens in rows for t in tokens})
        payload = {"model": self.model, "prompt": [p for p, _ in rows], "max_tokens": 1, "temperature": 0.0,
                   **self.dialect.next_payload(ids)}
        data = self._request("POST", "/completions", payload, deadline_s=deadline_s, retries=retries)
        try:
            choices = sorted(data["choices"], key=lambda c: c["index"])
            raw = [self.dialect.read_next(choice, tokens) for choice, (_, tokens) in zip(choices, rows, strict=True)]
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise BackboneError(f"{self.base_url}/completions answered no logprob_token_ids for the prompts: "
                                f"{str(data)[:300]}") from e
        wrong = [v for row in raw for v in row
                 if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v > 1e-4]
        if wrong:  # a log-probability is a finite number at most 0: anything else would make a pick not exact
            raise BackboneError(f"{self.base_url} returned {wrong[0]!r} as a log-probability (one is a finite number "
                                "at most 0): the server is faulty, and no pick is made from its values")
        return [[float(v) for v in row] for row in raw]

    def _expand(self, prompt: list[int]) -> Expand:
        """The search's ``expand`` against this server: rows packed into requests of at most
        :data:`MAX_LOGPROB_TOKEN_IDS` distinct ids, the requests sent concurrently."""

        def expand(prefixes: list[tuple[int, ...]], children: list[list[int]]) -> list[list[float]]:
            rows = [(i, list(prompt) + list(prefix), tokens[k:k + MAX_LOGPROB_TOKEN_IDS])
                    for i, (prefix, tokens) in enumerate(zip(prefixes, children, strict=True))
                    for k in range(0, len(tokens), MAX_LOGPROB_TOKEN_IDS)]
            requests: list[list[tuple[int, list[int], list[int]]]] = [[]]
            for row in rows:
                ids = {t for _, _, tokens in requests[-1] for t in tokens}
                if requests[-1] and len(ids | set(row[2])) > MAX_LOGPROB_TOKEN_IDS:
                    requests.append([])
                requests[-1].append(row)
            with ThreadPoolExecutor(max_workers=min(self.options.concurrency, len(requests))) as pool:
                answers = list(pool.map(lambda rs: self._next_logprobs([(p, t) for _, p, t in rs]), requests))
            out: list[list[float]] = [[] for _ in prefixes]
            for rs, values in zip(requests, answers, strict=True):
                for (i, _, _), read in zip(rs, values, strict=True):
                    out[i] += read
            return out

        return expand

    def supports_search(self) -> bool:
        """Whether the server gives the raw log-probabilities of named next tokens over its
        prefix cache (vLLM's ``logprob_token_ids``), checked once against its own
        ``prompt_logprobs`` on a probe: equal to 1e-3 nats, or the search is not used (a
        server whose values are processed would make the search inexact). An outage leaves
        the question open."""
        if self._search is None and not (self.dialect.next_token_ids and self.dialect.tokenize
                                         and "prompt_logprobs" in self.dialect.scoring):
            self._search = False
        if self._search is None:
            try:
                probe = self._tokenize({"messages": [{"role": "user", "content": "Say yes."}],
                                        "add_generation_prompt": True},
                                       deadline_s=self.options.check_deadline_s, retries=1)
                words = self.candidate_ids(["yes", "no"])
                read = self._next_logprobs([(probe, [w[0] for w in words])],
                                           deadline_s=self.options.check_deadline_s, retries=1)[0]
                exact = self._prompt_logprobs([probe + [w[0]] for w in words], "prompt_logprobs",
                                              deadline_s=self.options.check_deadline_s, retries=1)
                self._search = all(abs(r - float(e[len(probe)] or 0.0)) < 1e-3 for r, e in zip(read, exact, strict=True))
            except Unreachable:
                raise
            except BackboneError:
                self._search = False
        return self._search

    def best(self, messages: Sequence[Message], candidates: Sequence[str]) -> Best:
        """The exact argmax of the candidates' summed log-likelihood, by a best-first search
        over their token trie (:func:`~ap_gym.backbones.search.best_first`), within the
        per-step budget (``serving.search_budget`` expansions, ``deadline_s``)."""
        if not candidates:
            raise ValueError("best needs at least one candidate")
        prompt = self._tokenize({"messages": [dict(m) for m in messages], "add_generation_prompt": True})
        cands = self.candidate_ids(candidates)
        found = best_first(cands, self._expand(prompt), batch=self.options.search_batch,
                           budget=self.options.search_budget, deadline=time.monotonic() + self.options.deadline_s)
        return Best(found.index, found.scored, len(prompt), found.read, found.rounds)

    def check(self, *, scoring: bool) -> dict[str, Any]:
        """At the start of a run: the model is listed and, when ``scoring``, candidates can be
        scored or chosen by a constrained generation; otherwise a clear
        :class:`BackboneError` before any episode runs."""
        models = self._request("GET", "/models", deadline_s=self.options.check_deadline_s, retries=1)
        names = [m.get("id") for m in models.get("data", []) if isinstance(m, dict)]
        if self.model not in names:
            raise BackboneError(f"{self.base_url} does not serve {self.model!r} (it lists {names})")
        method = self.scoring_method() if scoring else None
        search = self.supports_search() if scoring else None
        choice = self.supports_choice() if scoring else None
        if scoring and method is None and not search and not choice:
            raise BackboneError(self._no_scoring())
        return {"model": self.model, "scoring": method, "search": search, "choice": choice}

    def describe(self) -> dict[str, Any]:
        return {"kind": "openai", "identity": self.identity, "base_url": self.base_url, "model": self.model,
                "dialect": self.dialect.name,
                "scoring": self._scoring or None, "search": self._search, "choice": self._choice,
                "options": self.options.to_dict()}

    def close(self) -> None:
        self._client.close()
