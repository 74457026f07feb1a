"""The paper's protocol: iterations of training, then a frozen held-out evaluation.

For each benchmark x policy x seed, ``iterations`` rounds (default 10): sample
``train_per_iter`` training tasks (default 50) with a generator fixed by the seed and the
iteration, run them in training mode, in order (each changes memory), snapshot the
policy's state, then run the whole held-out split in evaluation mode against that
frozen snapshot. Held-out episodes are independent, so they run in parallel worker
processes (``workers``), each with its own env; a served backbone lets workers share
one model.

Results go to ``<out>/<run>/``: ``config.json`` (the resolved config, package version,
backbone identity), ``prompts.json``, and per setting
``<benchmark>/<policy>/seed<k>/episodes.jsonl`` (one line per episode, everything the
Episode carries) and ``snapshots/iter<k>/``; ``summary.json`` at the top.

Resume: start the same command again. Finished held-out episodes are skipped; an
iteration whose training was interrupted is re-run from the snapshot taken before it, so
a killed run ends with the same results as an uninterrupted one (greedy backbone).
Infrastructure failures are retried ``retries`` times, then recorded as such.

Stateless policies (no memory, random) skip training episodes by default: nothing they
do in training can change a later episode.

Executors: ``local`` runs held-out episodes in this process (``workers=1``) or in a
spawned process pool whose workers load the model and envs once, in parallel. ``ray``
sends them to ``workers`` Ray actors (the snapshot goes once through the object store,
a dead actor is replaced and its episodes retried) and runs the independent settings
of a grid as Ray tasks. ``lanes`` episodes per worker run in lock-step with their model
calls batched (:mod:`ap_gym.backbones.batching`). The driver writes every result, so the
files, the summary and resume do not depend on the executor.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from ap_gym.paths import atomic_write_json, atomic_write_text
from ap_gym.types import Episode, Termination

__all__ = ["PolicySpec", "RunConfig", "load_episodes", "run", "summarise"]

BENCHMARKS = {
    "scienceworld": "ap_gym/ScienceWorld-v0",
    "textworld": "ap_gym/TextWorld-v0",
    "alfworld": "ap_gym/ALFWorld-v0",
    "shop": "ap_gym/Shop-v0",
    "webshop": "ap_gym/WebShop-v0",
}


EXECUTORS = ("local", "ray")
#: config keys that change how a run executes, not what it computes: a run may be
#: resumed with other values (say, started locally and finished on Ray).
EXECUTION_KEYS = frozenset({"workers", "executor", "ray_address", "lanes"})


@dataclass(frozen=True)
class PolicySpec:
    """A policy by registry name, a label for results, and its options."""

    name: str
    label: str = ""
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.label:
            object.__setattr__(self, "label", self.name)


@dataclass(frozen=True)
class RunConfig:
    """Everything that defines a run; saved whole with its results.

    Attributes:
        name: the run's directory name under ``out``.
        benchmarks: short names (``textworld``, ``scienceworld``, ...).
        policies: what to compare.
        backbone: ``default``, ``tiny``, a model path, or an OpenAI-compatible URL.
        embedder: ``default`` or a sentence-transformers path.
        seeds: one full protocol per seed.
        iterations, train_per_iter: the protocol's rounds and training sample size.
        heldout: evaluate N held-out tasks spread evenly over the split (``None``: all, the paper's).
        max_steps: the step limit (50 in the paper).
        workers: processes (local) or Ray actors (ray) for held-out evaluation; with
            the Ray executor, also how many settings of a grid run at once.
        executor: ``local`` (a process pool on this machine) or ``ray`` (Ray tasks and
            actors, on a local instance or the cluster at ``ray_address``).
        ray_address: ``None`` starts a local Ray instance; ``auto`` or ``ray://host:port``
            joins a running cluster (the run directory must then be on storage every node
            sees, since settings write their own results).
        lanes: held-out episodes each worker plays at once in lock-step, their model
            calls batched into one forward pass (in-process backbone) or sent
            concurrently (served backbone).
        retries: re-runs of an episode that ended in an infrastructure failure.
        train_stateless: run training episodes for policies without memory too.
        env_options: keyword arguments per benchmark for ``gym.make``.
        out: the results root.
    """

    name: str = "run"
    benchmarks: tuple[str, ...] = ("textworld",)
    policies: tuple[PolicySpec, ...] = (PolicySpec("no_memory"),)
    backbone: str = "default"
    embedder: str = "default"
    seeds: tuple[int, ...] = (0,)
    iterations: int = 10
    train_per_iter: int = 50
    heldout: int | None = None
    max_steps: int = 50
    workers: int = 1
    executor: str = "local"
    ray_address: str | None = None
    lanes: int = 1
    retries: int = 2
    train_stateless: bool = False
    env_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    out: str = "results"

    def __post_init__(self) -> None:
        if self.executor not in EXECUTORS:
            raise ValueError(f"executor must be one of {', '.join(EXECUTORS)}, not {self.executor!r}")
        if self.workers < 1 or self.lanes < 1:
            raise ValueError("workers and lanes must be at least 1")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunConfig:
        d = dict(d)
        unknown = set(d) - {f for f in cls.__dataclass_fields__}
        if unknown:
            raise ValueError(f"unknown config keys: {', '.join(sorted(unknown))}")
        policies = []
        for p in d.get("policies", ["no_memory"]):
            p = {"name": p} if isinstance(p, str) else dict(p)
            policies.append(PolicySpec(p["name"], p.get("label", ""), dict(p.get("options") or {})))
        labels = [p.label for p in policies]
        if len(set(labels)) != len(labels):
            raise ValueError(f"policy labels must be unique: {labels}")
        d["policies"] = tuple(policies)
        for key in ("benchmarks", "seeds"):
            if key in d:
                d[key] = tuple(d[key])
        for bench in d.get("benchmarks", ()):
            if bench not in BENCHMARKS:
                raise ValueError(f"unknown benchmark {bench!r}; choose from {', '.join(BENCHMARKS)}")
        return cls(**d)

    @classmethod
    def from_file(cls, path: str | Path, **overrides: Any) -> RunConfig:
        data = yaml.safe_load(Path(path).read_text()) or {}
        data.update({k: v for k, v in overrides.items() if v is not None})
        return cls.from_dict(data)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["policies"] = [asdict(p) for p in self.policies]
        return d

    @property
    def run_dir(self) -> Path:
        return Path(self.out) / self.name


# --------------------------------------------------------------------- helpers
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


class EpisodeLog:
    """``episodes.jsonl``: appended line by line, flushed, and re-read on resume."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines: list[dict[str, Any]] = []
        if path.exists():
            for raw in path.read_text().splitlines():
                try:
                    self.lines.append(json.loads(raw))
                except ValueError:
                    break  # a line cut by a kill: drop it and everything after
            self._rewrite()

    def _rewrite(self) -> None:
        atomic_write_text(self.path, "".join(json.dumps(x) + "\n" for x in self.lines))

    def append(self, line: dict[str, Any]) -> None:
        self.lines.append(line)
        with open(self.path, "a") as f:
            f.write(json.dumps(line) + "\n")
            f.flush()

    def drop(self, phase: str, iteration: int) -> None:
        before = len(self.lines)
        self.lines = [x for x in self.lines if not (x["phase"] == phase and x["iteration"] == iteration)]
        if len(self.lines) != before:
            self._rewrite()

    def done(self, phase: str, iteration: int) -> dict[str, dict[str, Any]]:
        return {x["task_id"]: x for x in self.lines if x["phase"] == phase and x["iteration"] == iteration}


def make_env(benchmark: str, options: Mapping[str, Any], max_steps: int) -> Any:
    import gymnasium as gym

    import ap_gym  # noqa: F401

    return gym.make(BENCHMARKS[benchmark], max_episode_steps=max_steps, **dict(options))


_RESOURCES: dict[Any, Any] = {}


def _shared(kind: str, spec: str) -> Any:
    """Backbones and embedders are loaded once per process and shared by its policies."""
    key = (kind, spec)
    if key not in _RESOURCES:
        if kind == "backbone":
            from ap_gym.backbones import make_backbone

            _RESOURCES[key] = make_backbone(spec)
        else:
            from ap_gym.backbones.embedders import SentenceTransformerEmbedder

            _RESOURCES[key] = SentenceTransformerEmbedder(None if spec == "default" else spec)
    return _RESOURCES[key]


def build_policy(spec: PolicySpec, config: RunConfig, db_path: Path, seed: int, *, backbone: Any = None) -> Any:
    from ap_gym.policies import make_policy

    options = dict(spec.options)
    if spec.name in ("random", "walkthrough"):
        if spec.name == "random":
            options.setdefault("seed", seed)
        return make_policy(spec.name, **options)
    backbone = backbone or _shared("backbone", config.backbone)
    if spec.name == "no_memory":
        return make_policy(spec.name, backbone, **options)
    return make_policy(spec.name, backbone, embedder=_shared("embedder", config.embedder),
                       db_path=db_path, seed=seed, **options)


def run_with_retries(env: Any, policy: Any, task_id: str, seed: int, max_steps: int, retries: int) -> tuple[Episode, int]:
    from ap_gym.rollout import run_episode

    for attempt in range(retries + 1):
        episode = run_episode(env, policy, task_id=task_id, seed=seed, max_steps=max_steps)
        if episode.termination is not Termination.INFRA:
            return episode, attempt + 1
    return episode, retries + 1


# --------------------------------------------------------------- eval workers
_WORKER: dict[str, Any] = {}
_POOL: ProcessPoolExecutor | None = None


def _set_threads(config: RunConfig) -> None:
    if "threads" not in _WORKER:  # share the cores: N workers x all-core BLAS thrash badly
        import os

        import torch

        _WORKER["threads"] = max(1, (os.cpu_count() or 1) // config.workers)
        torch.set_num_threads(_WORKER["threads"])


def _close_worker() -> None:
    """Close what :func:`_eval_in_worker` holds (in the driver, after a run)."""
    for env in _WORKER.pop("envs", []):
        env.close()
    for policy in _WORKER.pop("policies", []):
        if hasattr(policy, "close"):
            policy.close()
    for key in ("env_key", "policy_key", "batcher"):
        _WORKER.pop(key, None)


def _init_worker(config_dict: dict[str, Any], benchmark: str) -> None:
    """Load the model and the envs as a worker process starts, all workers in parallel,
    rather than inside each worker's first episode."""
    config = RunConfig.from_dict(config_dict)
    _set_threads(config)
    if any(p.name not in ("random", "walkthrough") for p in config.policies):
        _shared("backbone", config.backbone)
    _ensure_envs(config, benchmark)


def _ensure_envs(config: RunConfig, benchmark: str) -> list[Any]:
    env_key = (benchmark, config.lanes)
    if _WORKER.get("env_key") != env_key:
        for env in _WORKER.pop("envs", []):
            env.close()
        _WORKER["envs"] = [make_env(benchmark, config.env_options.get(benchmark, {}), config.max_steps)
                           for _ in range(config.lanes)]
        _WORKER["env_key"] = env_key
    return _WORKER["envs"]


def _eval_in_worker(job: dict[str, Any]) -> list[dict[str, Any]]:
    """Run held-out episodes (one, or one per lane in lock-step) against a frozen snapshot.

    The worker keeps its envs, its policies (one per lane, loaded from the snapshot
    once) and its model between jobs.
    """
    import tempfile

    from ap_gym.rollout import run_episodes

    config = RunConfig.from_dict(job["config"])
    _set_threads(config)
    spec = next(p for p in config.policies if p.label == job["label"])
    lanes = config.lanes
    _ensure_envs(config, job["benchmark"])
    policy_key = (job["label"], job["snapshot"], job["seed"], lanes)
    if _WORKER.get("policy_key") != policy_key:
        for old in _WORKER.pop("policies", []):
            if hasattr(old, "close"):
                old.close()
        backbones: list[Any] = [None] * lanes
        if lanes > 1 and spec.name not in ("random", "walkthrough"):
            shared = _shared("backbone", config.backbone)
            if hasattr(shared, "score_batch"):  # in-process: one forward pass per step for all lanes
                from ap_gym.backbones.batching import BatchingBackbone

                _WORKER["batcher"] = BatchingBackbone(shared, lanes)
                backbones = [_WORKER["batcher"].lane(i) for i in range(lanes)]
            # a served backbone is thread-safe: the lanes' requests simply run concurrently
        policies = []
        for lane in range(lanes):
            db = Path(tempfile.mkdtemp(prefix="ap_gym_worker_")) / "memory.sqlite"
            policy = build_policy(spec, config, db, job["seed"], backbone=backbones[lane])
            if job["snapshot"] and hasattr(policy, "load_state"):
                policy.load_state(job["snapshot"])
            policies.append(policy.eval())
        _WORKER["policies"], _WORKER["policy_key"] = policies, policy_key

    def play(env: Any, policy: Any, task_id: str) -> dict[str, Any]:
        episode, attempts = run_with_retries(env, policy, task_id, job["seed"], config.max_steps, config.retries)
        return {"episode": episode.to_dict(), "attempts": attempts}

    task_ids = list(job["task_ids"])
    if len(task_ids) == 1:
        return [play(_WORKER["envs"][0], _WORKER["policies"][0], task_ids[0])]
    batcher = _WORKER.get("batcher")
    if batcher is not None:
        batcher.start(min(lanes, len(task_ids)))
    return run_episodes(_WORKER["envs"], _WORKER["policies"], task_ids, runner=play,
                        on_lane_done=(lambda _lane: batcher.retire()) if batcher is not None else None)


def _infra_line(task_id: str, seed: int, error: str) -> dict[str, Any]:
    episode = Episode(task_id=task_id, task_family="?", instruction="", initial_observation="", steps=(),
                      success=False, score=None, max_score=None, termination=Termination.INFRA, error=error,
                      seed=seed, training=False)
    return {"episode": episode.to_dict(), "attempts": 0}


# ------------------------------------------------------------------------- ray
_RAY: dict[str, Any] = {"actors": []}


def _ray_init(config: RunConfig) -> Any:
    """Ray, initialised once per process: a local instance, or the cluster at ``ray_address``."""
    import os

    try:
        import ray
    except ImportError as e:
        raise RuntimeError("the ray executor needs Ray: pip install 'ap-gym[ray]' (or pip install ray)") from e
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "ignore_reinit_error": True}
        if config.ray_address:
            names = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "AP_GYM_CACHE")
            kwargs["runtime_env"] = {"env_vars": {k: os.environ[k] for k in names if k in os.environ}}
            ray.init(address=config.ray_address, **kwargs)
        else:  # a private instance on the loopback interface only
            ray.init(num_cpus=os.cpu_count() or 1, _node_ip_address="127.0.0.1", **kwargs)
    return ray


