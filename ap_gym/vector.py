"""Vector envs for rollout scripts: plain, grouped (GRPO), with rewards on one scale.

``gymnasium.make_vec("ap_gym/<Name>-v0", n, vectorization_mode="sync"|"async")`` works
as for any Gymnasium env (observations are shared between processes correctly: see
:mod:`ap_gym.envs.text_space`). :func:`make_vec` adds what a trainer asks for beyond it:
groups of identical starts (:class:`~ap_gym.wrappers.group.GroupVectorEnv`) and a
normalised reward (:class:`~ap_gym.wrappers.reward.NormalisedReward`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
from gymnasium.vector import AutoresetMode, VectorEnv

from ap_gym.wrappers.group import GroupVectorEnv, HoldWhenDone
from ap_gym.wrappers.recovering import RecoveringVectorEnv
from ap_gym.wrappers.reward import NormalisedReward

__all__ = ["make_vec"]


#: The most sub-envs one vector env builds (10**7 was still being built after 90 s).
MAX_ENVS = 1024


def make_vec(
    env_id: str,
    num_envs: int = 1,
    *,
    group_size: int = 1,
    vectorization_mode: str = "sync",
    normalised_reward: bool = False,
    tasks: Sequence[str] | None = None,
    vector_kwargs: dict[str, Any] | None = None,
    **env_kwargs: Any,
) -> VectorEnv:
    """A vector env of ``num_envs`` copies of ``env_id``.

    Args:
        env_id: a registered id, e.g. ``"ap_gym/TextWorld-v0"``.
        num_envs: the sub-envs in all (``groups x group_size``).
        group_size: ``G`` > 1 gives group rollouts: ``num_envs / G`` groups of ``G``
            copies of one task and seed that move to their next task together
            (``info["active"]`` marks members still playing).
        vectorization_mode: ``"sync"`` (one process) or ``"async"`` (a process per sub-env;
            a sub-env that fails is an :class:`~ap_gym.errors.EnvInfrastructureError`, and
            the next reset starts the vector env anew: :class:`RecoveringVectorEnv`).
        normalised_reward: reward / the task's ``max_score``; the raw one in
            ``info["raw_reward"]``.
        tasks: for group rollouts, the task ids the groups go through in order.
        vector_kwargs: passed to Gymnasium's vector env (e.g. ``{"context": "spawn"}``).
        **env_kwargs: passed to each env (``split=``, ``status_line=False``, ...).
    """
    if vectorization_mode not in ("sync", "async"):
        raise ValueError(f"vectorization_mode must be 'sync' or 'async', not {vectorization_mode!r}")
    for name, value in (("num_envs", num_envs), ("group_size", group_size),
                        ("max_episode_steps", env_kwargs.get("max_episode_steps", 1))):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} is a whole number of at least 1, not {value!r}")
    if num_envs > MAX_ENVS:
        raise ValueError(f"num_envs={num_envs}: each sub-env holds its own engine (a process for TextWorld, ALFWorld "
                         f"and ScienceWorld); at most {MAX_ENVS} are built in one vector env")
    if isinstance(tasks, str):
        raise ValueError(f"tasks is a list of task ids, not one string ({tasks!r}); pass [{tasks!r}]")
    if tasks is not None and not list(tasks):
        raise ValueError("tasks=[] names no task; leave it out to draw the groups' tasks by seed")
    if tasks is not None and group_size == 1:
        raise ValueError("tasks= orders the tasks of group rollouts; pass group_size > 1 (or reset with "
                         "options={'task_id': ...} yourself)")
    wrappers: list[Any] = [NormalisedReward] if normalised_reward else []
    kwargs = dict(vector_kwargs or {})
    if group_size > 1:
        if num_envs % group_size:
            raise ValueError(f"num_envs={num_envs} is not a multiple of group_size={group_size}")
        wrappers.append(HoldWhenDone)
        kwargs["autoreset_mode"] = AutoresetMode.DISABLED
    def build() -> VectorEnv:
        return gym.make_vec(env_id, num_envs, vectorization_mode=vectorization_mode, vector_kwargs=kwargs,
                            wrappers=wrappers, **env_kwargs)

    envs = RecoveringVectorEnv(build) if vectorization_mode == "async" else build()
    return GroupVectorEnv(envs, group_size, tasks) if group_size > 1 else envs
