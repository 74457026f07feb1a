"""A policy's memory: one SQLite database with three stores, and the embedder that indexes them.

* :mod:`~ap_gym.memory.db`: the database (schema, read-only evaluation, snapshots);
* :mod:`~ap_gym.memory.trajectories`, :mod:`~ap_gym.memory.outcomes`,
  :mod:`~ap_gym.memory.abstractions`: the spec's three stores;
* :mod:`~ap_gym.memory.index`: exact and HNSW similarity search;
* :mod:`~ap_gym.memory.memory`: :class:`Memory`, what a memory design reads and writes.

It knows nothing above it (shared/DESIGN.md): no policy, backbone or env.
"""

from __future__ import annotations

from ap_gym.memory.abstractions import Abstraction, AbstractionStore
from ap_gym.memory.db import SCHEMA_VERSION, MemoryDB
from ap_gym.memory.index import ExactIndex, VectorIndex
from ap_gym.memory.memory import Memory
from ap_gym.memory.outcomes import LogEntry, OutcomeLog
from ap_gym.memory.trajectories import Record, TrajectoryStore

__all__ = [
    "SCHEMA_VERSION",
    "Abstraction",
    "AbstractionStore",
    "ExactIndex",
    "LogEntry",
    "Memory",
    "MemoryDB",
    "OutcomeLog",
    "Record",
    "TrajectoryStore",
    "VectorIndex",
]
