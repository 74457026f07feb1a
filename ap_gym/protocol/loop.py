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

import contextlib
import json
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ap_gym.paths import atomic_write_json
from ap_gym.protocol.config import ConfigError, RunConfig, import_modules
from ap_gym.protocol.executors import Executor, make_executor
from ap_gym.protocol.executors.base import EvalJob, EvalResult, SettingsRunner, chunks
from ap_gym.protocol.results import (
    BENCHMARK,
    EPISODES,
    RUNNING,
    WORLDS,
    EpisodeLine,
    EpisodeLog,
    WorldLog,
    summarise,
)
from ap_gym.protocol.setting import (
    Resources,
    Setting,
    build_policy,
    make_env,
    preflight,
    run_with_retries,
)
from ap_gym.seeding import derived_rng

__all__ = ["Runner", "heldout_subset", "run", "training_sample"]


def training_sample(task_ids: Sequence[str], n: int, seed: int, iteration: int) -> list[str]:
    """The training tasks of one iteration: fixed by seed and iteration, identical for every method."""
    rng = derived_rng("train", seed, iteration)
    if n <= len(task_ids):
        return rng.sample(list(task_ids), n)
    return [rng.choice(list(task_ids)) for _ in range(n)]


def _close_all(closers: Iterable[Callable[[], Any]], stopped: BaseException | None = None) -> None:
    """Call every closer, even after one fails.

    With ``stopped`` (the exception that is ending the run: Ctrl-C, SIGTERM, a crash), a
    closer's failure becomes a note on it, and the caller raises ``stopped``. A part left
    half-open by the interruption must not replace the reason the run stopped with its own
    traceback (a Ctrl-C between a memory's closing and reopening its database once ended
    the CLI with a ``sqlite3`` error and exit status 1, not 130). Without ``stopped``, the
    first failure is raised once every closer has run.
    """
    first: Exception | None = None
    for close in closers:
        try:
            close()
        except Exception as e:
            if stopped is not None:
                stopped.add_note(f"while stopping, {getattr(close, '__qualname__', close)} also failed: "
                                 f"{type(e).__name__}: {e}")
            elif first is None:
                first = e
    if first is not None:
        raise first


@contextlib.contextmanager
def _closing(closers: Iterable[Callable[[], Any]]) -> Iterator[None]:
    """Run the block, then :func:`_close_all` the closers: as a stop's notes when the block
    raised (the block's exception goes on), else raising the first failure."""
    try:
        yield
    except BaseException as e:
        _close_all(closers, stopped=e)
        raise
    _close_all(closers)


