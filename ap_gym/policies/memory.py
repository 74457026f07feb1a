"""The memory a memory design reads and writes: one SQLite database and an embedder.

A :class:`Memory` owns the database's lifecycle (training mode writes; evaluation mode
reopens it read-only and immutable, so nothing an evaluation episode does can reach a
later one), task embeddings, retrieval through the stores' similarity index, provenance
of new abstractions, and snapshots (``save_state``/``load_state``/``clear_state``: the
whole state is the database; the bandit lives in its outcome log).

What a design retrieves and writes is the design's (:mod:`ap_gym.policies.design`);
acting is the agent's (:mod:`ap_gym.policies.react`).
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ap_gym.backbones.base import GenerationConfig
from ap_gym.backbones.embedders import Embedder
from ap_gym.errors import StoreError
from ap_gym.memory.store import AbstractionStore, MemoryDB, OutcomeLog, Record, TrajectoryStore
from ap_gym.types import Episode

__all__ = ["Memory", "MemoryConfig", "format_record"]


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

    @classmethod
    def coerce(cls, value: MemoryConfig | Mapping[str, Any] | None) -> MemoryConfig:
        """A MemoryConfig from itself, a plain mapping (YAML) or ``None`` (the defaults)."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        options = dict(value)
        if isinstance(options.get("synthesis"), Mapping):
            options["synthesis"] = GenerationConfig.coerce(options["synthesis"])
        return cls(**options)


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


