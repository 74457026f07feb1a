"""A memory policy: the acting agent, a memory and a design, composed.

Per episode it

1. embeds the task (the memory);
2. asks the design for guidance blocks, which go into the agent's system prompt under
   their own headers, and notes which stored abstractions they contain;
3. acts (the agent);
4. in training mode only, stores the trajectory record (the memory) and lets the design
   learn. Infrastructure failures and episodes whose embedding failed are never stored.

Options every design accepts: ``frozen_abstractions`` (a fixed layer of given texts
shown on top of the design's own guidance: the paper's useful-versus-toxic skills
experiment) and ``admission`` (a judge that accepts or rejects each new abstraction
before it is stored: a callable ``(text, episode) -> bool`` or ``"llm"`` for an LLM judge,
the paper's selective-retention experiment). The LLM judge is the acting backbone unless
``judge_backbone`` names another (the paper's judge was a stronger model than the
actor); its calls count under ``admission``. ``frozen_abstractions`` may also be the path
of a file written by ``ap-gym skills`` (its admitted abstractions are the layer).

Each design's module registers a thin subclass that only says which design it uses
(``TrajectoryMemory``, ``AntiPersistencePolicy``, ...), so configs name them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ap_gym.backbones.base import Backbone
from ap_gym.backbones.embedders import Embedder
from ap_gym.memory.store import AbstractionStore, OutcomeLog, TrajectoryStore
from ap_gym.policies.design import Admission, Design, Synthesiser, TaskContext
from ap_gym.policies.memory import Memory, MemoryConfig
from ap_gym.policies.react import AgentConfig, ReActAgent
from ap_gym.policies.registry import spec_of
from ap_gym.types import Episode, PolicyTrace, Usage

__all__ = ["MEMORY_NEEDS", "MEMORY_SUPPORTS", "MemoryPolicy"]

#: What every memory design asks of the protocol, and what it supports.
MEMORY_NEEDS = ("backbone", "embedder", "store", "seed")
MEMORY_SUPPORTS = ("snapshots", "training")


class MemoryPolicy:
    """An agent, a memory and a design; see the module docstring.

    Args:
        backbone: the LLM for acting and synthesis.
        embedder: task embeddings (default: the packaged all-MiniLM-L6-v2).
        design: what to retrieve and what to write (:class:`~ap_gym.policies.design.Design`).
        db_path: the memory database; ``None`` makes a temporary one.
        agent: the acting agent's options.
        memory: a :class:`~ap_gym.policies.memory.MemoryConfig` (or its options).
        seed: seeds the design's random choices (derived per task, so order-free).
        frozen_abstractions: a fixed layer of texts shown on top of the guidance, or the
            path of a skills file (``ap-gym skills``).
        admission: a judge for new abstractions (``None`` admits all).
        judge_backbone: the LLM judge's own backbone (default: the acting one).
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
        frozen_abstractions: Sequence[str] | str | Path = (),
        admission: Admission | str | None = None,
        judge_backbone: Backbone | None = None,
    ) -> None:
        if isinstance(admission, str) and admission != "llm":
            raise ValueError("admission must be a callable, 'llm' or None")
        if judge_backbone is not None and admission != "llm":
            raise ValueError("judge_backbone is the LLM judge's backbone: set admission: llm with it")
        if isinstance(judge_backbone, str):
            raise ValueError(f"judge_backbone {judge_backbone!r} was not resolved to a backbone; in a run config "
                             "name one of the run's backbones (backbones:) or a backbone spec")
        if isinstance(frozen_abstractions, str | Path):
            from ap_gym.report.skills import read_skills

            frozen_abstractions = read_skills(frozen_abstractions)
        self.agent = ReActAgent(backbone, agent, seed)
        self.memory = Memory(embedder, db_path, MemoryConfig.coerce(memory), seed)
        self.design = design
        self.frozen_abstractions = list(frozen_abstractions)
        self.admission = admission
        self.judge_backbone = judge_backbone
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
    def begin(self, observation: str, info: Mapping[str, Any]) -> None:
        agent = self.agent
        agent.reset_episode()
        task = self._task = None
        self.memory.begin_task(str(info.get("task_id", "")))
        try:
            vec = self.memory.embed_task(str(info.get("instruction", "")), observation)
            agent.meter.record_embedding()
        except Exception as e:  # the episode still runs, without memory; never learned from
            agent.decisions["embedding_failed"] = f"{type(e).__name__}: {e}"
        else:
            task = self._task = TaskContext(self.memory, vec, info, agent.decisions,
                                            Synthesiser(agent.backbone, agent.meter, self.memory), self.admission,
                                            judge=(Synthesiser(self.judge_backbone, agent.meter, self.memory)
                                                   if self.judge_backbone is not None else None))
        blocks: list[tuple[str, str]] = []
        if self.frozen_abstractions:
            blocks.append(("Skills", "\n".join(f"- {t}" for t in self.frozen_abstractions)))
        if task is not None:
            blocks += self.design.guidance(task)
        guidance = "\n\n".join(f"## {h}\n{t}" for h, t in blocks if t) or None
        agent.decisions["guidance"] = guidance
        agent.decisions["abstractions_in_prompt"] = list(task.in_prompt) if task is not None else []
        agent.decisions["same_task_records_retrieved"] = self.memory.same_task_retrieved
        agent.start(observation, info, guidance)

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
        return {**self.agent.describe(), "memory": self.memory.config.to_dict(),
                "embedder": self.memory.embedder.identity}

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