class _RayEvalWorker:
    """A Ray actor around :func:`_eval_in_worker`; it fetches each snapshot once."""

    def __init__(self) -> None:
        self._snapshot: tuple[str, str] | None = None

    def run(self, job: dict[str, Any], snapshot_ref: list[Any]) -> list[dict[str, Any]]:
        import tempfile

        import ray

        if job["snapshot"]:
            if self._snapshot is None or self._snapshot[0] != job["snapshot"]:
                if self._snapshot is not None:
                    shutil.rmtree(self._snapshot[1], ignore_errors=True)
                local = tempfile.mkdtemp(prefix="ap_gym_snapshot_")
                for name, data in ray.get(snapshot_ref[0]).items():
                    (Path(local) / name).write_bytes(data)
                self._snapshot = (job["snapshot"], local)
            job = {**job, "snapshot": self._snapshot[1]}
        return _eval_in_worker(job)


def _ray_actors(config: RunConfig) -> list[Any]:
    ray = _ray_init(config)
    actors = _RAY["actors"]
    if len(actors) != config.workers:
        _ray_shutdown_actors()
        cpus = float(ray.cluster_resources().get("CPU", 1.0))
        cls = ray.remote(num_cpus=min(1.0, cpus / config.workers))(_RayEvalWorker)
        _RAY["cls"] = cls
        _RAY["actors"] = actors = [cls.remote() for _ in range(config.workers)]
    return actors


