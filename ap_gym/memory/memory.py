"""The memory a memory design reads and writes: one SQLite database and an embedder.

A :class:`Memory` owns the database's lifecycle (training mode writes; evaluation mode
reopens it read-only and immutable, so nothing an evaluation episode does can reach a
later one), task embeddings, retrieval through the stores' similarity index, provenance
of new abstractions, and snapshots (``save_state``/``load_state``/``clear_state``: the
whole state is the database; the bandit lives in its outcome log).

Retrieval writes what it retrieved into the task's decision record itself
(``retrieved_records``, ``similarities``), in the order it happened: every design that
reads records shows them in the episode and the viewer without saying so.

What a design retrieves and writes is the design's (:mod:`ap_gym.policies.design`);
acting is the agent's (:mod:`ap_gym.policies.react`).
"""

from __future__ import annotations

import json
import random
import shutil
import tempfile
from collections.abc import Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ap_gym.errors import BackboneError, StoreError
from ap_gym.memory.abstractions import AbstractionStore
from ap_gym.memory.db import MemoryDB
from ap_gym.memory.outcomes import OutcomeLog
from ap_gym.memory.trajectories import Record, TrajectoryStore
from ap_gym.seeding import derived_rng
from ap_gym.types import Embedder, Episode

__all__ = ["Memory"]


class Memory:
    """A policy's stores on one database, and the embedder that indexes them.

    Args:
        embedder: task embeddings.
        db_path: the database; ``None`` makes a temporary one, removed by :meth:`close`.
        seed: seeds the design's random choices (derived per task, so order-free).
        embed_obs_chars: how much of the first observation joins the instruction in the
            task embedding.
        exclude_same_task: during training, never retrieve records of the task being
            played (see :class:`~ap_gym.policies.memory_policy.MemoryConfig`).
    """

    def __init__(self, embedder: Embedder, db_path: str | Path | None = None, *, seed: int = 0,
                 embed_obs_chars: int = 300, exclude_same_task: bool = False) -> None:
        self.embedder = embedder
        self.seed = seed
        self.embed_obs_chars = embed_obs_chars
        self.exclude_same_task = exclude_same_task
        self.iteration = 0
        self.training = True
        self.task_id = ""
        self.same_task_retrieved = 0
        self.decisions: MutableMapping[str, Any] = {}
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
        """The task's embedding: the instruction plus a truncated first observation; a
        non-finite vector (a faulty embedder) is refused here, before retrieval uses it."""
        vec = np.asarray(self.embedder.embed([f"{instruction}\n{observation[: self.embed_obs_chars]}"])[0])
        if vec.ndim != 1 or not np.isfinite(vec).all():
            raise BackboneError(f"the embedder {getattr(self.embedder, 'identity', self.embedder)!r} returned a "
                                f"vector of shape {vec.shape} with NaN or infinite values; check the embedder")
        return vec

    def task_rng(self, task_id: str) -> random.Random:
        """A generator derived from the seed, the task and the log size: no hidden state."""
        return derived_rng(self.seed, task_id, len(self.outcomes), len(self.trajectories))

    def begin_task(self, task_id: str, decisions: MutableMapping[str, Any] | None = None) -> None:
        """The task now played, and the decision record retrieval writes into; retrieval notes
        (and, if configured, excludes) the task's own records."""
        self.task_id = task_id
        self.same_task_retrieved = 0
        self.decisions = decisions if decisions is not None else {}

    def retrieve_records(self, vec: np.ndarray, k: int, success: bool | None = None) -> list[tuple[Record, float]]:
        """The ``k`` records most similar to ``vec`` (only successes or failures if asked).

        Records of the task being played count in ``same_task_retrieved``; with
        ``exclude_same_task`` they are left out while training. What was retrieved is added
        to the task's decision record (``retrieved_records``, ``similarities``).
        """
        allowed = None if success is None else self.trajectories.ids(success)
        if self.exclude_same_task and self.training and self.task_id:
            own = set(self.trajectories.ids_of_task(self.task_id))
            if own:
                allowed = [i for i in (allowed if allowed is not None else self.trajectories.ids()) if i not in own]
        hits = self.trajectories.nearest(vec, k, allowed)
        records = {r.id: r for r in self.trajectories.get([i for i, _ in hits])}
        found = [(records[i], s) for i, s in hits if i in records]
        self.same_task_retrieved += sum(r.task_id == self.task_id for r, _ in found)
        self.decisions.setdefault("retrieved_records", []).extend(r.id for r, _ in found)
        self.decisions.setdefault("similarities", []).extend(round(s, 4) for _, s in found)
        return found

    # -------------------------------------------------------------- writes
    def add_record(self, episode: Episode, vec: np.ndarray, abstraction_ids: Sequence[int]) -> int:
        """Store a training episode's record: task, trajectory, outcome, and what was in its prompt."""
        return self.trajectories.add(
            task_id=episode.task_id, family=episode.task_family, instruction=episode.instruction,
            steps=[{"action": s.action, "observation": s.observation, "reward": s.reward} for s in episode.steps],
            success=episode.success, score=episode.score, embedding=vec, iteration=self.iteration,
            mode=episode.policy_info.get("mode"), abstraction_ids=abstraction_ids,
        )

    def parents_of(self, sources: Sequence[int]) -> list[int]:
        """The abstractions that were in the prompts of the records ``sources``."""
        return sorted({p for r in self.trajectories.get(sources) for p in r.abstraction_ids})

    def add_abstraction(self, text: str, kind: str, vec: np.ndarray, sources: list[int],
                        flags: dict[str, Any] | None = None) -> int:
        """Store an abstraction with its provenance: ``sources`` are the records it was
        synthesised from, and its parents the abstractions in those records' prompts
        (``flags``: what else the audit reads, such as the randomised-exposure coin)."""
        return self.abstractions.add(text=text, kind=kind, embedding=vec, iteration=self.iteration,
                                     sources=sources, parents=self.parents_of(sources), flags=flags)
