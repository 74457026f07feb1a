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
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ap_gym.backbones.base import GenerationConfig
from ap_gym.backbones.embedders import Embedder
from ap_gym.envs.base import FAILED_FEEDBACK, failed_action
from ap_gym.errors import StoreError
from ap_gym.memory.store import AbstractionStore, MemoryDB, OutcomeLog, Record, TrajectoryStore
from ap_gym.types import Episode

__all__ = ["FAILED_FEEDBACK", "Memory", "MemoryConfig", "count_tokens", "failed_action", "format_record"]


@dataclass(frozen=True)
class MemoryConfig:
    """Options shared by the memory designs.

    Attributes:
        budget: records (or abstractions) retrieved per task: the spec's B = 5.
        record_tokens: each record is compressed to about this many tokens in a prompt
            (see :func:`format_record`).
        embed_obs_chars: how much of the first observation joins the instruction in the task embedding.
        synthesis: decoding options for synthesis, reflection and maintenance calls.
        exclude_same_task: during training, never retrieve records of the task being
            played. Training draws tasks with replacement from small pools, so retrieval
            would otherwise often show the task its own earlier attempt (similarity ~1),
            which held-out tasks never see. Off by default (the paper's protocol); the
            share of training episodes where it happened is reported either way.
    """

    budget: int = 5
    record_tokens: int = 400
    embed_obs_chars: int = 300
    synthesis: GenerationConfig = GenerationConfig(max_new_tokens=160)
    exclude_same_task: bool = False

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


_TOKEN = re.compile(r"\w+|[^\w\s]")


def count_tokens(text: str) -> int:
    """Words and punctuation marks: a tokenizer-free proxy for a budget (BPE tokenizers
    give about 1.3 times as many), the same for every backbone so that prompts compare."""
    return len(_TOKEN.findall(text))


def _cut(text: str, tokens: int) -> str:
    if tokens <= 0:
        return ""
    words = text.split()
    out, used = [], 0
    for w in words:
        used += count_tokens(w)
        if used > tokens:
            return " ".join(out) + " [...]"
        out.append(w)
    return text


def format_record(record: Record, max_tokens: int = 400) -> str:
    """A record as a prompt sees it: task, outcome, and each command with what it returned.

    A record that fits ``max_tokens`` is shown whole. Otherwise observations are
    compressed to fit: the feedback of failed actions (see
    :data:`FAILED_FEEDBACK`) and the final observation are always kept (each up to 60
    tokens); the other observations share what is left of the budget evenly (up to 60
    tokens each, none when under 3); if the commands alone still exceed the budget, the middle of the trajectory
    is elided, never its failed actions or its end.
    """
    outcome = "success" if record.success else "failure"
    score = "" if record.score is None else f", score {record.score:g}"
    head = f"Task: {record.instruction}\nOutcome: {outcome}{score} in {len(record.steps)} steps"
    steps = [(str(s.get("action", "")), " ".join(str(s.get("observation", "")).split())) for s in record.steps]
    if not steps:
        return head
    last = len(steps) - 1
    kept = {i for i, (_, obs) in enumerate(steps) if failed_action(obs)} | {last}

    def render(other: int, shown: set[int] | None = None, kept_cap: int = 60) -> str:
        lines, gap = [head, "Trajectory:"], 0
        for i, (action, obs) in enumerate(steps):
            if shown is not None and i not in shown:
                gap += 1
                continue
            if gap:
                lines.append(f"  ... {gap} more step(s) ...")
                gap = 0
            text = _cut(obs, kept_cap if i in kept else other)
            lines.append(f"> {action}" + (f"\n  {text}" if text else ""))
        return "\n".join(lines)

    whole = render(10**9, kept_cap=10**9)
    if count_tokens(whole) <= max_tokens:
        return whole
    others = len(steps) - len(kept)
    spare = max_tokens - count_tokens(render(0))
    if spare >= 0:  # the rest of the budget, shared evenly by the other observations
        share = min(60, spare // max(1, others))
        while share >= 3:
            text = render(share)
            if count_tokens(text) <= max_tokens:
                return text
            share = share * 3 // 4
        return render(0)
    # the commands alone are too long: keep the kept steps, then the earliest others that fit
    shown = set(kept)
    for i in range(len(steps)):
        if i not in shown and count_tokens(render(0, shown | {i})) <= max_tokens:
            shown.add(i)
    return render(0, shown)


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
        self.task_id = ""
        self.same_task_retrieved = 0
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

    def begin_task(self, task_id: str) -> None:
        """The task now played: retrieval notes (and, if configured, excludes) its own records."""
        self.task_id = task_id
        self.same_task_retrieved = 0

    def retrieve_records(self, vec: np.ndarray, k: int, success: bool | None = None) -> list[tuple[Record, float]]:
        """The ``k`` records most similar to ``vec`` (only successes or failures if asked).

        Records of the task being played count in ``same_task_retrieved``; with
        ``exclude_same_task`` they are left out while training.
        """
        allowed = None if success is None else self.trajectories.ids(success)
        if self.config.exclude_same_task and self.training and self.task_id:
            own = set(self.trajectories.ids_of_task(self.task_id))
            if own:
                allowed = [i for i in (allowed if allowed is not None else self.trajectories.ids()) if i not in own]
        hits = self.trajectories.nearest(vec, k, allowed)
        records = {r.id: r for r in self.trajectories.get([i for i, _ in hits])}
        found = [(records[i], s) for i, s in hits if i in records]
        self.same_task_retrieved += sum(r.task_id == self.task_id for r, _ in found)
        return found

    def records_text(self, records: Sequence[Record]) -> str:
        return "\n\n".join(f"[{i + 1}] {format_record(r, self.config.record_tokens)}" for i, r in enumerate(records))

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
