"""The records and protocols that the rollout loop, policies and reports share.

An :class:`Episode` is the unit of every result file: immutable, JSON-round-trippable,
and complete enough that a person can see what the model saw at each step.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

__all__ = [
    "PURPOSES",
    "Embedder",
    "Episode",
    "Policy",
    "PolicyTrace",
    "StatefulPolicy",
    "Step",
    "StepTrace",
    "Termination",
    "Usage",
    "UsageMeter",
]

#: Why an LLM call was made. Reports split acting from everything else.
PURPOSES = ("acting", "synthesis", "reflection", "maintenance", "admission")


class Termination(enum.StrEnum):
    """How an episode ended. Only ``WON`` is a success; ``INFRA`` is not a task outcome.

    ``PROMPT_REJECTED``: the model refused the method's own prompt (it overflowed the
    context, or the server rejected it as malformed). That is the method's doing, so it is
    a failed task in every rate, never an infrastructure failure to leave out.
    """

    WON = "won"
    LOST = "lost"
    STEP_LIMIT = "step_limit"
    PROMPT_REJECTED = "prompt_rejected"
    INFRA = "infrastructure_failure"


@dataclass(frozen=True)
class Usage:
    """LLM calls and tokens by purpose, plus embedding calls (which are not LLM calls)."""

    calls: Mapping[str, int] = field(default_factory=dict)
    prompt_tokens: Mapping[str, int] = field(default_factory=dict)
    completion_tokens: Mapping[str, int] = field(default_factory=dict)
    embedding_calls: int = 0

    @property
    def llm_calls(self) -> int:
        return sum(self.calls.values())

    def calls_for(self, purpose: str) -> int:
        return self.calls.get(purpose, 0)

    def __add__(self, other: Usage) -> Usage:
        def merge(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
            out = dict(a)
            for k, v in b.items():
                out[k] = out.get(k, 0) + v
            return out

        return Usage(
            merge(self.calls, other.calls),
            merge(self.prompt_tokens, other.prompt_tokens),
            merge(self.completion_tokens, other.completion_tokens),
            self.embedding_calls + other.embedding_calls,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "llm_calls": self.llm_calls,
            "calls": dict(self.calls),
            "prompt_tokens": dict(self.prompt_tokens),
            "completion_tokens": dict(self.completion_tokens),
            "embedding_calls": self.embedding_calls,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Usage:
        return cls(
            dict(d.get("calls", {})),
            dict(d.get("prompt_tokens", {})),
            dict(d.get("completion_tokens", {})),
            int(d.get("embedding_calls", 0)),
        )


class UsageMeter:
    """Mutable accumulator a policy keeps for the episode in progress."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._calls: dict[str, int] = {}
        self._prompt: dict[str, int] = {}
        self._completion: dict[str, int] = {}
        self._embed = 0

    def record(self, purpose: str, prompt_tokens: int = 0, completion_tokens: int = 0) -> None:
        if purpose not in PURPOSES:
            raise ValueError(f"unknown call purpose {purpose!r}; use one of {PURPOSES}")
        self._calls[purpose] = self._calls.get(purpose, 0) + 1
        self._prompt[purpose] = self._prompt.get(purpose, 0) + int(prompt_tokens)
        self._completion[purpose] = self._completion.get(purpose, 0) + int(completion_tokens)

    def record_embedding(self, n: int = 1) -> None:
        self._embed += n

    def snapshot(self) -> Usage:
        return Usage(dict(self._calls), dict(self._prompt), dict(self._completion), self._embed)


@dataclass(frozen=True)
class Step:
    """One environment step: the action, what came back, and what the policy saw.

    ``candidates`` and ``reduction`` are set when the policy chose among admissible
    commands by score: the best-scored candidates as ``(command, score)``, best first,
    and how token log-likelihoods were reduced (``"sum"`` or ``"mean"``). ``logprob`` is
    the policy's log-probability of the action it took, when it sampled one (a stochastic
    ``choose``, a sampled generation): what a policy-gradient trainer needs.
    ``messages`` is the chat the backbone saw, when the agent records it
    (``AgentConfig.record_messages``); ``prompt`` is always its readable transcript.
    ``seconds`` is the step's wall time: from the previous observation to this one (the
    policy's decision and the env's step).
    """

    action: str
    observation: str
    reward: float
    score: float | None = None
    prompt: str | None = None
    response: str | None = None
    parse_failure: bool = False
    reasoning: str | None = None
    candidates: tuple[tuple[str, float], ...] | None = None
    reduction: str | None = None
    logprob: float | None = None
    messages: tuple[Mapping[str, str], ...] | None = None
    seconds: float | None = None

    #: Fields a step carries only when they were set (omitted from JSON otherwise).
    OPTIONAL: ClassVar[tuple[str, ...]] = ("candidates", "reduction", "logprob", "messages", "seconds")

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        for key in self.OPTIONAL:
            if d[key] is None:
                del d[key]
        if d.get("messages") is not None:
            d["messages"] = [dict(m) for m in d["messages"]]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Step:
        d = dict(d)
        if d.get("candidates") is not None:
            d["candidates"] = tuple((str(c), float(v)) for c, v in d["candidates"])
        if d.get("messages") is not None:
            d["messages"] = tuple({"role": str(m["role"]), "content": str(m["content"])} for m in d["messages"])
        return cls(**d)


