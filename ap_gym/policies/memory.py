"""What every memory design shares: the database, task embeddings, records, synthesis.

A :class:`MemoryPolicy` is the acting agent plus a memory. Per episode it

1. embeds the task (instruction plus a truncated first observation);
2. asks the design for guidance blocks (``_guidance``), which go into the system prompt
   under their own headers, and notes which stored abstractions they contain;
3. acts (the ReAct agent);
4. in training mode only, stores the trajectory record and lets the design learn
   (``_learn``). Infrastructure failures are never stored.

In evaluation mode the database is reopened read-only and immutable, so nothing an
evaluation episode does can reach a later one. ``save_state``/``load_state`` snapshot and
restore the whole state (the database; the bandit lives in its outcome log).

Options every design accepts: ``frozen_abstractions`` (a fixed layer of given texts
shown on top of the design's own guidance: the paper's useful-versus-toxic skills
experiment) and ``admission`` (a judge that accepts or rejects each new abstraction
before it is stored: a callable ``(text, episode) -> bool`` or ``"llm"`` for an LLM judge,
the paper's selective-retention experiment).
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ap_gym.backbones.base import Backbone, GenerationConfig
from ap_gym.backbones.embedders import Embedder
from ap_gym.memory.store import AbstractionStore, MemoryDB, OutcomeLog, Record, TrajectoryStore
from ap_gym.policies.prompting import load_prompt
from ap_gym.policies.react import AgentConfig, ReActAgent
from ap_gym.types import Episode, Usage

__all__ = ["MemoryConfig", "MemoryPolicy", "format_record"]

Admission = Callable[[str, Episode], bool]


@dataclass(frozen=True)
class MemoryConfig:
    """Options shared by the memory designs.

    Attributes:
        budget: records (or abstractions) retrieved per task: the spec's B = 5.
        record_chars: each record is cut to this many characters in a prompt.
        embed_obs_chars: how much of the first observation joins the instruction in the task embedding.
        synthesis: decoding options for synthesis, reflection and maintenance calls.
    """

    budget: int = 5
    record_chars: int = 1200
    embed_obs_chars: int = 300
    synthesis: GenerationConfig = GenerationConfig(max_new_tokens=160)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["synthesis"] = self.synthesis.to_dict()
        return d


def format_record(record: Record, max_chars: int = 1200) -> str:
    """A record as a prompt sees it: task, outcome, commands, last observation."""
    outcome = "success" if record.success else "failure"
    score = "" if record.score is None else f", score {record.score:g}"
    actions = " > ".join(s["action"] for s in record.steps)
    last = record.steps[-1]["observation"].strip().replace("\n", " ")[:200] if record.steps else ""
    text = f"Task: {record.instruction}\nOutcome: {outcome}{score} in {len(record.steps)} steps\nCommands: {actions}"
    if last:
        text += f"\nLast observation: {last}"
    return text if len(text) <= max_chars else text[: max_chars - 5] + " [...]"


class MemoryPolicy(ReActAgent):
    """Base of the memory designs; see the module docstring.

    Args:
        backbone: the LLM for acting and synthesis.
        embedder: task embeddings (default: the packaged all-MiniLM-L6-v2).
        db_path: the memory database; ``None`` makes a temporary one.
        agent: the acting agent's options.
        memory: a :class:`MemoryConfig`.
        seed: seeds the design's random choices (derived per task, so order-free).
        frozen_abstractions: a fixed layer of texts shown on top of the guidance.
        admission: a judge for new abstractions (``None`` admits all).
    """

    name = "memory"
    stores_abstractions = False

    def __init__(
        self,
        backbone: Backbone,
        embedder: Embedder | None = None,
        *,
        db_path: str | Path | None = None,
        agent: AgentConfig | None = None,
        memory: MemoryConfig | None = None,
        seed: int = 0,
        frozen_abstractions: Sequence[str] = (),
        admission: Admission | str | None = None,
    ) -> None:
        super().__init__(backbone, agent)
        if embedder is None:
            from ap_gym.backbones.embedders import SentenceTransformerEmbedder

            embedder = SentenceTransformerEmbedder()
        self.embedder = embedder
        self.memory = memory or MemoryConfig()
        self.seed = seed
        self.frozen_abstractions = list(frozen_abstractions)
        if isinstance(admission, str) and admission != "llm":
            raise ValueError("admission must be a callable, 'llm' or None")
        self.admission = admission
        self.iteration = 0
        if db_path is None:
            self._tmpdir = tempfile.mkdtemp(prefix="ap_gym_memory_")
            db_path = Path(self._tmpdir) / "memory.sqlite"
        self.db_path = Path(db_path)
        self._open(readonly=False)
        self._task_vec: np.ndarray | None = None
        self._in_prompt: list[int] = []

    # -------------------------------------------------------------- database
    def _open(self, readonly: bool) -> None:
        self.db = MemoryDB(self.db_path, readonly=readonly, embedding_dim=self.embedder.dim,
                           embedder=self.embedder.identity)
        self.trajectories = TrajectoryStore(self.db)
        self.outcomes = OutcomeLog(self.db)
        self.abstractions = AbstractionStore(self.db)

    def train(self, mode: bool = True) -> MemoryPolicy:
        if mode != self.training or not hasattr(self, "db"):
            self.db.close()
            self._open(readonly=not mode)
        self.training = mode
        return self

    def save_state(self, directory: str | Path) -> Path:
        """Snapshot the whole state into ``directory`` (``memory.sqlite`` + ``state.json``)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.db.checkpoint()
        self.db.backup(directory / "memory.sqlite")
        (directory / "state.json").write_text(json.dumps(
            {"policy": self.spec(), "iteration": self.iteration, "seed": self.seed}, indent=1, default=str))
        return directory

    def clear_state(self) -> MemoryPolicy:
        """Forget everything: an empty memory, as before the first episode."""
        training = self.training
        self.db.close()
        for suffix in ("", "-wal", "-shm"):
            Path(str(self.db_path) + suffix).unlink(missing_ok=True)
        self.iteration = 0
        self.db = MemoryDB(self.db_path, embedding_dim=self.embedder.dim, embedder=self.embedder.identity)
        self.db.close()
        self._open(readonly=not training)
        return self

    def load_state(self, directory: str | Path) -> MemoryPolicy:
        """Restore a snapshot made by :meth:`save_state` (the current state is replaced)."""
        directory = Path(directory)
        state = json.loads((directory / "state.json").read_text())
        training = self.training
        self.db.close()
        MemoryDB.restore(directory / "memory.sqlite", self.db_path)
        self.iteration = int(state.get("iteration", 0))
        self._open(readonly=not training)
        return self

    def close(self) -> None:
        self.db.close()
        if getattr(self, "_tmpdir", None):
            shutil.rmtree(self._tmpdir, ignore_errors=True)

    # ------------------------------------------------------------- episode
    def task_rng(self, task_id: str) -> random.Random:
        """A generator derived from the seed, the task and the log size: no hidden state."""
        key = f"{self.seed}|{task_id}|{len(self.outcomes)}|{len(self.trajectories)}"
        return random.Random(int(hashlib.sha256(key.encode()).hexdigest()[:16], 16))

    def _prepare(self, observation: str, info: Mapping[str, Any]) -> None:
        self._in_prompt = []
        text = f"{info.get('instruction', '')}\n{observation[: self.memory.embed_obs_chars]}"
        try:
            self._task_vec = self.embedder.embed([text])[0]
            self.meter.record_embedding()
        except Exception as e:  # the episode still runs, without memory; never logged
            self._task_vec = None
            self.decisions["embedding_failed"] = f"{type(e).__name__}: {e}"
        blocks: list[tuple[str, str]] = []
        if self.frozen_abstractions:
            blocks.append(("Skills", "\n".join(f"- {t}" for t in self.frozen_abstractions)))
        if self._task_vec is not None:
            blocks += self._guidance(self._task_vec, info)
        self.guidance = "\n\n".join(f"## {h}\n{t}" for h, t in blocks if t) or None
        self.decisions["guidance"] = self.guidance
        self.decisions["abstractions_in_prompt"] = list(self._in_prompt)

    def _guidance(self, vec: np.ndarray, info: Mapping[str, Any]) -> list[tuple[str, str]]:
        """The design's guidance blocks as (header, text); set ``self._in_prompt``."""
        return []

    def retrieve_records(self, vec: np.ndarray, k: int, success: bool | None = None) -> list[tuple[Record, float]]:
        allowed = None if success is None else self.trajectories.ids(success)
        hits = self.trajectories.nearest(vec, k, allowed)
        records = {r.id: r for r in self.trajectories.get([i for i, _ in hits])}
        return [(records[i], s) for i, s in hits if i in records]

    def records_text(self, records: Sequence[Record]) -> str:
        return "\n\n".join(f"[{i + 1}] {format_record(r, self.memory.record_chars)}" for i, r in enumerate(records))

    def synthesise(self, prompt_name: str, purpose: str = "synthesis", **fields: str) -> str:
        """One LLM call with a packaged prompt, counted under ``purpose``."""
        prompt = load_prompt(prompt_name).format(**fields)
        completion = self.backbone.generate([{"role": "user", "content": prompt}], self.memory.synthesis)
        self.meter.record(purpose, completion.prompt_tokens, completion.completion_tokens)
        return completion.text.strip()

    def admit(self, text: str, episode: Episode) -> bool:
        if not text:
            return False
        if self.admission is None:
            return True
        if self.admission == "llm":
            answer = self.synthesise("admission_judge", "maintenance", instruction=episode.instruction,
                                     outcome="success" if episode.success else "failure", text=text)
            return answer.strip().lower().startswith("yes")
        return bool(self.admission(text, episode))  # type: ignore[operator]

    def store_abstraction(self, text: str, episode: Episode, sources: list[int], vec: np.ndarray,
                          kind: str) -> int | None:
        """Admit and store ``text`` with its provenance: ``sources`` are the records it was
        synthesised from, and its parents the abstractions in those records' prompts."""
        if not self.admit(text, episode):
            self.decisions.setdefault("rejected_abstractions", []).append(text)
            return None
        parents = sorted({p for r in self.trajectories.get(sources) for p in r.abstraction_ids})
        return self.abstractions.add(text=text, kind=kind, embedding=vec, iteration=self.iteration,
                                     sources=sources, parents=parents)

    def end(self, episode: Episode) -> Usage | None:
        self.meter.reset()
        if not self.training or episode.infrastructure_failure or self._task_vec is None:
            return None
        record_id = self.trajectories.add(
            task_id=episode.task_id, family=episode.task_family, instruction=episode.instruction,
            steps=[{"action": s.action, "observation": s.observation, "reward": s.reward} for s in episode.steps],
            success=episode.success, score=episode.score, embedding=self._task_vec, iteration=self.iteration,
            mode=episode.policy_info.get("mode"), abstraction_ids=self._in_prompt,
        )
        self._learn(episode, record_id, self._task_vec)
        return self.meter.snapshot()

    def _learn(self, episode: Episode, record_id: int, vec: np.ndarray) -> None:
        """Training-time update after the record is stored; the default does nothing."""

    def spec(self) -> dict[str, Any]:
        return {"name": self.name, "memory": self.memory.to_dict(), "seed": self.seed,
                "frozen_abstractions": self.frozen_abstractions,
                "admission": None if self.admission is None else str(self.admission),
                "embedder": self.embedder.identity, **self._describe()}
