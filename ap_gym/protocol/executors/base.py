"""The executor interface: where held-out episodes run.

An executor takes :class:`EvalJob` s (a setting's held-out tasks against one frozen
snapshot, ``lanes`` of them per job) and yields each job's :class:`EvalResult` s. It owns
its workers (processes, Ray actors) and releases them in ``close``; nothing about them
lives in module globals. The driver writes every result, so files, summaries and resume
do not depend on the executor.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ap_gym.types import Episode, Termination

__all__ = ["EvalJob", "EvalResult", "Executor", "SettingsRunner", "infra_results"]


@dataclass(frozen=True)
class EvalJob:
    """Held-out tasks of one setting, against the snapshot at ``snapshot`` ("" for a policy without state)."""

    benchmark: str
    label: str
    seed: int
    snapshot: str
    task_ids: tuple[str, ...]
    backbone: str | None = None


@dataclass(frozen=True)
class EvalResult:
    """One played task: the episode and how many attempts it took."""

    episode: Episode
    attempts: int


def infra_results(job: EvalJob, error: str) -> list[EvalResult]:
    """Every task of a job recorded as an infrastructure failure (its worker kept dying)."""
    return [EvalResult(Episode(task_id=t, task_family="?", instruction="", initial_observation="", steps=(),
                               success=False, score=None, max_score=None, termination=Termination.INFRA,
                               error=error, seed=job.seed, training=False), 0)
            for t in job.task_ids]


@runtime_checkable
class Executor(Protocol):
    """Runs held-out jobs; yields ``(job, results)`` (in job order, or as they finish)."""

    def evaluate(self, jobs: Sequence[EvalJob]) -> Iterator[tuple[EvalJob, list[EvalResult]]]: ...

    def close(self) -> None: ...


@runtime_checkable
class SettingsRunner(Protocol):
    """An executor that runs whole settings of a grid where they are (a Ray cluster):
    ``run_one(config, benchmark, label, seed, backbone)`` for each, ``on_done(name)`` after."""

    def run_settings(self, settings: Sequence[tuple[str, str, int, str | None]], run_one: Callable[..., str],
                     on_done: Callable[[str], None]) -> None: ...


def chunks(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]
