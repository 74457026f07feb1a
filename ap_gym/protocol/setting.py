"""What one setting (benchmark x policy x seed) needs built: its env, its policy, the shared models.

:class:`Resources` loads each backbone and embedder once per process and hands the same
objects to every policy there. :func:`build_policy` asks the policy registry what the
policy needs (a backbone, an embedder, a store, a seed) and passes exactly that.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ap_gym.protocol.config import PolicySpec, RunConfig
from ap_gym.types import Episode, Termination

__all__ = ["Resources", "Setting", "build_policy", "make_env", "preflight", "run_with_retries"]


@dataclass(frozen=True)
class Setting:
    """One cell of a run's grid; its results live in ``<run>/<benchmark>/[<backbone>/]<label>/seed<k>``.

    ``backbone`` is the backbone's label in a run with several (``None`` with one).
    """

    benchmark: str
    policy: PolicySpec
    seed: int
    backbone: str | None = None

    @property
    def label(self) -> str:
        return self.policy.label

    def directory(self, run_dir: Path) -> Path:
        base = run_dir / self.benchmark
        if self.backbone is not None:
            base = base / self.backbone
        return base / self.policy.label / f"seed{self.seed}"

    def __str__(self) -> str:
        middle = f"{self.backbone}/" if self.backbone is not None else ""
        return f"{self.benchmark}/{middle}{self.policy.label}/seed{self.seed}"


class Resources:
    """Backbones and embedders, loaded once per process and shared by its policies.

    Args:
        serving: deadlines, retries and concurrency for served ones.
    """

    def __init__(self, serving: Mapping[str, Any] | None = None) -> None:
        self.serving = dict(serving or {})
        self._backbones: dict[str, Any] = {}
        self._embedders: dict[str, Any] = {}

    def _options(self, spec: str) -> dict[str, Any]:
        return dict(self.serving) if spec.startswith(("http://", "https://")) else {}

    def provide(self, spec: str, backbone: Any) -> None:
        """Use ``backbone`` (an object) wherever the config names ``spec``: a scripted or custom
        model in a run of the protocol (a study, a test), in this process."""
        self._backbones[spec] = backbone

    def backbone(self, spec: str) -> Any:
        if spec not in self._backbones:
            from ap_gym.backbones import make_backbone

            self._backbones[spec] = make_backbone(spec, **self._options(spec))
        return self._backbones[spec]

    def embedder(self, spec: str) -> Any:
        if spec not in self._embedders:
            from ap_gym.backbones.embedders import make_embedder

            self._embedders[spec] = make_embedder(spec, **self._options(spec))
        return self._embedders[spec]


def needs_backbone(config: RunConfig) -> bool:
    from ap_gym.policies import get_policy

    return any("backbone" in get_policy(p.name).needs for p in config.policies)


def needs_embedder(config: RunConfig) -> bool:
    from ap_gym.policies import get_policy

    return any("embedder" in get_policy(p.name).needs for p in config.policies)


def scores_candidates(spec: PolicySpec) -> bool:
    """Whether the policy's agent chooses among admissible commands by score (``choose``)."""
    from ap_gym.policies import AgentConfig, get_policy

    if "backbone" not in get_policy(spec.name).needs:
        return False
    return AgentConfig.coerce(spec.options.get("agent")).action_mode == "choose"


def preflight(config: RunConfig, resources: Resources) -> dict[str, Any]:
    """Before anything runs, build and check every part of the grid once: each benchmark's
    env and its task lists, each backbone and judge (a served one: the model is listed and,
    when a policy scores candidates, scoring works), the embedder (a probe is embedded).
    Every problem is collected, so one message lists them all; a missing engine or data
    set never surfaces after hours of other settings.

    Returns:
        what was built: ``backbones`` (label -> description), ``judges``, ``embedder``.

    Raises:
        ConfigError: one or more parts cannot be built, each named with its cause.
    """
    from ap_gym.protocol.config import ConfigError

    problems: list[str] = []
    for benchmark in config.benchmark_ids():
        problems += _check(f"benchmark {benchmark}", lambda b=benchmark: _env_ready(config, b))
    out: dict[str, Any] = {"backbones": {}, "judges": {}, "embedder": None}
    if needs_backbone(config):
        scoring = any(scores_candidates(p) for p in config.policies)
        for label, spec in config.backbone_specs().items():
            problems += _check(f"backbone {label or spec}", lambda s=spec, lab=label: out["backbones"].__setitem__(
                lab or "", _backbone_ready(resources, s, scoring)))
        for label, spec in (config.judges or {}).items():
            problems += _check(f"judge {label}", lambda s=spec, lab=label: out["judges"].__setitem__(
                lab, _backbone_ready(resources, s, False)))
    if needs_embedder(config):
        problems += _check(f"embedder {config.embedder}", lambda: out.__setitem__(
            "embedder", _embedder_ready(resources, config.embedder)))
    if problems:
        raise ConfigError("the run cannot start; nothing was run:\n  - " + "\n  - ".join(problems))
    return out


