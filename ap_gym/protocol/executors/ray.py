"""The Ray executor: held-out episodes on Ray actors, the settings of a grid as Ray tasks.

Held-out jobs go to ``workers`` actors, each a
:class:`~ap_gym.protocol.executors.worker.Worker` with its own env. The snapshot goes into
Ray's object store once; each actor fetches it once. A dead actor (``RayActorError``) is
replaced and its job retried up to ``retries`` times, then recorded as an infrastructure
failure. Independent settings of a grid run as Ray tasks, ``workers`` at a time, each
writing its own results. A local Ray instance binds to 127.0.0.1 only.

Ray starts its workers at niceness 15 (its ``worker_niceness``), to keep its own daemons
responsive. Here all the work is in the workers, so on a machine with anything else to do
they get a sliver of the CPU: under a 4-process CPU hog they had ~6% of a core, and the
test suite's two Ray runs took 1443 s and 1655 s. A local instance starts them at the
driver's niceness (unless ``RAY_worker_niceness`` is set); a cluster's workers run at what
the cluster was started with, and the driver warns when that is lower priority than its own.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ap_gym.processes import owned_tempdir
from ap_gym.protocol.config import RunConfig
from ap_gym.protocol.executors.base import EvalJob, EvalResult, infra_results
from ap_gym.protocol.executors.worker import Worker

__all__ = ["RayExecutor", "init_ray"]

log = logging.getLogger(__name__)
NICENESS = "RAY_worker_niceness"


def _niceness() -> int:
    return os.nice(0)


def init_ray(config: RunConfig) -> Any:
    """Ray, initialised once per process: a local instance, or the cluster at ``ray_address``."""
    try:
        import ray
    except ImportError as e:
        raise RuntimeError("the ray executor needs Ray: pip install 'ap-gym[ray]' (or pip install ray)") from e
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "ignore_reinit_error": True}
        if config.ray_address:
            names = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "AP_GYM_CACHE", "PYTHONPATH")
            kwargs["runtime_env"] = {"env_vars": {k: os.environ[k] for k in names if k in os.environ}}
            ray.init(address=config.ray_address, **kwargs)
        else:  # a private instance on the loopback interface only, its workers at our niceness
            before = os.environ.get(NICENESS)
            # an increment on what the worker inherits (the driver's niceness), not a level
            os.environ[NICENESS] = before if before is not None else "0"
            try:  # the raylet ray.init starts reads it; it is not left in our environment
                ray.init(num_cpus=os.cpu_count() or 1, _node_ip_address="127.0.0.1", **kwargs)
            finally:
                if before is None:
                    os.environ.pop(NICENESS, None)
        _check_niceness(ray)
    return ray


def _check_niceness(ray: Any) -> int:
    """Warn once per process when Ray's workers run at a lower priority than the driver."""
    theirs = ray.get(ray.remote(num_cpus=0)(_niceness).remote())
    if theirs > os.nice(0):
        log.warning("Ray's workers run at niceness %d, the driver at %d: on a busy machine they get a fraction of "
                    "the CPU (Ray's default worker_niceness is 15). Start the cluster with %s=0 in the "
                    "environment of `ray start` to give them the driver's priority.", theirs, os.nice(0), NICENESS)
    return int(theirs)


class _RayEvalWorker:
    """A Ray actor around a :class:`Worker`; it fetches each snapshot once."""

    def __init__(self, config: RunConfig) -> None:
        self._worker = Worker(config)
        self._snapshot: tuple[str, str] | None = None

    def run(self, job: EvalJob, snapshot_ref: list[Any]) -> list[EvalResult]:
        import dataclasses

        import ray

        if job.snapshot:
            if self._snapshot is None or self._snapshot[0] != job.snapshot:
                if self._snapshot is not None:
                    shutil.rmtree(self._snapshot[1], ignore_errors=True)
                local = str(owned_tempdir("ap_gym_snapshot_"))
                for name, data in ray.get(snapshot_ref[0]).items():
                    (Path(local) / name).write_bytes(data)
                self._snapshot = (job.snapshot, local)
            job = dataclasses.replace(job, snapshot=self._snapshot[1])
        return self._worker.run(job)


class RayExecutor:
    """Held-out jobs on Ray actors and grid settings as Ray tasks; see the module docstring."""

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self._actors: list[Any] = []
        self._cls: Any = None

    def _ensure_actors(self) -> list[Any]:
        ray = init_ray(self.config)
        if len(self._actors) != self.config.workers:
            self._kill_actors()
            cpus = float(ray.cluster_resources().get("CPU", 1.0))
            self._cls = ray.remote(num_cpus=min(1.0, cpus / self.config.workers))(_RayEvalWorker)
            self._actors = [self._cls.remote(self.config) for _ in range(self.config.workers)]
        return self._actors

    def evaluate(self, jobs: Sequence[EvalJob]) -> Iterator[tuple[EvalJob, list[EvalResult]]]:
        """Held-out jobs over the actors, yielded as they finish; a dead actor is replaced."""
        if not jobs:
            return
        ray = init_ray(self.config)
        actors = self._ensure_actors()
        snapshot = jobs[0].snapshot
        files = {p.name: p.read_bytes() for p in Path(snapshot).iterdir() if p.is_file()} if snapshot else {}
        snapshot_ref = [ray.put(files)]  # in a list, so actors fetch it themselves, once
        queue = [(job, 0) for job in jobs]
        free = list(range(len(actors)))
        pending: dict[Any, tuple[int, EvalJob, int]] = {}
        while queue or pending:
            while queue and free:
                a = free.pop(0)
                job, tries = queue.pop(0)
                pending[actors[a].run.remote(job, snapshot_ref)] = (a, job, tries)
            (ref,), _ = ray.wait(list(pending), num_returns=1)
            a, job, tries = pending.pop(ref)
            try:
                results = ray.get(ref)
            except ray.exceptions.RayActorError as e:  # the worker process died: new actor, retry
                actors[a] = self._cls.remote(self.config)
                free.append(a)
                if tries < self.config.retries:
                    queue.insert(0, (job, tries + 1))
                    continue
                results = infra_results(job, f"Ray worker died: {e}")
            else:
                free.append(a)
            yield job, results

    def run_settings(self, settings: Sequence[tuple[str, str, int, str | None]], run_one: Callable[..., str],
                     on_done: Callable[[str], None]) -> None:
        """``run_one(config, benchmark, label, seed, backbone)`` for every setting as a Ray task,
        ``workers`` at a time; each writes its own results. A failed setting raises here."""
        ray = init_ray(self.config)
        cpus = float(ray.cluster_resources().get("CPU", 1.0))
        task = ray.remote(num_cpus=min(1.0, cpus / self.config.workers), max_retries=self.config.retries)(run_one)
        queue = list(settings)
        pending: list[Any] = []
        while queue or pending:
            while queue and len(pending) < self.config.workers:
                pending.append(task.remote(self.config, *queue.pop(0)))
            done, pending = ray.wait(pending, num_returns=1)
            on_done(ray.get(done[0]))

    def _kill_actors(self) -> None:
        if self._actors:
            import ray

            for actor in self._actors:
                ray.kill(actor)
            self._actors = []

    def close(self) -> None:
        self._kill_actors()
