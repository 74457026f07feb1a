"""What one setting (benchmark x policy x seed) needs built: its env, its policy, the shared models.

:class:`Resources` loads each backbone and embedder once per process and hands the same
objects to every policy there. :func:`build_policy` asks the policy registry what the
policy needs (a backbone, an embedder, a store, a seed) and passes exactly that.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ap_gym.protocol.config import PolicySpec, RunConfig
from ap_gym.types import Episode, Termination

__all__ = ["Resources", "Setting", "build_policy", "make_env", "run_with_retries"]


@dataclass(frozen=True)
class Setting:
    """One cell of a run's grid; its results live in ``<run>/<benchmark>/<label>/seed<k>``."""

    benchmark: str
    policy: PolicySpec
    seed: int

    @property
    def label(self) -> str:
        return self.policy.label

    def directory(self, run_dir: Path) -> Path:
        return run_dir / self.benchmark / self.policy.label / f"seed{self.seed}"

    def __str__(self) -> str:
        return f"{self.benchmark}/{self.policy.label}/seed{self.seed}"


class Resources:
    """Backbones and embedders, loaded once per process and shared by its policies."""

    def __init__(self) -> None:
        self._backbones: dict[str, Any] = {}
        self._embedders: dict[str, Any] = {}

    def backbone(self, spec: str) -> Any:
        if spec not in self._backbones:
            from ap_gym.backbones import make_backbone

            self._backbones[spec] = make_backbone(spec)
        return self._backbones[spec]

    def embedder(self, spec: str) -> Any:
        if spec not in self._embedders:
            from ap_gym.backbones.embedders import SentenceTransformerEmbedder

            self._embedders[spec] = SentenceTransformerEmbedder(None if spec == "default" else spec)
        return self._embedders[spec]


def needs_backbone(config: RunConfig) -> bool:
    from ap_gym.policies import get_policy

    return any("backbone" in get_policy(p.name).needs for p in config.policies)


def make_env(config: RunConfig, benchmark: str) -> Any:
    """The benchmark's env with the run's step limit and ``env_options``."""
    import gymnasium as gym

    env_id = config.benchmark_ids()[benchmark]
    options = config.env_options.get(benchmark, config.env_options.get(env_id, {}))
    return gym.make(env_id, max_episode_steps=config.max_steps, **dict(options))


def build_policy(spec: PolicySpec, config: RunConfig, db_path: Path, seed: int, resources: Resources,
                 *, backbone: Any = None) -> Any:
    """The policy of ``spec``, given what its registration says it needs; its own options win."""
    from ap_gym.policies import get_policy

    info = get_policy(spec.name)
    provided: dict[str, Any] = {}
    if "backbone" in info.needs:
        provided["backbone"] = backbone if backbone is not None else resources.backbone(config.backbone)
    if "embedder" in info.needs:
        provided["embedder"] = resources.embedder(config.embedder)
    if "store" in info.needs:
        provided["db_path"] = db_path
    if "seed" in info.needs:
        provided["seed"] = seed
    return info.factory(**{**provided, **spec.options})


def run_with_retries(env: Any, policy: Any, task_id: str, seed: int, max_steps: int,
                     retries: int) -> tuple[Episode, int]:
    """One episode, re-run up to ``retries`` times while it ends in an infrastructure failure."""
    from ap_gym.rollout import run_episode

    for attempt in range(retries + 1):
        episode = run_episode(env, policy, task_id=task_id, seed=seed, max_steps=max_steps)
        if episode.termination is not Termination.INFRA:
            return episode, attempt + 1
    return episode, retries + 1
