"""Batched acting: several episodes in lock-step share one forward pass per step.

Each episode runs in its own thread (a *lane*) with its own env and policy, and its
policy talks to a :class:`LaneBackbone`, a view of one :class:`BatchingBackbone`. A call
waits until every lane that is still running has a call waiting (or ``max_wait_s``
passed, so a lane busy with a slow reset cannot stall the rest); then one thread runs
all waiting calls together: ``score`` calls through the backbone's ``score_batch``
(one padded forward pass for all lanes' candidates), ``generate`` calls with the same
decoding options through ``generate_batch``. Policies need no change: a lane is just a
backbone to them.

Each lane keeps its own KV cache inside the backbone, so a step prefills only that
lane's new tokens (one row at a time), and then the candidates of all lanes are scored
in one forward pass over the lanes' caches stacked into a padded batch. Scores can
differ from unbatched ones in the last bits (padding changes the order of float sums);
``benchmarks/throughput.py`` reports whether the chosen actions stayed the same. On a
CPU a batch costs about as much as its rows one by one, so the gain there is the saved
per-call overhead; an accelerator, where a batch costs about one row, gains more. With a
served backbone the lanes are concurrent requests, batched by the server (vLLM, SGLang).

Why threads rather than Gymnasium's vector API: a vector env resets its sub-envs itself
(autoreset) and has one ``step`` for all, but here every lane plays its own task ids,
calls ``policy.begin``/``end`` and retries infrastructure failures on its own schedule;
threads keep :func:`~ap_gym.rollout.run_episode` the one rollout loop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ap_gym.backbones.base import (
    Completion,
    EpisodeCache,
    GenerationConfig,
    Message,
    Reduction,
    Scores,
)

__all__ = ["BatchingBackbone", "LaneBackbone"]


@dataclass
class _Call:
    kind: str
    args: tuple[Any, ...]
    result: Any = None
    error: BaseException | None = None
    done: bool = False
    lane: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class BatchingBackbone:
    """Gathers concurrent calls from ``lanes`` threads into batched calls on ``inner``.

    Args:
        inner: a :class:`~ap_gym.backbones.base.BatchScorer` with ``generate_batch`` (an
            in-process :class:`~ap_gym.backbones.hf.TransformersBackbone`).
        lanes: the number of lane threads that will call it.
        max_wait_s: the longest a call waits for the other lanes before running anyway.
    """

    def __init__(self, inner: Any, lanes: int, max_wait_s: float = 0.5) -> None:
        self.inner = inner
        self.identity = inner.identity
        self.max_wait_s = max_wait_s
        self._active = lanes
        self._cond = threading.Condition()
        self._pending: list[_Call] = []
        self._running = False
        #: batches run and calls served, for reports and benchmarks.
        self.stats = {"batches": 0, "calls": 0}

    def lane(self, index: int) -> LaneBackbone:
        return LaneBackbone(self, index)

    def start(self, lanes: int) -> None:
        """Before a round of episodes: ``lanes`` threads will call."""
        with self._cond:
            self._active = lanes

    def retire(self) -> None:
        """A lane has no more episodes: stop waiting for it."""
        with self._cond:
            self._active -= 1
            self._cond.notify_all()

    def call(self, call: _Call) -> Any:
        deadline = time.monotonic() + self.max_wait_s
        with self._cond:
            self._pending.append(call)
            self._cond.notify_all()
            while not call.done:
                ready = len(self._pending) >= max(self._active, 1) or time.monotonic() >= deadline
                if ready and not self._running and self._pending:
                    batch, self._pending, self._running = self._pending, [], True
                    self._cond.release()
                    try:
                        self._run(batch)
                    finally:
                        self._cond.acquire()
                        self._running = False
                        self._cond.notify_all()
                else:
                    self._cond.wait(timeout=max(0.001, deadline - time.monotonic()) if not ready else 0.05)
        if call.error is not None:
            raise call.error
        return call.result

    def _run(self, batch: list[_Call]) -> None:
        self.stats["batches"] += 1
        self.stats["calls"] += len(batch)
        scores = [c for c in batch if c.kind == "score"]
        generates: dict[GenerationConfig, list[_Call]] = {}
        for c in batch:
            if c.kind == "generate":
                generates.setdefault(c.args[1], []).append(c)
        groups: list[tuple[list[_Call], Any]] = []
        if scores:  # each lane keeps its own KV cache inside the backbone
            groups.append((scores, lambda cs: self.inner.score_batch([c.args for c in cs], keys=[
                (id(self), c.lane) for c in cs])))
        for config, calls in generates.items():
            groups.append((calls, lambda cs, config=config: self.inner.generate_batch([c.args[0] for c in cs], config)))
        for calls, fn in groups:
            try:
                results = fn(calls)
                for c, r in zip(calls, results, strict=True):
                    c.result = r
            except BaseException as e:  # every caller of the failed batch sees the error
                for c in calls:
                    c.error = e
            finally:
                for c in calls:
                    c.done = True

    def describe(self) -> dict[str, Any]:
        return self.inner.describe()


class LaneBackbone:
    """One lane's view of a :class:`BatchingBackbone`; a policy uses it as its backbone."""

    def __init__(self, batcher: BatchingBackbone, index: int) -> None:
        self.batcher = batcher
        self.index = index
        self.identity = batcher.identity

    def score(self, messages: Sequence[Message], candidates: Sequence[str], reduction: Reduction = "sum") -> Scores:
        return self.batcher.call(_Call("score", (list(messages), list(candidates), reduction), lane=self.index))

    def generate(self, messages: Sequence[Message], config: GenerationConfig = GenerationConfig()) -> Completion:
        return self.batcher.call(_Call("generate", (list(messages), config), lane=self.index))

    def generate_batch(self, batch: Sequence[Sequence[Message]],
                       config: GenerationConfig = GenerationConfig()) -> list[Completion]:
        return [self.generate(m, config) for m in batch]

    def reset_cache(self) -> None:
        """A new episode on this lane: drop its KV cache, as an unbatched episode would."""
        if isinstance(self.batcher.inner, EpisodeCache):
            self.batcher.inner.reset_cache((id(self.batcher), self.index))  # type: ignore[call-arg]  # the inner backbone's reset_cache takes a lane key; the protocol's does not

    def describe(self) -> dict[str, Any]:
        return {**self.batcher.describe(), "batched_lanes": True}
