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
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = [
    "DECISION_FIELDS",
    "PURPOSES",
    "Decisions",
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
    "WorldFacts",
    "declare_decision",
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

    @property
    def tokens(self) -> int:
        """Prompt and completion tokens over every purpose: what the calls cost."""
        return sum(self.prompt_tokens.values()) + sum(self.completion_tokens.values())

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
class StepTrace:
    """What a policy reports about one ``act`` call; a :class:`Step` holds it whole.

    Attributes:
        prompt: the readable transcript of the chat the backbone saw.
        response: the model's raw output (or, for ``choose``, what was chosen and why).
        parse_failure: the output had to be repaired to become a command.
        reasoning: the thought a ReAct reply wrote before its action.
        candidates: when the policy chose among admissible commands by their
            log-likelihood: the best candidates as ``(command, log-likelihood)``, best
            first. Only true log-likelihoods of a command's canonical tokens are kept here.
        reduction: how token log-likelihoods were reduced (``"sum"`` or ``"mean"``), or
            ``"constrained"`` when a constrained generation chose (then ``candidates`` is
            ``None``: its values are not log-likelihoods).
        logprob: the policy's log-probability of the action it took, when it sampled one
            (a stochastic ``choose``, a sampled generation): what a policy gradient needs.
        messages: the chat the backbone saw, when the agent records it.
        masked_logprob: a constrained generation's log-probability of its pick, taken after
            the grammar's mask (renormalised over the allowed tokens): kept under its own
            name because it is not the model's log-likelihood of the command.
    """

    prompt: str | None = None
    response: str | None = None
    parse_failure: bool = False
    reasoning: str | None = None
    candidates: tuple[tuple[str, float], ...] | None = None
    reduction: str | None = None
    logprob: float | None = None
    messages: tuple[Mapping[str, str], ...] | None = None
    masked_logprob: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The fields that were set (a default is left out, so a bare step stays small)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None or (f.name == "parse_failure" and not value):
                continue
            if f.name == "candidates":
                value = [[c, v] for c, v in value]
            elif f.name == "messages":
                value = [dict(m) for m in value]
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> StepTrace:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in d.items() if k in known}
        if values.get("candidates") is not None:
            values["candidates"] = tuple((str(c), float(v)) for c, v in values["candidates"])
        if values.get("messages") is not None:
            values["messages"] = tuple({"role": str(m["role"]), "content": str(m["content"])}
                                       for m in values["messages"])
        values["parse_failure"] = bool(values.get("parse_failure", False))
        return cls(**values)


