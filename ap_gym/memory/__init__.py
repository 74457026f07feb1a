"""Memory stores on one SQLite database per policy state; see :mod:`ap_gym.memory.store`."""

from __future__ import annotations

from ap_gym.memory.index import ExactIndex, VectorIndex
from ap_gym.memory.store import (
    SCHEMA_VERSION,
    Abstraction,
    AbstractionStore,
    LogEntry,
    MemoryDB,
    OutcomeLog,
    Record,
    TrajectoryStore,
)

__all__ = [
    "SCHEMA_VERSION",
    "Abstraction",
    "AbstractionStore",
    "ExactIndex",
    "LogEntry",
    "MemoryDB",
    "OutcomeLog",
    "Record",
    "TrajectoryStore",
    "VectorIndex",
]