@dataclass(frozen=True)
class StepTrace:
    """What a policy reports about one ``act`` call: the exact prompt and raw output, the
    reasoning the model wrote before its action (ReAct), and the scored candidates when
    it chose among admissible commands (see :class:`Step`)."""

    prompt: str | None = None
    response: str | None = None
    parse_failure: bool = False
    reasoning: str | None = None
    candidates: tuple[tuple[str, float], ...] | None = None
    reduction: str | None = None
    logprob: float | None = None
    messages: tuple[Mapping[str, str], ...] | None = None


@dataclass(frozen=True)
class PolicyTrace:
    """A policy's account of the episode in progress, merged into the Episode by the loop.

    Attributes:
        usage: LLM and embedding calls made for this episode so far.
        steps: one entry per ``act`` call, in order.
        info: policy-specific decisions (mode, bandit scores, retrieved ids, guidance).
    """

    usage: Usage = field(default_factory=Usage)
    steps: tuple[StepTrace, ...] = ()
    info: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Episode:
    """An immutable record of one episode, the unit of every results file."""

    task_id: str
    task_family: str
    instruction: str
    initial_observation: str
    steps: tuple[Step, ...]
    success: bool
    score: float | None
    max_score: float | None
    termination: Termination
    wall_time_s: float = 0.0
    usage: Usage = field(default_factory=Usage)
    error: str | None = None
    seed: int | None = None
    policy_info: Mapping[str, Any] = field(default_factory=dict)
    training: bool = False

    @property
    def num_steps(self) -> int:
        return len(self.steps)

    @property
    def infrastructure_failure(self) -> bool:
        return self.termination is Termination.INFRA

    @property
    def parse_failures(self) -> int:
        return sum(s.parse_failure for s in self.steps)

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "task_family": self.task_family,
            "instruction": self.instruction,
            "initial_observation": self.initial_observation,
            "success": self.success,
            "score": self.score,
            "max_score": self.max_score,
            "termination": self.termination.value,
            "num_steps": self.num_steps,
            "parse_failures": self.parse_failures,
            "wall_time_s": self.wall_time_s,
            "usage": self.usage.to_dict(),
            "error": self.error,
            "seed": self.seed,
            "training": self.training,
            "policy_info": dict(self.policy_info),
            "steps": [s.to_dict() for s in self.steps],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Episode:
        return cls(
            task_id=d["task_id"],
            task_family=d["task_family"],
            instruction=d["instruction"],
            initial_observation=d.get("initial_observation", ""),
            steps=tuple(Step.from_dict(s) for s in d.get("steps", [])),
            success=bool(d["success"]),
            score=d.get("score"),
            max_score=d.get("max_score"),
            termination=Termination(d["termination"]),
            wall_time_s=float(d.get("wall_time_s", 0.0)),
            usage=Usage.from_dict(d.get("usage", {})),
            error=d.get("error"),
            seed=d.get("seed"),
            policy_info=dict(d.get("policy_info", {})),
            training=bool(d.get("training", False)),
        )

    def summary_line(self) -> str:
        return (
            f"{self.task_id}: {self.termination.value} success={self.success} "
            f"score={self.score} steps={self.num_steps} llm_calls={self.usage.llm_calls}"
        )


@runtime_checkable
class Policy(Protocol):
    """The interface every agent implements; the rollout loop needs nothing else.

    Like a torch module, a policy is in training or evaluation mode; in evaluation mode
    nothing it does may change state that a later episode can see.
    """

    training: bool

    def begin(self, observation: str, info: Mapping[str, Any]) -> None: ...

    def act(self, observation: str, info: Mapping[str, Any]) -> str: ...

    def trace(self) -> PolicyTrace: ...

    def end(self, episode: Episode) -> Usage | None: ...

    def train(self, mode: bool = True) -> Policy: ...

    def eval(self) -> Policy: ...


@runtime_checkable
class StatefulPolicy(Policy, Protocol):
    """A policy whose state outlives an episode (a memory): it can be snapshotted,
    restored, emptied and closed, and says how to rebuild it.

    The protocol snapshots it after each iteration's training and evaluates held-out
    tasks against that snapshot, so a resumed or distributed run sees the same state;
    it sets ``iteration`` before each iteration's training.
    """

    iteration: int

    def save_state(self, directory: str | Path) -> Path: ...

    def load_state(self, directory: str | Path) -> StatefulPolicy: ...

    def clear_state(self) -> StatefulPolicy: ...

    def close(self) -> None: ...

    def spec(self) -> dict[str, Any]: ...


@runtime_checkable
class Embedder(Protocol):
    """Task text to vectors: ``embed(texts)`` returns an ``(n, dim)`` float32 array of
    unit-length rows; ``identity`` names the model (saved with results). Memory indexes
    records by it, the bandit measures similarity with it."""

    identity: str
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...
