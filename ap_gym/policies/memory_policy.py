"""A memory policy: the acting agent, a memory and a design, composed.

Per episode it

1. embeds the task (the memory);
2. asks the design for guidance blocks, which go into the agent's system prompt under
   their own headers, and notes which stored abstractions they contain;
3. acts (the agent);
4. in training mode only, stores the trajectory record (the memory) and lets the design
   learn. Infrastructure failures and episodes whose embedding failed are never stored.

Options every design accepts: ``frozen_abstractions`` (a fixed layer of given skills shown
on top of the design's own guidance, the ``frozen_budget`` nearest the task: the paper's
frozen-skill layer) and ``admission`` (a judge that accepts or rejects each new
abstraction before it is stored: a callable ``(text, episode) -> bool`` or ``"llm"`` for an
LLM judge, the paper's selective-retention experiment). The LLM judge is the acting
backbone unless ``judge_backbone`` names another (the paper's judge was a stronger model
than the actor); its calls count under ``admission``. ``synthesis_backbone`` likewise gives
synthesis, reflection and maintenance a backbone of their own (an agent trained to act may
no longer write guidance; the paper's synthesis is by the acting model, the default). A run config may name a skills file
written by ``ap-gym skills`` as ``frozen_abstractions``; the protocol reads it.

:func:`register_design` turns one design dataclass into a registered policy: its fields
become the policy's options beside these, so a new design is one class in one file.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from pydantic import BaseModel, Field

from ap_gym.backbones.base import Backbone, GenerationConfig
from ap_gym.memory import AbstractionStore, Memory, OutcomeLog, TrajectoryStore
from ap_gym.options import Options
from ap_gym.policies.design import Admission, Design, Synthesiser, TaskContext
from ap_gym.policies.react import AgentConfig, ReActAgent
from ap_gym.policies.registry import register_policy, spec_of
from ap_gym.seeding import derived_rng
from ap_gym.types import Embedder, Episode, PolicyTrace, Usage

__all__ = ["MEMORY_NEEDS", "MEMORY_SUPPORTS", "MemoryConfig", "MemoryPolicy", "design_policy", "policy_of",
           "register_design"]

#: What every memory design asks of the protocol, and what it supports.
MEMORY_NEEDS = ("backbone", "embedder", "store", "seed")
MEMORY_SUPPORTS = ("snapshots", "training")
FROZEN_HEADER = "Skills"


class MemoryConfig(Options):
    """Options shared by the memory designs.

    Attributes:
        budget: records (or abstractions) retrieved per task: the spec's B = 5.
        record_tokens: each record is compressed to about this many tokens in a prompt
            (see :func:`~ap_gym.policies.records.format_record`).
        embed_obs_chars: how much of the first observation joins the instruction in the task embedding.
        synthesis: decoding options for synthesis, reflection and maintenance calls.
        exclude_same_task: during training, never retrieve records of the task being
            played. Training draws tasks with replacement from small pools, so retrieval
            would otherwise often show the task its own earlier attempt (similarity ~1),
            which held-out tasks never see. Off by default (the paper's protocol); the
            share of training episodes where it happened is reported either way.
    """

    budget: int = Field(default=5, ge=1)
    record_tokens: int = Field(default=400, ge=1)
    embed_obs_chars: int = Field(default=300, ge=0)
    synthesis: GenerationConfig = GenerationConfig(max_new_tokens=160)
    exclude_same_task: bool = False


class MemoryPolicy:
    """An agent, a memory and a design; see the module docstring.

    Args:
        backbone: the LLM for acting and synthesis.
        embedder: task embeddings (default: the packaged all-MiniLM-L6-v2).
        design: what to retrieve and what to write (:class:`~ap_gym.policies.design.Design`).
        db_path: the memory database; ``None`` makes a temporary one.
        agent: the acting agent's options.
        memory: a :class:`MemoryConfig` (or its options).
        seed: seeds the design's random choices (derived per task, so order-free).
        frozen_abstractions: a fixed layer of skills shown on top of the guidance: texts,
            or ``{"text": ..., "embedding": [...]}`` entries (a skills file's, read by the
            protocol), retrieved by similarity to the task.
        frozen_budget: how many of them a prompt shows, the nearest the task first
            (``None``: all of them).
        admission: a judge for new abstractions (``None`` admits all).
        judge_backbone: the LLM judge's own backbone (default: the acting one).
        synthesis_backbone: the backbone that writes guidance, abstractions, reflections and
            maintenance (default: the acting one, as in the paper).
        randomise_exposure: in training, the chance that a task's retrieved stored
            abstractions are withheld from its prompt (a recorded coin, drawn from the seed,
            the iteration and the records so far): the abstractions synthesised from its
            record then have no parents, and the audit compares the coin's two arms among
            the invocations a flagged abstraction would have reached, a randomised contrast
            (the protocol's ``audit: {randomise_exposure: p}``). 0: never (the paper's).
    """

    def __init__(
        self,
        backbone: Backbone,
        embedder: Embedder | None = None,
        *,
        design: Design,
        db_path: str | Path | None = None,
        agent: AgentConfig | Mapping[str, Any] | None = None,
        memory: MemoryConfig | Mapping[str, Any] | None = None,
        seed: int = 0,
        frozen_abstractions: Sequence[str | Mapping[str, Any]] | str = (),
        frozen_budget: int | None = 5,
        admission: Admission | str | None = None,
        judge_backbone: Backbone | None = None,
        synthesis_backbone: Backbone | None = None,
        randomise_exposure: float = 0.0,
    ) -> None:
        if isinstance(randomise_exposure, bool) or not isinstance(randomise_exposure, int | float) \
                or not 0.0 <= randomise_exposure <= 1.0:
            raise ValueError(f"randomise_exposure is a probability between 0 and 1, not {randomise_exposure!r}")
        if isinstance(admission, str) and admission != "llm":
            raise ValueError("admission must be a callable, 'llm' or None")
        if judge_backbone is not None and admission != "llm":
            raise ValueError("judge_backbone is the LLM judge's backbone: set admission: llm with it")
        for name, value in (("judge_backbone", judge_backbone), ("synthesis_backbone", synthesis_backbone)):
            if isinstance(value, str):
                raise ValueError(f"{name} {value!r} was not resolved to a backbone; in a run config name one of "
                                 "the run's backbones (backbones:) or judges (judges:), or a backbone spec")
        if isinstance(frozen_abstractions, str | Path):
            raise ValueError(f"frozen_abstractions {str(frozen_abstractions)!r} is a path: read it with "
                             "ap_gym.protocol.skills.read_skills (a run config's path is read by the protocol)")
        if embedder is None:
            from ap_gym.backbones.embedders import SentenceTransformerEmbedder

            embedder = SentenceTransformerEmbedder()
        self.config = MemoryConfig.coerce(memory)
        self.agent = ReActAgent(backbone, agent, seed)
        self.memory = Memory(embedder, db_path, seed=seed, embed_obs_chars=self.config.embed_obs_chars,
                             exclude_same_task=self.config.exclude_same_task)
        self.design = design
        self.frozen = FrozenLayer(frozen_abstractions, frozen_budget, embedder)
        self.admission = admission
        self.judge_backbone = judge_backbone
        self.synthesis_backbone = synthesis_backbone
        self.randomise_exposure = randomise_exposure
        self._task: TaskContext | None = None

    # ------------------------------------------------------------ plumbing
    @property
    def training(self) -> bool:
        return self.agent.training

    @property
    def reset_options(self) -> Mapping[str, Any]:
        return self.agent.reset_options

    @property
    def trajectories(self) -> TrajectoryStore:
        return self.memory.trajectories

    @property
    def outcomes(self) -> OutcomeLog:
        return self.memory.outcomes

    @property
    def abstractions(self) -> AbstractionStore:
        return self.memory.abstractions

    @property
    def iteration(self) -> int:
        return self.memory.iteration

    @iteration.setter
    def iteration(self, value: int) -> None:
        self.memory.iteration = value

    def train(self, mode: bool = True) -> MemoryPolicy:
        self.memory.train(mode)
        self.agent.train(mode)
        return self

    def eval(self) -> MemoryPolicy:
        return self.train(False)

    # ------------------------------------------------------------- episode
    def _context(self, vec: np.ndarray, info: Mapping[str, Any]) -> TaskContext:
        agent, config = self.agent, self.config
        judge = (Synthesiser(self.judge_backbone, agent.meter, config.synthesis, self.memory.seed)
                 if self.judge_backbone is not None else None)
        return TaskContext(self.memory, config, vec, info, agent.decisions,
                           Synthesiser(self.synthesis_backbone or agent.backbone, agent.meter, config.synthesis,
                                       self.memory.seed),
                           self.admission, judge=judge)

    def begin(self, observation: str, info: Mapping[str, Any]) -> None:
        agent = self.agent
        agent.reset_episode()
        task = self._task = None
        self.memory.begin_task(str(info.get("task_id", "")), agent.decisions)
        try:
            vec = self.memory.embed_task(str(info.get("instruction", "")), observation)
            agent.meter.record_embedding()
        except Exception as e:  # the episode still runs, without memory; never learned from
            agent.decisions["embedding_failed"] = f"{type(e).__name__}: {e}"
        else:
            task = self._task = self._context(vec, info)
        blocks: list[tuple[str, str]] = []
        if self.frozen:
            blocks.append((FROZEN_HEADER, self.frozen.shown(task.vec if task is not None else None)))
        if task is not None:
            self._flip(task)
            blocks += self.design.guidance(task)
            if task.exposure is not None:
                task.exposure["would_be_parents"] = list(task.in_prompt) + \
                    list(agent.decisions.get("withheld_abstractions", []))
                agent.decisions["exposure"] = dict(task.exposure)
        guidance = "\n\n".join(f"## {h}\n{t}" for h, t in blocks if t) or None
        agent.decisions["guidance"] = guidance
        agent.decisions["abstractions_in_prompt"] = list(task.in_prompt) if task is not None else []
        agent.decisions["same_task_records_retrieved"] = self.memory.same_task_retrieved
        agent.start(observation, info, guidance)

    def _flip(self, task: TaskContext) -> None:
        """The randomised-exposure coin of a training task (see ``randomise_exposure``): drawn
        from the seed, the iteration and the records stored so far, so a resumed iteration
        draws the same coins."""
        if not self.training or self.randomise_exposure <= 0:
            return
        draw = derived_rng(self.memory.seed, "exposure", self.memory.iteration, len(self.memory.trajectories)).random()
        task.withhold = draw < self.randomise_exposure
        task.exposure = {"coin": "withhold" if task.withhold else "expose", "p": self.randomise_exposure}

    def act(self, observation: str, info: Mapping[str, Any]) -> str:
        return self.agent.act(observation, info)

    def trace(self) -> PolicyTrace:
        return self.agent.trace()

    def end(self, episode: Episode) -> Usage | None:
        self.agent.meter.reset()
        task, self._task = self._task, None
        if not self.training or episode.infrastructure_failure or task is None:
            return None
        record_id = self.memory.add_record(episode, task.vec, task.in_prompt)
        self.design.learn(task, episode, record_id)
        return self.agent.meter.snapshot()

    # --------------------------------------------------------------- state
    def spec(self) -> dict[str, Any]:
        return spec_of(self)

    def describe(self) -> dict[str, Any]:
        return {**self.agent.describe(), "memory": self.config.to_dict(), "embedder": self.memory.embedder.identity}

    def save_state(self, directory: str | Path) -> Path:
        """Snapshot the whole state into ``directory`` (``memory.sqlite`` + ``state.json``)."""
        return self.memory.save_state(directory, self.spec())

    def load_state(self, directory: str | Path) -> MemoryPolicy:
        """Restore a snapshot made by :meth:`save_state` of this same policy; an unusable
        snapshot raises :class:`~ap_gym.errors.StoreError` and changes nothing."""
        self.memory.load_state(directory, expect=self.spec()["name"])
        return self

    def clear_state(self) -> MemoryPolicy:
        """Forget everything: an empty memory, as before the first episode."""
        self.memory.clear_state()
        return self

    def close(self) -> None:
        self.memory.close()


class FrozenLayer:
    """Given skills, shown on top of a design's guidance: the ``budget`` nearest the task.

    Each skill is retrieved as a stored abstraction is: by its embedding (the one its
    skills file carries, when the file was written with this embedder), else by the
    embedding of its text. Nothing is ever written: the layer is frozen.
    """

    def __init__(self, skills: Sequence[str | Mapping[str, Any]], budget: int | None, embedder: Embedder) -> None:
        entries = [{"text": s} if isinstance(s, str) else dict(s) for s in skills]
        self.texts = [str(e["text"]) for e in entries]
        self.budget = budget
        self._vectors: np.ndarray | None = None
        if self.texts and budget is not None and budget < len(self.texts):
            self._vectors = _skill_vectors(entries, embedder)

    def __bool__(self) -> bool:
        return bool(self.texts)

    def shown(self, vec: np.ndarray | None) -> str:
        """The skills this task sees, one ``- `` line each (all of them without an embedding)."""
        order: Sequence[int] = range(len(self.texts))
        if self._vectors is not None and vec is not None:
            sims = self._vectors @ np.asarray(vec, dtype=np.float32)
            order = sorted(np.argsort(-sims, kind="stable")[: self.budget])  # nearest, in the file's order
        return "\n".join(f"- {self.texts[i]}" for i in order)


def _skill_vectors(entries: Sequence[Mapping[str, Any]], embedder: Embedder) -> np.ndarray:
    given = [e.get("embedding") for e in entries]
    if all(isinstance(v, list) and len(v) == embedder.dim for v in given) and \
            all(e.get("embedder") in (None, embedder.identity) for e in entries):
        vectors = np.asarray(given, dtype=np.float32)
    else:
        vectors = embedder.embed([str(e["text"]) for e in entries])
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


# ------------------------------------------------------------------ designs as policies
D = TypeVar("D")
_DESIGN_OPTIONS = [p for p in inspect.signature(MemoryPolicy.__init__).parameters.values()
                   if p.name not in ("self", "design")]


def register_design(name: str, *, policy: str | None = None) -> Callable[[type[D]], type[D]]:
    """Register a design dataclass as the policy ``name``; its fields are the policy's options.

    The generated policy class (:func:`policy_of` the design, named ``policy`` or after the design)
    is a :class:`MemoryPolicy` whose design is built from the design's own options; an
    options object field (a pydantic :class:`~ap_gym.options.Options`) takes a mapping too.

    Example:
        >>> @register_design("recent")  # doctest: +SKIP
        ... @dataclass(frozen=True)
        ... class Recent:
        ...     k: int = 3
        ...     def guidance(self, task): ...
        ...     def learn(self, task, episode, record_id): ...
    """

    def decorate(design: type[D]) -> type[D]:
        cls = design_policy(design, policy or design.__name__.removesuffix("Design") + "Policy")
        register_policy(name, needs=MEMORY_NEEDS, supports=MEMORY_SUPPORTS)(cls)
        _POLICIES[design] = cls
        return design

    return decorate


#: Each registered design's policy class.
_POLICIES: dict[type[Any], type[MemoryPolicy]] = {}


def policy_of(design: type[Any]) -> type[MemoryPolicy]:
    """The policy class :func:`register_design` made of ``design``."""
    try:
        return _POLICIES[design]
    except KeyError:
        raise KeyError(f"{design.__name__} is not a registered design (decorate it with @register_design)") from None


def design_policy(design: type[Any], class_name: str) -> type[MemoryPolicy]:
    """A :class:`MemoryPolicy` subclass whose design is ``design`` built from its options."""
    fields = [f for f in dataclasses.fields(design) if f.init]
    hints = typing.get_type_hints(design)
    names = {f.name for f in fields}

    def __init__(self: MemoryPolicy, backbone: Backbone, embedder: Embedder | None = None, **options: Any) -> None:
        chosen = {k: _coerce(hints.get(k), options.pop(k)) for k in list(options) if k in names}
        MemoryPolicy.__init__(self, backbone, embedder, design=design(**chosen), **options)

    own = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, annotation=hints.get(f.name, Any),
                             default=f.default if f.default is not dataclasses.MISSING else
                             (f.default_factory() if f.default_factory is not dataclasses.MISSING
                              else inspect.Parameter.empty)) for f in fields]
    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    __init__.__signature__ = inspect.Signature([self_param, *_DESIGN_OPTIONS, *own])  # type: ignore[attr-defined]  # the options' signature, read by the registry
    __init__.__annotations__ = {**typing.get_type_hints(MemoryPolicy.__init__),
                                **{f.name: hints.get(f.name, Any) for f in fields}}
    __init__.__annotations__.pop("design", None)
    doc = (design.__doc__ or "").strip()
    cls = type(class_name, (MemoryPolicy,), {"__init__": __init__, "__module__": design.__module__,
                                             "__qualname__": class_name, "__doc__": doc, "design_class": design})
    return cls


def _coerce(hint: Any, value: Any) -> Any:
    """An options object from a mapping, when the design's field is one."""
    args = typing.get_args(hint) if typing.get_origin(hint) is not None else (hint,)
    for arg in args:
        if inspect.isclass(arg) and issubclass(arg, BaseModel) and isinstance(value, Mapping):
            return arg.model_validate(dict(value))
    return value
