"""Group rollouts: ``G`` copies of one task and seed, moving through tasks together.

GRPO and GiGPO compare the returns of several attempts at the *same* task from the *same*
start (verl-agent's ``group_n``). :class:`GroupVectorEnv` lays ``num_envs = groups x G``
sub-envs out group by group (sub-env ``i`` is in group ``i // G``). Every member of a
group is reset with the same seed (and task), so the members' first observations are
identical. A member that finishes waits, held (:class:`HoldWhenDone`: its engine is not
stepped, its reward is 0, ``info["active"]`` is ``False``), until the whole group has
finished; the step after that resets the whole group to the group's next task (Gymnasium's
next-step autoreset, by group): that step's actions for the group are ignored, and it
returns the new first observations with reward 0 and ``info["active"]`` ``True``.

Each new group episode takes the next number ``k`` from one counter (0, 1, 2, ... in the
order groups start); its seed is ``base + k`` (``base`` from ``reset(seed=...)``), and its
task is ``tasks[k % len(tasks)]`` when a task list is given, else the one the seed picks.

This is a mode of its own (``metadata["autoreset_mode"]`` is ``"group"``): neither
Gymnasium's next-step autoreset (a held member does not reset the step after it ends) nor
its disabled one (the group resets itself). Gymnasium's ``RecordEpisodeStatistics`` counts
every step of every sub-env, held ones included, so it misreports lengths here (3/3/3 for
members that ended at steps 1/2/3); :class:`GroupEpisodeStatistics` counts a member's
steps while it plays and reports each episode's true length and return at its end. A
reset step is flagged (``info["group_reset"]``), and a held step's ``info`` carries the
task's keys and ``active``/``held`` only: nothing of the last step is repeated
(``raw_reward``, ``score``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv, VectorWrapper

__all__ = ["GROUP_AUTORESET", "GroupEpisodeStatistics", "GroupVectorEnv", "HoldWhenDone"]

#: The group env's autoreset mode (see the module docstring).
GROUP_AUTORESET = "group"
#: ``info`` keys of the task, kept on held steps (everything else is of the step that ended).
TASK_KEYS = ("task_id", "task_family", "instruction", "max_score")


class HoldWhenDone(gym.Wrapper[str, str, str, str]):
    """After its episode ends, steps return the last observation with reward 0 and
    ``info["active"] = False`` (the engine is not stepped) until the next reset.

    The episode's end goes in ``info["terminated"]``/``info["truncated"]``, and the flags
    it returns stay ``False``: a Gymnasium vector env must not see an end, or it would
    reset the sub-env itself (or, with autoreset disabled, refuse to step it again).
    :class:`GroupVectorEnv` puts the flags back.
    """

    def __init__(self, env: gym.Env[str, str]) -> None:
        super().__init__(env)
        self._held: tuple[str, dict[str, Any]] | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        self._held = None
        obs, info = self.env.reset(seed=seed, options=options)
        return obs, {**info, "active": True}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._held is not None:  # the task's keys only: no step's reward, score or outcome again
            obs, info = self._held
            return obs, 0.0, False, False, {**{k: info[k] for k in TASK_KEYS if k in info}, "active": False,
                                            "held": True, "terminated": False, "truncated": False}
        obs, reward, terminated, truncated, info = self.env.step(action)
        if terminated or truncated:
            self._held = (obs, info)
        return obs, float(reward), False, False, {**info, "active": True, "terminated": terminated,
                                                  "truncated": truncated}


def _unbatch(infos: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """A vector env's info dict back into one dict per sub-env."""
    out: list[dict[str, Any]] = [{} for _ in range(n)]
    for key, values in infos.items():
        if key.startswith("_"):
            continue
        mask = infos.get(f"_{key}")
        if isinstance(values, dict):
            for i, sub in enumerate(_unbatch(values, n)):
                if sub:
                    out[i][key] = sub
            continue
        for i in range(n):
            if mask is None or mask[i]:
                out[i][key] = values[i]
    return out