def _check(what: str, fn: Any) -> list[str]:
    try:
        fn()
    except Exception as e:  # every part's problem is reported, in one message
        return [f"{what}: {type(e).__name__}: {e}"]
    return []


def _env_ready(config: RunConfig, benchmark: str) -> None:
    env = make_env(config, benchmark)
    try:
        for split in ("train", "test"):
            if not env.unwrapped.task_ids(split):
                raise ValueError(f"its {split} split holds no task")
    finally:
        env.close()


def _backbone_ready(resources: Resources, spec: str, scoring: bool) -> dict[str, Any]:
    from ap_gym.backbones.base import ServedBackbone

    backbone = resources.backbone(spec)
    if isinstance(backbone, ServedBackbone):
        backbone.check(scoring=scoring)
    return dict(backbone.describe())


def _embedder_ready(resources: Resources, spec: str) -> str:
    import numpy as np

    embedder = resources.embedder(spec)
    vector = np.asarray(embedder.embed(["a probe of the embedder"]), dtype=np.float32)
    if vector.shape != (1, embedder.dim) or not np.isfinite(vector).all():
        raise ValueError(f"it embedded a probe as shape {vector.shape} (finite: {bool(np.isfinite(vector).all())}); "
                         f"it declares {embedder.dim} dimensions")
    return str(embedder.identity)


def make_env(config: RunConfig, benchmark: str) -> Any:
    """The benchmark's env with the run's step limit (:meth:`RunConfig.step_limit`) and
    ``env_options``."""
    import gymnasium as gym

    env_id = config.benchmark_ids()[benchmark]
    options = config.env_options.get(benchmark, config.env_options.get(env_id, {}))
    return gym.make(env_id, max_episode_steps=config.step_limit(benchmark)[0], **dict(options))


def build_policy(spec: PolicySpec, config: RunConfig, db_path: Path, seed: int, resources: Resources,
                 *, backbone: Any = None, backbone_label: str | None = None, benchmark: str | None = None) -> Any:
    """The policy of ``spec``, given what its registration says it needs; its own options win.

    ``backbone`` (an object) or ``backbone_label`` (one of the run's ``backbones``) picks
    the model; by default the run's single ``backbone``. A ``judge_backbone`` or
    ``synthesis_backbone`` option names one of the run's judges or backbones (or is a
    backbone spec); a ``frozen_abstractions``
    path is a skills file, of which the setting (``benchmark``, backbone, ``seed``) takes
    its own set (:func:`~ap_gym.protocol.skills.skills_for`).
    """
    from ap_gym.policies import get_policy

    info = get_policy(spec.name)
    provided: dict[str, Any] = {}
    if "backbone" in info.needs:
        provided["backbone"] = backbone if backbone is not None else \
            resources.backbone(config.backbone_specs()[backbone_label])
    if "embedder" in info.needs:
        provided["embedder"] = resources.embedder(config.embedder)
    if "store" in info.needs:
        provided["db_path"] = db_path
    if "seed" in info.needs:
        provided["seed"] = seed
    options = dict(spec.options)
    for key in ("judge_backbone", "synthesis_backbone"):
        if isinstance(options.get(key), str):  # a label of judges: or backbones:, or a spec
            name = options[key]
            labels = {**(config.backbones or {}), **(config.judges or {})}
            options[key] = resources.backbone(labels.get(name, name))
    if isinstance(options.get("frozen_abstractions"), str):
        from ap_gym.protocol.skills import skills_for

        options["frozen_abstractions"] = skills_for(options["frozen_abstractions"], benchmark or "", backbone_label,
                                                    seed)
    if config.audit.randomise_exposure and "randomise_exposure" in info.option_names():
        options.setdefault("randomise_exposure", config.audit.randomise_exposure)
    return info.factory(**{**provided, **options})


def run_with_retries(env: Any, policy: Any, task_id: str, seed: int, retries: int) -> tuple[Episode, int]:
    """One episode, re-run up to ``retries`` times while it ends in an infrastructure failure.

    The step limit is the env's (Gymnasium's ``TimeLimit``, set by :func:`make_env`): applied
    once, there."""
    from ap_gym.rollout import run_episode

    for attempt in range(retries + 1):
        episode = run_episode(env, policy, task_id=task_id, seed=seed)
        if episode.termination is not Termination.INFRA:
            return episode, attempt + 1
    return episode, retries + 1