def _ray_shutdown_actors() -> None:
    if _RAY["actors"]:
        import ray

        for actor in _RAY["actors"]:
            ray.kill(actor)
        _RAY["actors"] = []


def _evaluate_ray(config: RunConfig, jobs: list[tuple[list[int], dict[str, Any]]],
                  snapshot: str) -> Iterable[tuple[int, dict[str, Any]]]:
    """Held-out jobs over ``workers`` actors, yielded as they finish; a dead actor is replaced."""
    ray = _ray_init(config)
    actors = _ray_actors(config)
    files = {p.name: p.read_bytes() for p in Path(snapshot).iterdir() if p.is_file()} if snapshot else {}
    snapshot_ref = [ray.put(files)]  # in a list, so actors fetch it themselves, once
    queue = [(indices, job, 0) for indices, job in jobs]
    free = list(range(len(actors)))
    pending: dict[Any, tuple[int, list[int], dict[str, Any], int]] = {}
    while queue or pending:
        while queue and free:
            a = free.pop(0)
            indices, job, tries = queue.pop(0)
            pending[actors[a].run.remote(job, snapshot_ref)] = (a, indices, job, tries)
        (ref,), _ = ray.wait(list(pending), num_returns=1)
        a, indices, job, tries = pending.pop(ref)
        try:
            results = ray.get(ref)
        except ray.exceptions.RayActorError as e:  # the worker process died: new actor, retry
            actors[a] = _RAY["cls"].remote()
            free.append(a)
            if tries < config.retries:
                queue.insert(0, (indices, job, tries + 1))
                continue
            results = [_infra_line(t, job["seed"], f"Ray worker died: {e}") for t in job["task_ids"]]
        else:
            free.append(a)
        yield from zip(indices, results, strict=True)