class Memory:
    """A policy's stores on one database, and the embedder that indexes them.

    Args:
        embedder: task embeddings (default: the packaged all-MiniLM-L6-v2).
        db_path: the database; ``None`` makes a temporary one, removed by :meth:`close`.
        config: a :class:`MemoryConfig`.
        seed: seeds the design's random choices (derived per task, so order-free).
    """

    def __init__(self, embedder: Embedder | None = None, db_path: str | Path | None = None,
                 config: MemoryConfig | None = None, seed: int = 0) -> None:
        if embedder is None:
            from ap_gym.backbones.embedders import SentenceTransformerEmbedder

            embedder = SentenceTransformerEmbedder()
        self.embedder = embedder
        self.config = config or MemoryConfig()
        self.seed = seed
        self.iteration = 0
        self.training = True
        self._tmpdir: str | None = None
        if db_path is None:
            self._tmpdir = tempfile.mkdtemp(prefix="ap_gym_memory_")
            db_path = Path(self._tmpdir) / "memory.sqlite"
        self.db_path = Path(db_path)
        self._open(readonly=False)

    # -------------------------------------------------------------- database
    def _open(self, readonly: bool) -> None:
        self.db = MemoryDB(self.db_path, readonly=readonly, embedding_dim=self.embedder.dim,
                           embedder=self.embedder.identity)
        self.trajectories = TrajectoryStore(self.db)
        self.outcomes = OutcomeLog(self.db)
        self.abstractions = AbstractionStore(self.db)

    def train(self, mode: bool = True) -> None:
        """Training mode writes; evaluation mode reopens the database read-only and immutable."""
        if mode != self.training:
            self.db.close()
            self._open(readonly=not mode)
        self.training = mode

    def save_state(self, directory: str | Path, spec: Mapping[str, Any]) -> Path:
        """Snapshot the whole state into ``directory`` (``memory.sqlite`` + ``state.json``)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.db.checkpoint()
        self.db.backup(directory / "memory.sqlite")
        (directory / "state.json").write_text(json.dumps(
            {"policy": dict(spec), "iteration": self.iteration, "seed": self.seed}, indent=1, default=str))
        return directory

    def clear_state(self) -> None:
        """Forget everything: an empty memory, as before the first episode."""
        self.db.close()
        for suffix in ("", "-wal", "-shm"):
            Path(str(self.db_path) + suffix).unlink(missing_ok=True)
        self.iteration = 0
        MemoryDB(self.db_path, embedding_dim=self.embedder.dim, embedder=self.embedder.identity).close()
        self._open(readonly=not self.training)

    def load_state(self, directory: str | Path, expect: str | None = None) -> None:
        """Restore a snapshot made by :meth:`save_state`, replacing the current state.

        The snapshot is proven first: its ``state.json`` names the policy ``expect`` (a
        snapshot of another design is refused), its database opens with this embedder's
        dimension and schema, and a copy of it opens too. Only then is the live database
        replaced, in one rename; any failure leaves it as it was, open and usable.
        """
        directory = Path(directory)
        try:
            state = json.loads((directory / "state.json").read_text())
            name = state["policy"]["name"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise StoreError(f"{directory} is not a policy snapshot (state.json: {e}); the live memory "
                             f"{self.db_path} was not modified") from None
        if expect is not None and name != expect:
            raise StoreError(f"{directory} is a snapshot of {name!r}, not of {expect!r}; the live memory "
                             f"{self.db_path} was not modified")
        staged = MemoryDB.stage(directory / "memory.sqlite", self.db_path, self.embedder.dim)
        self.db.close()
        MemoryDB.swap_in(staged, self.db_path, directory / "memory.sqlite")
        self.iteration = int(state.get("iteration", 0))
        self._open(readonly=not self.training)

    def close(self) -> None:
        self.db.close()
        if self._tmpdir:
            shutil.rmtree(self._tmpdir, ignore_errors=True)

    # ------------------------------------------------------------- queries
    def embed_task(self, instruction: str, observation: str) -> np.ndarray:
        """The task's embedding: the instruction plus a truncated first observation."""
        return self.embedder.embed([f"{instruction}\n{observation[: self.config.embed_obs_chars]}"])[0]

    def task_rng(self, task_id: str) -> random.Random:
        """A generator derived from the seed, the task and the log size: no hidden state."""
        key = f"{self.seed}|{task_id}|{len(self.outcomes)}|{len(self.trajectories)}"
        return random.Random(int(hashlib.sha256(key.encode()).hexdigest()[:16], 16))

    def retrieve_records(self, vec: np.ndarray, k: int, success: bool | None = None) -> list[tuple[Record, float]]:
        """The ``k`` records most similar to ``vec`` (only successes or failures if asked)."""
        allowed = None if success is None else self.trajectories.ids(success)
        hits = self.trajectories.nearest(vec, k, allowed)
        records = {r.id: r for r in self.trajectories.get([i for i, _ in hits])}
        return [(records[i], s) for i, s in hits if i in records]

    def records_text(self, records: Sequence[Record]) -> str:
        return "\n\n".join(f"[{i + 1}] {format_record(r, self.config.record_chars)}" for i, r in enumerate(records))

    # -------------------------------------------------------------- writes
    def add_record(self, episode: Episode, vec: np.ndarray, abstraction_ids: Sequence[int]) -> int:
        """Store a training episode's record: task, trajectory, outcome, and what was in its prompt."""
        return self.trajectories.add(
            task_id=episode.task_id, family=episode.task_family, instruction=episode.instruction,
            steps=[{"action": s.action, "observation": s.observation, "reward": s.reward} for s in episode.steps],
            success=episode.success, score=episode.score, embedding=vec, iteration=self.iteration,
            mode=episode.policy_info.get("mode"), abstraction_ids=abstraction_ids,
        )

    def add_abstraction(self, text: str, kind: str, vec: np.ndarray, sources: list[int]) -> int:
        """Store an abstraction with its provenance: ``sources`` are the records it was
        synthesised from, and its parents the abstractions in those records' prompts."""
        parents = sorted({p for r in self.trajectories.get(sources) for p in r.abstraction_ids})
        return self.abstractions.add(text=text, kind=kind, embedding=vec, iteration=self.iteration,
                                     sources=sources, parents=parents)
