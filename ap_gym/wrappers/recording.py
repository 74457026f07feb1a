"""Recording: build the Episode a policy's ``end`` needs from a user's own loop."""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym

from ap_gym.types import Episode, Step, Termination, Usage

__all__ = ["RecordEpisode", "termination_of"]


def termination_of(info: dict[str, Any], terminated: bool, truncated: bool) -> Termination:
    """Map the contract's flags to a termination reason; only a win is a success."""
    if info.get("won") or info.get("success"):
        return Termination.WON
    if terminated:
        return Termination.LOST
    return Termination.STEP_LIMIT


class RecordEpisode(gym.Wrapper[str, str, str, str], gym.utils.RecordConstructorArgs):
    """Record every step; ``episode`` is the finished :class:`Episode` once it is over.

    Example:
        >>> env = RecordEpisode(gym.make("ap_gym/TextWorld-v0"))  # doctest: +SKIP
        >>> obs, info = env.reset(seed=0)  # doctest: +SKIP
        >>> policy.begin(obs, info)  # doctest: +SKIP
        >>> done = False  # doctest: +SKIP
        >>> while not done:  # doctest: +SKIP
        ...     obs, r, term, trunc, info = env.step(policy.act(obs, info))
        ...     done = term or trunc
        >>> policy.end(env.episode)  # doctest: +SKIP
    """

    def __init__(self, env: gym.Env[str, str]) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.Wrapper.__init__(self, env)
        self.episode: Episode | None = None
        self._steps: list[Step] = []
        self._start_info: dict[str, Any] = {}
        self._initial_obs = ""
        self._t0 = self._mark = 0.0
        self._seed: int | None = None

    @property
    def num_steps(self) -> int:
        """Steps taken in the episode in progress."""
        return len(self._steps)

    @property
    def start_info(self) -> dict[str, Any]:
        """The ``info`` that ``reset`` returned for the episode in progress."""
        return dict(self._start_info)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        self.episode = None
        self._steps = []
        self._start_info = dict(info)
        self._initial_obs = obs
        self._seed = seed
        self._t0 = self._mark = time.perf_counter()
        return obs, info

    def step(self, action: str):
        obs, reward, terminated, truncated, info = self.env.step(action)
        now = time.perf_counter()  # the step's wall time: the policy's decision and the env's step
        self._steps.append(Step(action=action, observation=obs, reward=float(reward), score=info.get("score"),
                                seconds=round(now - self._mark, 6)))
        self._mark = now
        if terminated or truncated:
            self.episode = self.build(info, terminated, truncated)
        return obs, reward, terminated, truncated, info

    def build(
        self,
        info: dict[str, Any],
        terminated: bool,
        truncated: bool,
        *,
        termination: Termination | None = None,
        error: str | None = None,
        usage: Usage | None = None,
    ) -> Episode:
        """The Episode so far; the rollout loop calls this directly for early stops."""
        term = termination or termination_of(info, terminated, truncated)
        start = self._start_info
        return Episode(
            task_id=str(start.get("task_id", info.get("task_id", "?"))),
            task_family=str(start.get("task_family", info.get("task_family", "?"))),
            instruction=str(start.get("instruction", "")),
            initial_observation=self._initial_obs,
            steps=tuple(self._steps),
            success=term is Termination.WON,
            score=info.get("score", start.get("score")),
            max_score=info.get("max_score", start.get("max_score")),
            termination=term,
            wall_time_s=time.perf_counter() - self._t0,
            usage=usage or Usage(),
            error=error,
            seed=self._seed,
        )
