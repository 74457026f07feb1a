"""The local executor: held-out episodes in this process, or in worker processes it owns.

With ``workers: 1`` a :class:`~ap_gym.protocol.executors.worker.Worker` runs in this
process and shares its models. With more, each worker is a child process (:class:`~ap_gym.processes.Child`: a fresh
interpreter that never re-imports the caller's ``__main__``) that loads
the model and the envs as it starts (all in parallel), then takes jobs over a pipe and
keeps its envs, policies and snapshot between them. Results come back in job order. A
worker process that dies is replaced and its job retried (``retries`` times, then its
tasks are recorded as infrastructure failures). Worker processes end with the executor,
and die with the driver even when it is killed (Linux's parent-death signal).
"""

from __future__ import annotations

import contextlib
import signal
import traceback
from collections import deque
from collections.abc import Iterator, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

from ap_gym.processes import Child, cpu_budget
from ap_gym.protocol.config import RunConfig
from ap_gym.protocol.executors.base import EvalJob, EvalResult, infra_results
from ap_gym.protocol.executors.worker import Worker
from ap_gym.protocol.setting import Resources

__all__ = ["LocalExecutor", "WorkerFailed"]


class WorkerFailed(RuntimeError):
    """A job raised inside a worker process (not an infrastructure failure: a bug); the
    message carries the worker's traceback."""


def _serve(conn: Connection, config: RunConfig, first: EvalJob, threads: int) -> None:
    """A worker process: warm up, then answer jobs until told to stop (``None``) or orphaned."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver decides when to stop
    worker = Worker(config, Resources(), threads=threads)
    try:
        worker.warm(first.benchmark, first.backbone)
        while True:
            try:
                job = conn.recv()
            except (EOFError, OSError):
                break
            if job is None:
                break
            answer: tuple[str, Any]
            try:
                answer = ("ok", worker.run(job))
            except Exception:
                answer = ("error", traceback.format_exc())
            try:
                conn.send(answer)
            except OSError:
                break  # the driver stopped (a signal) or died: nobody is left to tell
    finally:
        worker.close()


class _Process:
    def __init__(self, config: RunConfig, first: EvalJob, threads: int) -> None:
        # A Child, not a multiprocessing Process: it starts processes of its own (game
        # generation's helper, ALFWorld's engine), never re-imports the caller's script, and
        # dies with the driver (the parent-death signal).
        self.process = Child(_serve, config, first, threads, name="ap-gym-worker")
        self.conn = self.process.conn

    def stop(self, timeout: float = 10.0) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.conn.send(None)
        self.process.stop(timeout)


class LocalExecutor:
    """Held-out jobs on this machine; see the module docstring.

    Args:
        config: the run's config (``workers``, ``retries``).
        resources: the driver's models, shared with the in-process worker.
    """

    def __init__(self, config: RunConfig, resources: Resources) -> None:
        self.config = config
        self.resources = resources
        self._inline: Worker | None = None
        self._processes: list[_Process] = []

    def evaluate(self, jobs: Sequence[EvalJob]) -> Iterator[tuple[EvalJob, list[EvalResult]]]:
        if not jobs:
            return
        if self.config.workers <= 1:
            if self._inline is None:
                self._inline = Worker(self.config, self.resources, threads=self.worker_threads())
            for job in jobs:
                yield job, self._inline.run(job)
            return
        yield from self._on_processes(jobs)

    def worker_threads(self) -> int:
        """Torch threads per worker: ``threads`` from the config, else the CPU budget
        (:func:`~ap_gym.processes.cpu_budget`) shared among the workers."""
        return self.config.threads or max(1, cpu_budget() // max(1, self.config.workers))

    def _start(self, first: EvalJob) -> _Process:
        return _Process(self.config, first, self.worker_threads())

    def _on_processes(self, jobs: Sequence[EvalJob]) -> Iterator[tuple[EvalJob, list[EvalResult]]]:
        if not self._processes:  # one set per run: workers keep their model, envs and snapshot
            self._processes = [self._start(jobs[0]) for _ in range(self.config.workers)]
        queue: deque[tuple[int, int]] = deque((i, 0) for i in range(len(jobs)))
        busy: dict[int, tuple[int, int]] = {}  # worker slot -> (job index, tries)
        done: dict[int, list[EvalResult]] = {}
        next_out = 0
        while queue or busy:
            for slot in range(len(self._processes)):
                if slot not in busy and queue:
                    index, tries = queue.popleft()
                    try:
                        self._processes[slot].conn.send(jobs[index])
                    except (OSError, ValueError):  # it died while idle: a new one takes the job
                        self._replace(slot, jobs[index])
                        queue.appendleft((index, tries))
                        continue
                    busy[slot] = (index, tries)
            ready = wait([self._processes[s].conn for s in busy])
            for slot in [s for s in busy if self._processes[s].conn in ready]:
                index, tries = busy.pop(slot)
                try:
                    status, payload = self._processes[slot].conn.recv()
                except (EOFError, OSError):  # the worker process died: a new one, and the job again
                    code = self._processes[slot].process.exitcode
                    self._replace(slot, jobs[index])
                    if tries < self.config.retries:
                        queue.appendleft((index, tries + 1))
                    else:
                        done[index] = infra_results(jobs[index], f"worker process died (exit code {code})")
                    continue
                if status == "error":
                    raise WorkerFailed(f"a worker failed on {jobs[index].benchmark}/{jobs[index].label}:\n{payload}")
                done[index] = payload
            while next_out in done:
                yield jobs[next_out], done.pop(next_out)
                next_out += 1

    def _replace(self, slot: int, job: EvalJob) -> None:
        old = self._processes[slot]
        with contextlib.suppress(Exception):
            old.process.kill()
            old.conn.close()
        self._processes[slot] = self._start(job)

    def close(self) -> None:
        for process in self._processes:
            process.stop()
        self._processes = []
        if self._inline is not None:
            self._inline.close()
            self._inline = None
