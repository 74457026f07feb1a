"""A worker: plays held-out episodes against frozen snapshots, wherever it runs.

The same object runs in the driver (one worker), in each local worker process and in
each Ray actor. It keeps its envs (one per lane), its policies (one per lane, loaded from
a snapshot once) and its models between jobs, and frees them in ``close``.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from ap_gym.processes import owned_tempdir
from ap_gym.protocol.config import RunConfig, import_modules
from ap_gym.protocol.executors.base import EvalJob, EvalResult
from ap_gym.protocol.setting import (
    Resources,
    build_policy,
    make_env,
    needs_backbone,
    run_with_retries,
)

__all__ = ["Worker"]


class Worker:
    """Held-out episodes of a run, ``config.lanes`` at a time.

    Args:
        config: the run's config (its ``imports`` are imported first).
        resources: the process's models (a new set when ``None``).
        threads: torch threads for this worker (workers share the cores: N workers each
            using every core thrash badly).
    """

    def __init__(self, config: RunConfig, resources: Resources | None = None, *, threads: int | None = None) -> None:
        import_modules(config.imports)
        if threads is not None:
            import torch

            torch.set_num_threads(threads)
        self.config = config
        self.resources = resources or Resources(config.serving.model_dump())
        self._envs: list[Any] = []
        self._env_key: Any = None
        self._policies: list[Any] = []
        self._policy_key: Any = None
        self._batcher: Any = None
        self._tmp = owned_tempdir("ap_gym_worker_")

    def warm(self, benchmark: str, backbone: str | None = None) -> None:
        """Load the model and the envs now (as a worker starts), not in its first episode."""
        specs = self.config.backbone_specs()
        if needs_backbone(self.config):  # a model-free policy's job names no backbone: warm the first
            self.resources.backbone(specs[backbone] if backbone in specs else next(iter(specs.values())))
        self._ensure_envs(benchmark)

    def _ensure_envs(self, benchmark: str) -> list[Any]:
        key = (benchmark, self.config.lanes)
        if self._env_key != key:
            self._close_envs()
            self._envs = [make_env(self.config, benchmark) for _ in range(self.config.lanes)]
            self._env_key = key
        return self._envs

    def _ensure_policies(self, job: EvalJob) -> list[Any]:
        from ap_gym.backbones.base import BatchScorer
        from ap_gym.policies import get_policy

        key = (job.label, job.backbone, job.snapshot, job.seed, self.config.lanes)
        if self._policy_key == key:
            return self._policies
        self._close_policies()
        spec = self.config.policy(job.label)
        info = get_policy(spec.name)
        lanes = self.config.lanes
        backbones: list[Any] = [None] * lanes
        if lanes > 1 and "backbone" in info.needs:
            shared = self.resources.backbone(self.config.backbone_specs()[job.backbone])
            if isinstance(shared, BatchScorer):  # in-process: one forward pass per step for all lanes
                from ap_gym.backbones.batching import BatchingBackbone

                self._batcher = BatchingBackbone(shared, lanes)
                backbones = [self._batcher.lane(i) for i in range(lanes)]
            # a served backbone is thread-safe: the lanes' requests simply run concurrently
        for lane in range(lanes):
            db = Path(tempfile.mkdtemp(dir=self._tmp)) / "memory.sqlite"
            policy = build_policy(spec, self.config, db, job.seed, self.resources, backbone=backbones[lane],
                                  backbone_label=job.backbone, benchmark=job.benchmark)
            if job.snapshot and info.stateful:
                policy.load_state(job.snapshot)
            self._policies.append(policy.eval())
        self._policy_key = key
        return self._policies

    def run(self, job: EvalJob) -> list[EvalResult]:
        """Play the job's tasks (one per lane at a time, in lock-step) and return their results."""
        from ap_gym.rollout import run_episodes

        envs = self._ensure_envs(job.benchmark)
        policies = self._ensure_policies(job)
        config = self.config

        def play(env: Any, policy: Any, task_id: str) -> EvalResult:
            episode, attempts = run_with_retries(env, policy, task_id, job.seed, config.retries)
            return EvalResult(episode, attempts)

        if len(job.task_ids) == 1:
            return [play(envs[0], policies[0], job.task_ids[0])]
        batcher = self._batcher
        if batcher is not None:
            batcher.start(min(config.lanes, len(job.task_ids)))
        return run_episodes(envs, policies, list(job.task_ids), runner=play,
                            on_lane_done=(lambda _lane: batcher.retire()) if batcher is not None else None)

    def _close_envs(self) -> None:
        for env in self._envs:
            env.close()
        self._envs, self._env_key = [], None

    def _close_policies(self) -> None:
        from ap_gym.types import StatefulPolicy

        for policy in self._policies:
            if isinstance(policy, StatefulPolicy):
                policy.close()
        self._policies, self._policy_key, self._batcher = [], None, None

    def close(self) -> None:
        self._close_envs()
        self._close_policies()
        shutil.rmtree(self._tmp, ignore_errors=True)
