"""Executors: where held-out episodes (and, on Ray, whole settings) run.

* :class:`~ap_gym.protocol.executors.local.LocalExecutor`: this process, or worker
  processes it owns (``workers``);
* :class:`~ap_gym.protocol.executors.ray.RayExecutor`: Ray actors and tasks, on a local
  instance or a cluster.

Both run :class:`~ap_gym.protocol.executors.worker.Worker` s; the driver writes every
result, so results and resume do not depend on the executor.
"""

from __future__ import annotations

from ap_gym.protocol.config import RunConfig
from ap_gym.protocol.executors.base import EvalJob, EvalResult, Executor
from ap_gym.protocol.executors.local import LocalExecutor
from ap_gym.protocol.executors.worker import Worker
from ap_gym.protocol.setting import Resources

__all__ = ["EvalJob", "EvalResult", "Executor", "LocalExecutor", "Worker", "make_executor"]


def make_executor(config: RunConfig, resources: Resources) -> Executor:
    """The executor ``config.executor`` names."""
    if config.executor == "ray":
        from ap_gym.protocol.executors.ray import RayExecutor

        return RayExecutor(config)
    return LocalExecutor(config, resources)