def heldout_subset(task_ids: Sequence[str], n: int | None) -> list[str]:
    """All held-out tasks, or ``n`` of them spread evenly over the split (so over its families)."""
    ids = list(task_ids)
    if n is None or n >= len(ids):
        return ids
    return [ids[(i * len(ids)) // n] for i in range(n)]


def mark_running(run_dir: Path) -> Path:
    """``running.json``: which process writes this run (pid, host, its start), so that a
    reader can tell a run in progress from one that was killed (both lack summary.json)."""
    import os
    import socket

    from ap_gym.processes import process_started

    marker = run_dir / RUNNING
    atomic_write_json(marker, {"pid": os.getpid(), "host": socket.gethostname(), "started": process_started(os.getpid())})
    return marker


def run(config: RunConfig, *, progress: bool = True, other_weights: bool = False) -> Path:
    """Run (or resume) every setting of ``config``; returns the run directory.

    A run resumes only on the weights it started with: a backbone given as a model directory
    (a checkpoint) is identified by its weights' SHA-256, recorded when the run starts, and a
    resume on a directory since retrained is refused unless ``other_weights`` (the run then
    mixes two models, and its ``config.json`` says so)."""
    return Runner(config, other_weights=other_weights).run(progress=progress)


def run_one_setting(config: RunConfig, benchmark: str, label: str, seed: int, backbone: str | None = None) -> str:
    """One setting of a grid, training and held-out evaluation in this process (a Ray task)."""
    import torch

    from ap_gym.processes import cpu_budget

    local = config.replace(executor="local", workers=1)
    # the cores this process may use (its affinity, OMP_NUM_THREADS), not the machine's
    torch.set_num_threads(config.threads or max(1, cpu_budget() // max(1, config.workers)))
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

    def __init__(self, config: RunConfig, *, other_weights: bool = False) -> None:
        import_modules(config.imports)
        self.config = config
        self.other_weights = other_weights
        self.resources = Resources(config.serving.model_dump())
        self.executor: Executor = make_executor(config, self.resources)

    def settings(self) -> list[Setting]:
        """benchmark x [backbone x] policy x seed, in that order. A policy that uses no model
        runs once per benchmark and seed, whatever the backbones (its results are the same)."""
        from ap_gym.policies import get_policy

        c = self.config
        labels = list(c.backbone_specs())
        out = []
        for b in c.benchmark_ids():
            for m in labels:
                for p in c.policies:
                    if "backbone" not in get_policy(p.name).needs and m != labels[0]:
                        continue
                    model = m if "backbone" in get_policy(p.name).needs else None
                    out += [Setting(b, p, s, model) for s in c.seeds]
        return out

    def run(self, *, progress: bool = True) -> Path:
        from ap_gym.paths import LockedError, exclusive_lock

        run_dir = self.config.run_dir
        # one writer per run: an OS lock beside it (a second `ap-gym run` of it is refused, naming the
        # first; the lock dies with its process, so a killed run leaves nothing to clear)
        try:
            with exclusive_lock(run_dir.parent / f".{run_dir.name}.lock", f"run {run_dir}"):
                return self._run(progress)
        except LockedError as e:
            raise ConfigError(f"{e} (two writers of one run would write its episodes twice)") from None

    def _run(self, progress: bool) -> Path:
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
        inputs = self._check_inputs(run_dir)
        self._check_skills()
        built = preflight(self.config, self.resources)  # every part checked now, never mid-grid; nothing written yet
        run_dir.mkdir(parents=True, exist_ok=True)
        self._write_metadata(run_dir, built)
        self._keep_inputs(run_dir, inputs)
        settings = self.settings()
        marker = mark_running(run_dir)
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      disable=not progress) as bar:
            overall = bar.add_task(f"{config.name}: settings", total=len(settings))
            # a SIGKILL skips the marker's removal: the viewer then finds the pid gone
            with _closing([self.close, lambda: marker.unlink(missing_ok=True)]):
                if isinstance(self.executor, SettingsRunner) and len(settings) > 1 and config.workers > 1:
                    self.executor.run_settings(
                        [(s.benchmark, s.label, s.seed, s.backbone) for s in settings], run_one_setting,
                        lambda _name: bar.advance(overall))
                else:
                    for setting in settings:
                        self.run_setting(setting, bar)
                        bar.advance(overall)
        atomic_write_json(run_dir / "summary.json", summarise(run_dir))
        return run_dir

    def close(self) -> None:
        self.executor.close()

    def _check_resumable(self, run_dir: Path) -> None:
        saved = run_dir / "config.json"
        if not saved.exists():
            return
        try:
            meta = json.loads(saved.read_text(encoding="utf-8"))
            if not isinstance(meta, dict) or not isinstance(meta.get("config"), dict):
                raise ValueError("it holds no config object")
        except (ValueError, UnicodeDecodeError) as e:  # damaged: say so, not "a different config"
            raise ConfigError(
                f"{saved} is damaged ({e}); its episodes are intact: restore config.json from a copy (or "
                "write the run's config back with the same options) to resume, or choose another run name"
            ) from None
        try:
            previous = RunConfig.from_dict(meta["config"]).what_it_computes()
        except (ConfigError, KeyError, ValueError):
            previous = None
        if previous != self.config.what_it_computes():
            raise ConfigError(
                f"{run_dir} holds a run with a different config; resume with the same config "
                "or choose another run name (name: ... or --name)"
            )
        changed = {spec: (sha, now) for spec, sha in (meta.get("weights") or {}).items()
                   if (now := self._local_weights().get(spec)) is not None and now != sha}
        if changed and not self.other_weights:
            raise ConfigError(
                f"{run_dir} was run with other weights than " + "; ".join(
                    f"{spec} holds now (sha256 {then[:12]} then, {now[:12]} now)" for spec, (then, now) in
                    changed.items()) + ": the directory was retrained since. Resume with the weights it started "
                "with, choose another run name, or pass --other-weights to go on with these (one run, two models)")
        self._changed_weights = changed

    def _local_weights(self) -> dict[str, str]:
        """The weights' SHA-256 of every backbone and judge given as a local model directory or
        file (a checkpoint): a model's identity is its weights, not its path."""
        from ap_gym.backbones.checkpoint import CheckpointError, weights_checksum

        if getattr(self, "_weights", None) is None:
            specs = [*self.config.backbone_specs().values(), *(self.config.judges or {}).values()]
            found: dict[str, str] = {}
            for spec in dict.fromkeys(specs):
                path = Path(spec).expanduser()
                if spec in ("default", "tiny") or spec.startswith(("tiny:", "http://", "https://", "served:")) \
                        or not path.exists():
                    continue
                try:
                    found[spec] = weights_checksum(path)
                except CheckpointError as e:
                    raise ConfigError(f"backbone {spec}: {e}") from None
            self._weights: dict[str, str] | None = found
        return dict(self._weights or {})

    def _input_files(self) -> list[Path]:
        """Files the run reads as it goes (frozen skills files named by path)."""
        paths = {str(p.options["frozen_abstractions"]) for p in self.config.policies
                 if isinstance(p.options.get("frozen_abstractions"), str)}
        return [Path(p) for p in sorted(paths)]

    def _check_skills(self) -> None:
        """Every setting with a frozen skills file finds its own set in it (its backbone and
        seed), checked before anything is written: a file exported for seed 0 once crashed
        a run at its second setting, mid-grid."""
        from ap_gym.errors import APGymError
        from ap_gym.protocol.skills import skills_for

        missing = []
        for s in self.settings():
            path = s.policy.options.get("frozen_abstractions")
            if isinstance(path, str):
                try:
                    skills_for(path, s.benchmark, s.backbone, s.seed)
                except APGymError as e:
                    missing.append(f"{s.benchmark}/{s.backbone + '/' if s.backbone else ''}{s.label}/seed{s.seed}: {e}")
        if missing:
            raise ConfigError(f"{len(missing)} setting(s) cannot take their frozen skills, so nothing was run: "
                              + missing[0] + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
                              + ". Export every seed and backbone the config runs: `ap-gym skills RUN --policy LABEL "
                              "--benchmark B --out FILE` without --seed")

    def _check_inputs(self, run_dir: Path) -> dict[str, str]:
        """The input files' hashes; a file edited since the run started (between a kill and
        the resume) is refused: its episodes so far saw the old contents."""
        import hashlib

        current = {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in self._input_files() if p.is_file()}
        manifest = run_dir / "inputs" / "manifest.json"
        try:
            recorded = json.loads(manifest.read_text()) if manifest.exists() else {}
        except ValueError:
            recorded = {}
        for path, digest in current.items():
            before = recorded.get(path, {}).get("sha256") if isinstance(recorded.get(path), dict) else None
            if before is not None and before != digest:
                raise ConfigError(
                    f"{path} changed since this run started (its episodes so far saw the file as it was); restore "
                    f"it from the run's copy {run_dir / 'inputs' / recorded[path]['copy']}, or choose another "
                    "run name (name: ... or --name) to run with the new file")
        return current

    def _keep_inputs(self, run_dir: Path, current: dict[str, str]) -> None:
        import shutil

        folder = run_dir / "inputs"
        manifest = folder / "manifest.json"
        try:
            recorded = json.loads(manifest.read_text()) if manifest.exists() else {}
        except ValueError:
            recorded = {}
        for path, digest in current.items():
            if path not in recorded:
                folder.mkdir(exist_ok=True)
                copy = f"{digest[:12]}-{Path(path).name}"
                shutil.copyfile(path, folder / copy)
                recorded[path] = {"sha256": digest, "copy": copy}
        if current:
            atomic_write_json(manifest, recorded)

    def _write_metadata(self, run_dir: Path, built: dict[str, Any]) -> None:
        import ap_gym
        from ap_gym.policies import get_policy
        from ap_gym.prompts import all_prompts

        meta: dict[str, Any] = {"config": self.config.to_dict(), "ap_gym_version": ap_gym.__version__,
                                "policies": {p.label: {"name": p.name, "needs": sorted(get_policy(p.name).needs)}
                                             for p in self.config.policies}}
        if self.config.backbones:
            meta["backbones"] = built["backbones"]
        else:
            meta["backbone"] = built["backbones"].get("")
        if built["judges"]:
            meta["judges"] = built["judges"]
        if built["embedder"]:  # the report names it: similarity scales differ by embedder
            meta["embedder"] = built["embedder"]
        weights = self._local_weights()
        saved = run_dir / "config.json"
        if weights and saved.exists():  # a resumed run keeps the identity it started with
            with contextlib.suppress(ValueError, OSError):
                weights = {**weights, **(json.loads(saved.read_text(encoding="utf-8")).get("weights") or {})}
        if weights:
            meta["weights"] = weights
        if getattr(self, "_changed_weights", None):
            meta["weights_changed"] = {spec: now for spec, (_, now) in self._changed_weights.items()}
        atomic_write_json(run_dir / "config.json", meta)
        atomic_write_json(run_dir / "prompts.json", all_prompts())

    # ------------------------------------------------------------- setting
    def run_setting(self, setting: Setting, bar: Any) -> None:
        """Train and evaluate one setting, resuming from what its log and snapshots hold."""
        SettingRun(self, setting, bar).run()

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
                episode, attempts = run_with_retries(env, policy, task_id, setting.seed, config.retries)
                yield index, EvalResult(episode, attempts)
            return
        groups = list(chunks(remaining, config.lanes))
        jobs = [EvalJob(setting.benchmark, setting.label, setting.seed, snapshot, tuple(t for _, t in group),
                        setting.backbone) for group in groups]
        indices = {id(job): [i for i, _ in group] for job, group in zip(jobs, groups, strict=True)}
        for job, results in self.executor.evaluate(jobs):
            yield from zip(indices[id(job)], results, strict=True)


class SettingRun:
    """One setting through the protocol (see the module docstring): its env, its policy, its log."""

    def __init__(self, runner: Runner, setting: Setting, bar: Any) -> None:
        from ap_gym.policies import get_policy

        config = self.config = runner.config
        self.runner, self.setting, self.bar = runner, setting, bar
        self.directory = setting.directory(config.run_dir)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.log = EpisodeLog(self.directory / EPISODES)
        self.env = make_env(config, setting.benchmark)
        grammar = getattr(self.env.unwrapped, "grammar", None)
        limit, source = config.step_limit(setting.benchmark)
        atomic_write_json(self.directory / BENCHMARK, {
            "benchmark": setting.benchmark, "env_id": self.env.spec.id if self.env.spec else None,
            "max_steps": limit, "max_steps_from": source,
            "stand_in": getattr(self.env.unwrapped, "stand_in", None),
            "grammar": grammar.to_dict() if grammar is not None else None})
        info = get_policy(setting.policy.name)
        self.policy = build_policy(setting.policy, config, self.directory / "memory.sqlite", setting.seed,
                                   runner.resources, backbone_label=setting.backbone, benchmark=setting.benchmark)
        self.stateful, self.trains = info.stateful, info.learns or config.train_stateless
        #: the training tasks' world facts, for the audit's grounded labeller (memory designs only)
        self.worlds = WorldLog(self.directory / WORLDS) if self.stateful else None
        self.train_ids = self.env.unwrapped.task_ids("train")
        self.heldout = heldout_subset(self.env.unwrapped.task_ids("test"), config.heldout)
        per_iteration = (config.train_per_iter if self.trains else 0) + len(self.heldout)
        self.task = bar.add_task(str(setting), total=config.iterations * per_iteration
                                 + (len(self.heldout) if config.eval_before_training else 0))

    def run(self) -> None:
        with _closing([self.env.close, *([self.policy.close] if self.stateful else [])]):
            if self.config.eval_before_training:  # iteration -1: the untrained policy, its starting memory
                before = self.directory / "snapshots" / "before"
                if self.stateful and not (before / "state.json").exists():
                    self.start_state()
                    self.runner._save_snapshot(self.policy, before)
                self.evaluate(-1, before)
            for it in range(self.config.iterations):
                self.train(it)
                self.evaluate(it, self.directory / "snapshots" / f"iter{it}")

    def start_state(self) -> None:
        """The memory every seed starts from: empty, or the policy's ``initial_state`` snapshot."""
        self.policy.train()
        self.policy.clear_state()
        if self.setting.policy.initial_state:
            self.policy.load_state(self.setting.policy.initial_state)

    def line(self, phase: str, iteration: int, index: int, result: EvalResult) -> EpisodeLine:
        s = self.setting
        return EpisodeLine.of(phase, iteration, index, s.benchmark, s.label, s.seed, result.attempts, result.episode,
                              s.backbone)

    def train(self, it: int) -> None:
        """Iteration ``it``'s training (resumed from its snapshot when it was finished)."""
        snapshot = self.directory / "snapshots" / f"iter{it}"
        sample = training_sample(self.train_ids, self.config.train_per_iter, self.setting.seed, it) \
            if self.trains else []
        n_trained = self.log.count("train", it)
        if n_trained == len(sample) and (not self.stateful or (snapshot / "state.json").exists()):
            if self.stateful:
                self.policy.load_state(snapshot)  # this iteration's training is finished
            self.bar.advance(self.task, n_trained)
            return
        if self.stateful:  # (re)start the iteration from the state it began with
            if it == 0:
                self.start_state()
            else:
                self.policy.train()
                self.policy.load_state(self.directory / "snapshots" / f"iter{it - 1}")
            self.policy.iteration = it
        self.log.drop("train", it)
        self.policy.train()
        for index, task_id in enumerate(sample):
            episode, attempts = run_with_retries(self.env, self.policy, task_id, self.setting.seed,
                                                 self.config.retries)
            self.log.append(self.line("train", it, index, EvalResult(episode, attempts)))
            if self.worlds is not None:
                self.worlds.add(self.env.unwrapped, task_id)
            self.bar.advance(self.task)
        if self.stateful:
            self.runner._save_snapshot(self.policy, snapshot)

    def evaluate(self, it: int, snapshot: Path) -> None:
        self.policy.eval()
        done = self.log.done("eval", it)
        self.bar.advance(self.task, len(done))
        remaining = [(i, t) for i, t in enumerate(self.heldout) if t not in done]
        for index, result in self.runner.evaluate(self.setting, self.env, self.policy,
                                                  str(snapshot) if self.stateful else "", remaining):
            self.log.append(self.line("eval", it, index, result))
            self.bar.advance(self.task)
