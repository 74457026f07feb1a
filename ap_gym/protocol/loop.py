"""The paper's protocol: iterations of training, then a frozen held-out evaluation.

For each benchmark x policy x seed, ``iterations`` rounds (default 10): sample
``train_per_iter`` training tasks (default 50) with a generator fixed by the seed and the
iteration, run them in training mode, in order (each changes memory), snapshot the
policy's state, then run the whole held-out split in evaluation mode against that
frozen snapshot. Held-out episodes are independent, so an executor
(:mod:`ap_gym.protocol.executors`) may run them in parallel, each worker with its own env.

Resume: start the same command again. Finished held-out episodes are skipped; an
iteration whose training was interrupted is re-run from the snapshot taken before it, so
a killed run ends with the same results as an uninterrupted one (greedy backbone).
Infrastructure failures are retried ``retries`` times, then recorded as such.

Policies that do not learn (the registry says so: no memory, random) skip training
episodes by default: nothing they do in training can change a later episode.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ap_gym.paths import atomic_write_json
from ap_gym.protocol.config import ConfigError, RunConfig, import_modules
from ap_gym.protocol.executors import Executor, make_executor
from ap_gym.protocol.executors.base import EvalJob, EvalResult, chunks
from ap_gym.protocol.results import BENCHMARK, EPISODES, EpisodeLine, EpisodeLog, summarise
from ap_gym.protocol.setting import (
    Resources,
    Setting,
    build_policy,
    check_backbones,
    make_env,
    run_with_retries,
)

__all__ = ["Runner", "heldout_subset", "run", "training_sample"]


def _rng(*parts: Any) -> random.Random:
    key = "|".join(str(p) for p in parts)
    return random.Random(int(hashlib.sha256(key.encode()).hexdigest()[:16], 16))


def training_sample(task_ids: Sequence[str], n: int, seed: int, iteration: int) -> list[str]:
    """The training tasks of one iteration: fixed by seed and iteration, identical for every method."""
    rng = _rng("train", seed, iteration)
    if n <= len(task_ids):
        return rng.sample(list(task_ids), n)
    return [rng.choice(list(task_ids)) for _ in range(n)]


def heldout_subset(task_ids: Sequence[str], n: int | None) -> list[str]:
    """All held-out tasks, or ``n`` of them spread evenly over the split (so over its families)."""
    ids = list(task_ids)
    if n is None or n >= len(ids):
        return ids
    return [ids[(i * len(ids)) // n] for i in range(n)]


def run(config: RunConfig, *, progress: bool = True) -> Path:
    """Run (or resume) every setting of ``config``; returns the run directory."""
    return Runner(config).run(progress=progress)


def run_one_setting(config: RunConfig, benchmark: str, label: str, seed: int, backbone: str | None = None) -> str:
    """One setting of a grid, training and held-out evaluation in this process (a Ray task)."""
    import os

    import torch

    local = config.replace(executor="local", workers=1)
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, config.workers)))
    runner = Runner(local)
    try:
        setting = Setting(benchmark, local.policy(label), seed, backbone)
        runner.run_setting(setting, _NoProgress())
    finally:
        runner.close()
    return str(setting)


class _NoProgress:
    def add_task(self, *args: Any, **kwargs: Any) -> int:
        return 0

    def advance(self, *args: Any, **kwargs: Any) -> None:
        pass


class Runner:
    """Runs a config's settings; owns the models (:class:`Resources`) and the executor."""

    def __init__(self, config: RunConfig) -> None:
        import_modules(config.imports)
        self.config = config
        self.resources = Resources(config.serving.model_dump())
        self.executor: Executor = make_executor(config, self.resources)

    def settings(self) -> list[Setting]:
        """benchmark x [backbone x] policy x seed, in that order."""
        c = self.config
        return [Setting(b, p, s, m) for b in c.benchmark_ids() for m in c.backbone_specs() for p in c.policies
                for s in c.seeds]

    def run(self, *, progress: bool = True) -> Path:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        config = self.config
        run_dir = config.run_dir
        self._check_resumable(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        self._write_metadata(run_dir)
        settings = self.settings()
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      disable=not progress) as bar:
            overall = bar.add_task(f"{config.name}: settings", total=len(settings))
            try:
                if config.executor == "ray" and len(settings) > 1 and config.workers > 1:
                    self.executor.run_settings(  # type: ignore[attr-defined]
                        [(s.benchmark, s.label, s.seed, s.backbone) for s in settings], run_one_setting,
                        lambda _name: bar.advance(overall))
                else:
                    for setting in settings:
                        self.run_setting(setting, bar)
                        bar.advance(overall)
            finally:
                self.close()
        atomic_write_json(run_dir / "summary.json", summarise(run_dir))
        return run_dir

    def close(self) -> None:
        self.executor.close()

    def _check_resumable(self, run_dir: Path) -> None:
        saved = run_dir / "config.json"
        if not saved.exists():
            return
        try:
            previous = RunConfig.from_dict(json.loads(saved.read_text())["config"]).what_it_computes()
        except (ConfigError, KeyError, ValueError):
            previous = None
        if previous != self.config.what_it_computes():
            raise ConfigError(
                f"{run_dir} holds a run with a different config; resume with the same config "
                "or choose another run name (name: ... or --name)"
            )

    def _write_metadata(self, run_dir: Path) -> None:
        import ap_gym
        from ap_gym.policies.prompting import all_prompts

        described = check_backbones(self.config, self.resources)  # served ones: checked now, not per episode
        meta: dict[str, Any] = {"config": self.config.to_dict(), "ap_gym_version": ap_gym.__version__}
        judges = {k.removeprefix("judge:"): described.pop(k) for k in list(described) if k.startswith("judge:")}
        if self.config.backbones:
            meta["backbones"] = described
        else:
            meta["backbone"] = described.get("")
        if judges:
            meta["judges"] = judges
        atomic_write_json(run_dir / "config.json", meta)
        atomic_write_json(run_dir / "prompts.json", all_prompts())

    # ------------------------------------------------------------- setting
    def run_setting(self, setting: Setting, bar: Any) -> None:
        """Train and evaluate one setting, resuming from what its log and snapshots hold."""
        from ap_gym.policies import get_policy

        config = self.config
        directory = setting.directory(config.run_dir)
        directory.mkdir(parents=True, exist_ok=True)
        log = EpisodeLog(directory / EPISODES)
        env = make_env(config, setting.benchmark)
        atomic_write_json(directory / BENCHMARK, {"benchmark": setting.benchmark, "env_id": env.spec.id if env.spec else None,
                                                  "stand_in": getattr(env.unwrapped, "stand_in", None)})
        info = get_policy(setting.policy.name)
        policy = build_policy(setting.policy, config, directory / "memory.sqlite", setting.seed, self.resources,
                              backbone_label=setting.backbone)
        stateful, trains = info.stateful, info.learns or config.train_stateless
        train_ids = env.unwrapped.task_ids("train")
        heldout = heldout_subset(env.unwrapped.task_ids("test"), config.heldout)
        task = bar.add_task(str(setting),
                            total=config.iterations * ((config.train_per_iter if trains else 0) + len(heldout))
                            + (len(heldout) if config.eval_before_training else 0))

        def line(phase: str, iteration: int, index: int, result: EvalResult) -> EpisodeLine:
            return EpisodeLine(phase, iteration, index, setting.benchmark, setting.label, setting.seed,
                               result.attempts, result.episode, setting.backbone)

        def evaluate(it: int, snapshot: Path) -> None:
            policy.eval()
            done = log.done("eval", it)
            bar.advance(task, len(done))
            remaining = [(i, t) for i, t in enumerate(heldout) if t not in done]
            for index, result in self.evaluate(setting, env, policy, str(snapshot) if stateful else "", remaining):
                log.append(line("eval", it, index, result))
                bar.advance(task)

        try:
            if config.eval_before_training:  # iteration -1: the untrained policy, empty memory
                before = directory / "snapshots" / "before"
                if stateful and not (before / "state.json").exists():
                    policy.train()
                    policy.clear_state()
                    self._save_snapshot(policy, before)
                evaluate(-1, before)
            for it in range(config.iterations):
                snapshot = directory / "snapshots" / f"iter{it}"
                sample = training_sample(train_ids, config.train_per_iter, setting.seed, it) if trains else []
                n_trained = log.count("train", it)
                if stateful and n_trained == len(sample) and (snapshot / "state.json").exists():
                    policy.load_state(snapshot)  # this iteration's training is finished
                    bar.advance(task, n_trained)
                elif n_trained == len(sample):
                    bar.advance(task, n_trained)  # nothing to learn (or nothing to train)
                else:
                    if stateful:  # (re)start the iteration from the state it began with
                        policy.train()
                        if it == 0:
                            policy.clear_state()
                        else:
                            policy.load_state(directory / "snapshots" / f"iter{it - 1}")
                        policy.iteration = it
                    log.drop("train", it)
                    policy.train()
                    for index, task_id in enumerate(sample):
                        episode, attempts = run_with_retries(env, policy, task_id, setting.seed, config.max_steps,
                                                             config.retries)
                        log.append(line("train", it, index, EvalResult(episode.to_dict(), attempts)))
                        bar.advance(task)
                    if stateful:
                        self._save_snapshot(policy, snapshot)
                evaluate(it, snapshot)
        finally:
            env.close()
            if stateful:
                policy.close()

    @staticmethod
    def _save_snapshot(policy: Any, snapshot: Path) -> None:
        """The policy's state into ``snapshot``, atomically (a killed run leaves the old one or none)."""
        tmp = snapshot.with_name(snapshot.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        policy.save_state(tmp)
        shutil.rmtree(snapshot, ignore_errors=True)
        tmp.rename(snapshot)

    def evaluate(self, setting: Setting, env: Any, policy: Any, snapshot: str,
                  remaining: list[tuple[int, str]]) -> Iterable[tuple[int, EvalResult]]:
        """Held-out episodes as ``(index, result)``: in this process on the setting's own env
        and policy, or through the executor, ``lanes`` per job."""
        config = self.config
        if not remaining:
            return
        if config.executor == "local" and config.workers <= 1 and (config.lanes <= 1 or len(remaining) == 1):
            for index, task_id in remaining:
                episode, attempts = run_with_retries(env, policy, task_id, setting.seed, config.max_steps,
                                                     config.retries)
                yield index, EvalResult(episode.to_dict(), attempts)
            return
        groups = list(chunks(remaining, config.lanes))
        jobs = [EvalJob(setting.benchmark, setting.label, setting.seed, snapshot, tuple(t for _, t in group),
                        setting.backbone) for group in groups]
        indices = {id(job): [i for i, _ in group] for job, group in zip(jobs, groups, strict=True)}
        for job, results in self.executor.evaluate(jobs):
            yield from zip(indices[id(job)], results, strict=True)