@dataclass(frozen=True)
class Step:
    """One environment step: the action, what came back, and the policy's trace of it.

    ``seconds`` is the step's wall time: from the previous observation to this one (the
    policy's decision and the env's step). ``trace`` is what the policy said about the
    step (:class:`StepTrace`): the prompt, the raw response, the scored candidates.
    """

    action: str
    observation: str
    reward: float
    score: float | None = None
    seconds: float | None = None
    trace: StepTrace = StepTrace()

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"action": self.action, "observation": self.observation, "reward": self.reward,
                             "score": self.score}
        if self.seconds is not None:
            d["seconds"] = self.seconds
        trace = self.trace.to_dict()
        if trace:
            d["trace"] = trace
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Step:
        seconds = d.get("seconds")
        return cls(str(d["action"]), str(d["observation"]), float(d["reward"]), d.get("score"),
                   float(seconds) if seconds is not None else None, StepTrace.from_dict(d.get("trace") or {}))


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
        return sum(s.trace.parse_failure for s in self.steps)

    def header_dict(self) -> dict[str, Any]:
        """Everything but the steps (with their count): what a reader of outcomes needs."""
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
        }

    def to_dict(self) -> dict[str, Any]:
        """The episode as JSON: :meth:`header_dict` and its steps."""
        return {**self.header_dict(), "steps": [s.to_dict() for s in self.steps]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], steps: Sequence[Mapping[str, Any]] | None = None) -> Episode:
        """The episode of :meth:`to_dict` (or of a header and ``steps`` read apart)."""
        return cls(
            task_id=str(d["task_id"]),
            task_family=str(d["task_family"]),
            instruction=str(d["instruction"]),
            initial_observation=str(d.get("initial_observation", "")),
            steps=tuple(Step.from_dict(s) for s in (d.get("steps", []) if steps is None else steps)),
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


@dataclass(frozen=True)
class WorldFacts:
    """What an engine knows of a task's world at its start: the ground truth a grounded
    labeller checks an abstraction's claims against (:mod:`ap_gym.report.grounded`).

    Names are the ones the agent reads ("mug 1", "red key", "sinkbasin 1"). An engine
    fills what it can; what it leaves empty cannot be checked, and a claim about it stays
    unclassified (never "correct").

    Attributes:
        task_id: the task.
        family: its task family (universal claims are checked over a family's tasks).
        where: each object's holders at the start: the receptacle, container, supporter
            or room it is in or on (an object may sit in a container in a room: both).
        needs: what an action requires, by verb (``"cut": ("knife",)``) or by verb and
            object (``"unlock chest": ("red key",)``); ``"open"`` lists under ``"closed"``
            the holders that must be opened before anything is taken from or put in them.
        plan: a command sequence that wins the task (the walkthrough or expert plan).
        objects: every name in the world (objects, holders, rooms).
        engine: what produced the facts (for the report).
    """

    task_id: str
    family: str = ""
    where: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    needs: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    plan: tuple[str, ...] = ()
    objects: tuple[str, ...] = ()
    engine: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "family": self.family, "where": {k: list(v) for k, v in self.where.items()},
                "needs": {k: list(v) for k, v in self.needs.items()}, "plan": list(self.plan),
                "objects": list(self.objects), "engine": self.engine}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WorldFacts:
        """From :meth:`to_dict`'s output (what ``worlds.jsonl`` holds); ``ValueError`` otherwise."""
        try:
            return cls(str(data["task_id"]), str(data.get("family") or ""),
                       {str(k): tuple(str(x) for x in v) for k, v in dict(data.get("where") or {}).items()},
                       {str(k): tuple(str(x) for x in v) for k, v in dict(data.get("needs") or {}).items()},
                       tuple(str(x) for x in data.get("plan") or ()), tuple(str(x) for x in data.get("objects") or ()),
                       str(data.get("engine") or ""))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ValueError(f"not a world-facts record: {str(data)[:120]} ({e})") from None



def _decision(doc: str, default: Any = None) -> Any:
    return field(default=default, metadata={"doc": doc})