def _run_setting_task(config_dict: dict[str, Any], benchmark: str, label: str, seed: int) -> str:
    """One setting of a grid as a Ray task: training and held-out evaluation, in this process."""
    import os

    import torch
    from rich.progress import Progress

    config = replace(RunConfig.from_dict(config_dict), executor="local", workers=1)
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, int(config_dict.get("workers", 1)))))
    spec = next(p for p in config.policies if p.label == label)
    with Progress(disable=True) as bar:
        _run_setting(config, benchmark, spec, seed, bar)
    _close_worker()
    return f"{benchmark}/{label}/seed{seed}"


# ------------------------------------------------------------------------ run
def _line(phase: str, iteration: int, index: int, benchmark: str, label: str, seed: int,
          episode: Mapping[str, Any], attempts: int) -> dict[str, Any]:
    return {"phase": phase, "iteration": iteration, "index": index, "benchmark": benchmark, "policy": label,
            "seed": seed, "attempts": attempts, **episode}


def run(config: RunConfig, *, progress: bool = True) -> Path:
    """Run (or resume) every setting of ``config``; returns the run directory."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    import ap_gym
    from ap_gym.policies.prompting import all_prompts

    run_dir = config.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    saved = run_dir / "config.json"
    if saved.exists():
        previous = json.loads(saved.read_text())["config"]
        current = json.loads(json.dumps(config.to_dict()))
        if {k: v for k, v in previous.items() if k not in EXECUTION_KEYS} != \
                {k: v for k, v in current.items() if k not in EXECUTION_KEYS}:
            raise ValueError(
                f"{run_dir} holds a run with a different config; resume with the same config "
                "or choose another run name (name: ... or --name)"
            )
    backbone = _shared("backbone", config.backbone) if any(
        p.name not in ("random", "walkthrough") for p in config.policies) else None
    describe = getattr(backbone, "describe", None)
    atomic_write_json(saved, {
        "config": config.to_dict(), "ap_gym_version": ap_gym.__version__,
        "backbone": describe() if describe else getattr(backbone, "identity", None),
    })
    atomic_write_json(run_dir / "prompts.json", all_prompts())

    settings = [(b, p, s) for b in config.benchmarks for p in config.policies for s in config.seeds]
    global _POOL
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  disable=not progress) as bar:
        overall = bar.add_task(f"{config.name}: settings", total=len(settings))
        try:
            if config.executor == "ray" and len(settings) > 1 and config.workers > 1:
                _run_settings_on_ray(config, settings, bar, overall)
            else:
                for benchmark, spec, seed in settings:
                    _run_setting(config, benchmark, spec, seed, bar)
                    bar.advance(overall)
        finally:
            if _POOL is not None:
                _POOL.shutdown(cancel_futures=True)
                _POOL = None
            _close_worker()
            if config.executor == "ray":
                _ray_shutdown_actors()
    summary = summarise(run_dir)
    atomic_write_json(run_dir / "summary.json", summary)
    return run_dir


def _run_settings_on_ray(config: RunConfig, settings: list[tuple[str, PolicySpec, int]], bar: Any,
                         overall: Any) -> None:
    """Independent settings as Ray tasks, ``workers`` at a time; each writes its own results."""
    ray = _ray_init(config)
    cpus = float(ray.cluster_resources().get("CPU", 1.0))
    task = ray.remote(num_cpus=min(1.0, cpus / config.workers), max_retries=config.retries)(_run_setting_task)
    data = json.loads(json.dumps(config.to_dict()))
    queue = list(settings)
    pending: list[Any] = []
    while queue or pending:
        while queue and len(pending) < config.workers:
            benchmark, spec, seed = queue.pop(0)
            pending.append(task.remote(data, benchmark, spec.label, seed))
        done, pending = ray.wait(pending, num_returns=1)
        ray.get(done[0])  # a setting that failed raises here, as it would locally
        bar.advance(overall)


def _run_setting(config: RunConfig, benchmark: str, spec: PolicySpec, seed: int, bar: Any) -> None:
    from ap_gym.policies.memory import MemoryPolicy

    directory = config.run_dir / benchmark / spec.label / f"seed{seed}"
    directory.mkdir(parents=True, exist_ok=True)
    log = EpisodeLog(directory / "episodes.jsonl")
    env = make_env(benchmark, config.env_options.get(benchmark, {}), config.max_steps)
    policy = build_policy(spec, config, directory / "memory.sqlite", seed)
    stateful = isinstance(policy, MemoryPolicy)
    train_ids = env.unwrapped.task_ids("train")
    heldout = heldout_subset(env.unwrapped.task_ids("test"), config.heldout)
    task = bar.add_task(f"{benchmark} {spec.label} seed {seed}",
                        total=config.iterations * ((config.train_per_iter if stateful or config.train_stateless else 0) + len(heldout)))
    try:
        for it in range(config.iterations):
            snapshot = directory / "snapshots" / f"iter{it}"
            sample = training_sample(train_ids, config.train_per_iter, seed, it)
            if not stateful and not config.train_stateless:
                sample = []
            n_trained = sum(1 for x in log.lines if x["phase"] == "train" and x["iteration"] == it)
            if stateful and n_trained == len(sample) and (snapshot / "state.json").exists():
                policy.load_state(snapshot)  # this iteration's training is finished
                bar.advance(task, n_trained)
            elif n_trained == len(sample):
                bar.advance(task, n_trained)  # stateless and finished (or nothing to train)
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
                    episode, attempts = run_with_retries(env, policy, task_id, seed, config.max_steps, config.retries)
                    log.append(_line("train", it, index, benchmark, spec.label, seed, episode.to_dict(), attempts))
                    bar.advance(task)
                if stateful:
                    tmp = snapshot.with_name(snapshot.name + ".tmp")
                    shutil.rmtree(tmp, ignore_errors=True)
                    policy.save_state(tmp)
                    shutil.rmtree(snapshot, ignore_errors=True)
                    tmp.rename(snapshot)
            policy.eval()
            done = log.done("eval", it)
            bar.advance(task, len(done))
            remaining = [(i, t) for i, t in enumerate(heldout) if t not in done]
            for index, result in _evaluate(config, benchmark, spec, seed, env, policy,
                                           str(snapshot) if stateful else "", remaining):
                log.append(_line("eval", it, index, benchmark, spec.label, seed, result["episode"], result["attempts"]))
                bar.advance(task)
    finally:
        env.close()
        if stateful:
            policy.db.close()


def _evaluate(config: RunConfig, benchmark: str, spec: PolicySpec, seed: int, env: Any, policy: Any,
              snapshot: str, remaining: list[tuple[int, str]]) -> Iterable[tuple[int, dict[str, Any]]]:
    """Held-out episodes, yielded as ``(index, result)``: in this process, a local process
    pool, or Ray actors; ``lanes`` episodes per worker at once."""
    if not remaining:
        return
    lanes = config.lanes
    if config.executor == "local" and config.workers <= 1 and (lanes <= 1 or len(remaining) == 1):
        for index, task_id in remaining:
            episode, attempts = run_with_retries(env, policy, task_id, seed, config.max_steps, config.retries)
            yield index, {"episode": episode.to_dict(), "attempts": attempts}
        return
    data = json.loads(json.dumps(config.to_dict()))
    chunks = [remaining[i:i + lanes] for i in range(0, len(remaining), lanes)]
    jobs = [([i for i, _ in chunk], {"config": data, "benchmark": benchmark, "label": spec.label, "seed": seed,
                                     "snapshot": snapshot, "task_ids": [t for _, t in chunk]}) for chunk in chunks]
    if config.executor == "ray":
        yield from _evaluate_ray(config, jobs, snapshot)
        return
    if config.workers <= 1:  # lanes in this process
        for indices, job in jobs:
            yield from zip(indices, _eval_in_worker(job), strict=True)
        return
    global _POOL
    import multiprocessing as mp

    if _POOL is None:  # one pool per run: workers keep their model, env and snapshot
        _POOL = ProcessPoolExecutor(max_workers=config.workers, mp_context=mp.get_context("spawn"),
                                    initializer=_init_worker, initargs=(data, benchmark))
    for (indices, _), results in zip(jobs, _POOL.map(_eval_in_worker, [j for _, j in jobs]), strict=True):
        yield from zip(indices, results, strict=True)


# -------------------------------------------------------------------- summary
def load_episodes(run_dir: str | Path) -> list[dict[str, Any]]:
    """Every episode line of a run (all settings), in a stable order."""
    lines = []
    for path in sorted(Path(run_dir).glob("*/*/seed*/episodes.jsonl")):
        for raw in path.read_text().splitlines():
            if raw.strip():
                try:
                    lines.append(json.loads(raw))
                except ValueError:
                    break
    return sorted(lines, key=lambda x: (x["benchmark"], x["policy"], x["seed"], x["iteration"], x["phase"], x["index"]))


def summarise(run_dir: str | Path) -> dict[str, Any]:
    """Per setting and iteration: held-out success, score, LLM calls, steps (no timings,
    so an interrupted and an uninterrupted run summarise identically)."""
    groups: dict[tuple[str, str, int, int], list[dict[str, Any]]] = {}
    for x in load_episodes(run_dir):
        if x["phase"] == "eval":
            groups.setdefault((x["benchmark"], x["policy"], x["seed"], x["iteration"]), []).append(x)
    settings: dict[str, Any] = {}
    for (bench, label, seed, it), eps in sorted(groups.items()):
        valid = [e for e in eps if e["termination"] != Termination.INFRA.value]
        n = len(valid) or 1
        calls = [e["usage"]["calls"] for e in valid]
        entry = {
            "iteration": it,
            "episodes": len(eps),
            "infrastructure_failures": len(eps) - len(valid),
            "success_rate": sum(e["success"] for e in valid) / n,
            "mean_llm_calls": sum(e["usage"]["llm_calls"] for e in valid) / n,
            "mean_acting_calls": sum(c.get("acting", 0) for c in calls) / n,
            "mean_synthesis_calls": sum(sum(v for k, v in c.items() if k != "acting") for c in calls) / n,
            "mean_steps": sum(e["num_steps"] for e in valid) / n,
            "successes": sorted(e["task_id"] for e in valid if e["success"]),
        }
        settings.setdefault(f"{bench}/{label}/seed{seed}", []).append(entry)
    return {"settings": settings,
            "final": {k: {kk: v[-1][kk] for kk in ("iteration", "success_rate", "mean_llm_calls", "mean_steps")}
                      for k, v in settings.items()}}


def with_overrides(config: RunConfig, **overrides: Any) -> RunConfig:
    return replace(config, **{k: v for k, v in overrides.items() if v is not None})