class GroupVectorEnv(VectorWrapper):
    """Group rollouts over a vector env whose sub-envs are wrapped in :class:`HoldWhenDone`
    and whose autoreset is disabled (:func:`ap_gym.make_vec` builds it); see the module
    docstring.

    Args:
        env: the vector env (``num_envs`` a multiple of ``group_size``).
        group_size: ``G``, the copies per group.
        tasks: task ids the groups go through in order (cycling); by default the seed
            picks the task.
    """

    def __init__(self, env: VectorEnv, group_size: int, tasks: Sequence[str] | None = None) -> None:
        super().__init__(env)
        if group_size < 1 or env.num_envs % group_size:
            raise ValueError(f"num_envs={env.num_envs} is not a multiple of group_size={group_size}; "
                             "ask for groups x group_size envs")
        if env.metadata.get("autoreset_mode") != AutoresetMode.DISABLED:
            raise ValueError("GroupVectorEnv needs a vector env built with autoreset_mode=AutoresetMode.DISABLED "
                             "and HoldWhenDone on each sub-env; ap_gym.make_vec(..., group_size=G) builds one")
        self.group_size = group_size
        self.groups = env.num_envs // group_size
        self.tasks = list(tasks) if tasks is not None else None
        self.metadata = {**env.metadata, "autoreset_mode": GROUP_AUTORESET}
        self._base = 0
        self._counter = 0
        self._episode = np.zeros(self.groups, dtype=np.int64)  # the counter value of each group's episode
        self._done = np.zeros(env.num_envs, dtype=bool)
        self._pending: np.ndarray[Any, Any] = np.zeros(self.groups, dtype=bool)
        self._obs: list[str] = [""] * env.num_envs

    def group_of(self, index: int) -> int:
        return index // self.group_size

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        if seed is not None and not isinstance(seed, int | np.integer):
            raise TypeError("GroupVectorEnv.reset takes one int seed (group k's episodes use seed + k)")
        self._base = int(seed) if seed is not None else int(np.random.default_rng().integers(2**31 - 1))
        self._counter = 0
        obs, infos = self._reset_groups(np.ones(self.groups, dtype=bool), options)
        return obs, self._batch([{**info, "group_reset": True} for info in infos])

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        pending = self._pending.copy()
        obs, rewards, _, _, infos = self.env.step(actions)
        self._obs = list(obs)
        per_env = _unbatch(infos, self.num_envs)
        rewards = np.asarray(rewards, dtype=np.float64).copy()
        terminations = np.array([bool(info.pop("terminated", False)) for info in per_env])
        truncations = np.array([bool(info.pop("truncated", False)) for info in per_env])
        self._done = np.asarray(self._done | terminations | truncations)
        if pending.any():
            _, reset_infos = self._reset_groups(pending, None)
            for i in np.flatnonzero(np.repeat(pending, self.group_size)):
                rewards[i], terminations[i], truncations[i] = 0.0, False, False
                per_env[i] = {**reset_infos[i], "group_reset": True}
        self._pending = np.asarray(self._done.reshape(self.groups, self.group_size).all(axis=1))
        return tuple(self._obs), rewards, terminations, truncations, self._batch(per_env)

    def _reset_groups(self, groups: np.ndarray, options: dict[str, Any] | None) -> tuple[Any, list[dict[str, Any]]]:
        members = np.repeat(groups, self.group_size)
        seeds: list[int | None] = [None] * self.num_envs
        tasks: dict[int, str] = {}
        for g in np.flatnonzero(groups):
            self._episode[g] = self._counter
            self._counter += 1
            for i in range(g * self.group_size, (g + 1) * self.group_size):
                seeds[i] = self._base + int(self._episode[g])
            if self.tasks:
                tasks[int(g)] = self.tasks[int(self._episode[g]) % len(self.tasks)]
        per_env: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        calls = ([(members, None)] if not tasks else
                 [(np.repeat(np.arange(self.groups) == g, self.group_size), task) for g, task in tasks.items()])
        for mask, task in calls:
            opts = {**(options or {}), "reset_mask": mask.copy()}
            if task is not None:
                opts["task_id"] = task
            # a vector env takes one seed per member (Gymnasium's VectorEnv annotates an int only)
            member_seeds: Any = [s if m else None for s, m in zip(seeds, mask, strict=True)]
            obs, infos = self.env.reset(seed=member_seeds, options=opts)
            for i, info in enumerate(_unbatch(infos, self.num_envs)):
                if mask[i]:
                    self._obs[i] = obs[i]
                    per_env[i] = info
        self._done[members] = False
        self._pending[groups] = False
        return tuple(self._obs), per_env

    def _batch(self, per_env: list[dict[str, Any]]) -> dict[str, Any]:
        infos: dict[str, Any] = {}
        for i, info in enumerate(per_env):
            info = {**info, "group": self.group_of(i), "group_episode": int(self._episode[self.group_of(i)])}
            info.setdefault("active", not self._done[i])
            infos = self._add_info(infos, info, i)
        return infos


class GroupEpisodeStatistics(VectorWrapper):
    """Episode statistics over a :class:`GroupVectorEnv`: each member's steps counted while it
    plays (not on held steps, not on the group's reset step), its return summed over them,
    and at the step it ends ``info["episode"] = {"r", "l", "t"}`` with ``info["_episode"]``
    marking the members that ended (Gymnasium's keys), as ``RecordEpisodeStatistics`` gives
    them for an ordinary vector env.
    """

    def __init__(self, env: VectorEnv) -> None:
        super().__init__(env)
        if env.metadata.get("autoreset_mode") != GROUP_AUTORESET:
            raise ValueError("GroupEpisodeStatistics wraps a group env (ap_gym.make_vec(..., group_size=G)); use "
                             "Gymnasium's RecordEpisodeStatistics for an ordinary vector env")
        self.returns = np.zeros(self.num_envs)
        self.lengths = np.zeros(self.num_envs, dtype=np.int64)
        self.started = np.zeros(self.num_envs)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        obs, infos = self.env.reset(seed=seed, options=options)
        self.returns[:], self.lengths[:], self.started[:] = 0.0, 0, time.perf_counter()
        return obs, infos

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        obs, rewards, terminations, truncations, infos = self.env.step(actions)
        now = time.perf_counter()
        reset = np.asarray(infos.get("group_reset", np.zeros(self.num_envs, dtype=bool)), dtype=bool) & \
            np.asarray(infos.get("_group_reset", np.ones(self.num_envs, dtype=bool)), dtype=bool)
        active = np.asarray(infos.get("active", np.ones(self.num_envs, dtype=bool)), dtype=bool) & ~reset
        self.returns[reset], self.lengths[reset], self.started[reset] = 0.0, 0, now
        self.returns[active] += np.asarray(rewards, dtype=np.float64)[active]
        self.lengths[active] += 1
        ended = np.asarray(terminations, dtype=bool) | np.asarray(truncations, dtype=bool)
        if ended.any():
            infos["episode"] = {"r": np.where(ended, self.returns, 0.0), "l": np.where(ended, self.lengths, 0),
                                "t": np.where(ended, np.round(now - self.started, 6), 0.0)}
            infos["_episode"] = ended
        return obs, rewards, terminations, truncations, infos