@dataclass(frozen=True)
class Decisions:
    """What a policy decided in one episode, typed: the one declaration of the record's
    decision keys (``Episode.policy_info``, written as a mapping). The report, the viewer and
    the audit read these attributes, never the mapping's strings, so a renamed key fails a
    type check and the tests (every key a built-in policy writes is declared here, and every
    one the viewer page reads), instead of making a table vanish. A value of the wrong type reads as
    absent. A design of a user's declares its own keys with :func:`declare_decision` (the
    viewer then shows them, with their notes, under ``extra``)."""

    # the acting agent's
    action_mode: str | None = _decision("how the agent acted: choose, generate or react")
    choice_method: str | None = _decision("how choose picked: scored, searched or constrained")
    history_trimmed: int | None = _decision("turn pairs dropped to keep the prompt inside its token budget")
    walkthrough_length: int | None = _decision("the walkthrough policy's plan length")
    # every memory design's
    guidance: str | None = _decision("the guidance block the agent's prompt showed")
    embedding_failed: str | None = _decision("why the task could not be embedded (no memory was used)")
    retrieved_records: tuple[int, ...] = _decision("trajectory records retrieved for the prompt", ())
    similarities: tuple[float, ...] = _decision("their similarity to the task", ())
    abstractions_in_prompt: tuple[int, ...] = _decision("stored abstractions the prompt showed", ())
    retrieved_abstractions: tuple[int, ...] = _decision("stored abstractions retrieved (shown or withheld)", ())
    withheld_abstractions: tuple[int, ...] = _decision("retrieved abstractions withheld by the exposure coin", ())
    rejected_abstractions: tuple[Mapping[str, Any], ...] = _decision(
        "abstractions the admission judge refused (text, sources, parents)", ())
    same_task_records_retrieved: int | None = _decision("records of this very task retrieved (training)")
    exposure: Mapping[str, Any] | None = _decision("the randomised-exposure coin and what it withheld")
    end_failed: bool | None = _decision("the policy's end-of-episode work failed (a backbone died)")
    # Anti-Persistence's
    mode: str | None = _decision("Anti-Persistence: the mode the bandit chose")
    mode_reason: str | None = _decision("Anti-Persistence: why (start-up, epsilon, fallback, utility)")
    mean_similarity: float | None = _decision("Anti-Persistence: the neighbourhood's mean similarity")
    utilities: Mapping[str, Any] | None = _decision("Anti-Persistence: each mode's utility")
    synthesis_calls: int | None = _decision("Anti-Persistence: synthesis calls made (0 when skipped)")
    synthesis_skipped: bool | None = _decision("Anti-Persistence: the mode's records were missing: no call")
    memory_empty: bool | None = _decision("Anti-Persistence: trajectory memory was empty")
    mode_guidance: str | None = _decision("Anti-Persistence: the guidance its mode wrote")
    # AutoRefine's
    evolved_family: str | None = _decision("AutoRefine: the family whose skills evolved")
    #: keys no field declares: a user's design's (see :func:`declare_decision`)
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, info: Mapping[str, Any]) -> Decisions:
        """The typed decisions of a record's ``policy_info`` (tolerant: damage reads as absent)."""
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name == "extra" or f.name not in info:
                continue
            value = _typed(info[f.name], f.type if isinstance(f.type, str) else str(f.type))
            if value is not None:
                values[f.name] = value
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**values, extra={k: v for k, v in info.items() if k not in known})


def _typed(value: Any, hint: str) -> Any:
    """``value`` if it is of the declared kind (``hint`` is the field's annotation), else None."""
    if hint.startswith("tuple[int"):
        return tuple(v for v in value if isinstance(v, int) and not isinstance(v, bool)) \
            if isinstance(value, list | tuple) else None
    if hint.startswith("tuple[float"):
        return tuple(float(v) for v in value if isinstance(v, int | float) and not isinstance(v, bool)) \
            if isinstance(value, list | tuple) else None
    if hint.startswith("tuple[Mapping"):
        return tuple(v for v in value if isinstance(v, Mapping)) if isinstance(value, list | tuple) else None
    if hint.startswith("Mapping"):
        return value if isinstance(value, Mapping) else None
    if hint.startswith("bool"):
        return value if isinstance(value, bool) else None
    if hint.startswith("int"):
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    if hint.startswith("float"):
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
    if hint.startswith("str"):
        return value if isinstance(value, str) else None
    return value


#: Every decision key with its note: the declared fields', then those designs declare.
DECISION_FIELDS: dict[str, str] = {f.name: str(f.metadata.get("doc", "")) for f in dataclasses.fields(Decisions)
                                   if f.name != "extra"}


def declare_decision(name: str, doc: str) -> None:
    """Declare a decision key a design of yours records (``self.decisions[name] = ...``), with
    what it holds: the viewer shows it with this note (read from ``Decisions.extra``)."""
    if name in DECISION_FIELDS and DECISION_FIELDS[name] != doc:
        raise ValueError(f"decision {name!r} is declared already ({DECISION_FIELDS[name]!r})")
    DECISION_FIELDS[name] = doc
