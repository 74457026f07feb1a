"""The one place where an environment and a policy meet.

``run_episode`` needs nothing but the Gymnasium API and the :class:`~ap_gym.types.Policy`
protocol: no policy-specific or benchmark-specific code lives here. Infrastructure
failures (engine crash, unreachable backbone) end the episode and are recorded as
``Termination.INFRA``, never as a failed task.

Example:
    >>> import gymnasium as gym, ap_gym
    >>> from ap_gym.policies import RandomPolicy
    >>> env = gym.make("ap_gym/TextWorld-v0", split="test")  # doctest: +SKIP
    >>> ep = ap_gym.run_episode(env, RandomPolicy(seed=0), seed=0)  # doctest: +SKIP
    >>> print(ep.summary_line())  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym

from ap_gym.errors import InfrastructureError, PromptRejected
from ap_gym.types import Episode, Policy, PolicyTrace, Termination
from ap_gym.wrappers.recording import RecordEpisode

__all__ = ["run_episode", "run_episodes"]


def run_episode(
    env: gym.Env[str, str],
    policy: Policy,
    *,
    task_id: str | None = None,
    seed: int | None = None,
    max_steps: int | None = None,
    options: dict[str, Any] | None = None,
    truncate_when: Callable[[], bool] | None = None,
) -> Episode:
    """Run one episode and return its immutable record.

    Args:
        env: an ap-gym text env (wrapped or not).
        policy: anything that follows the Policy protocol.
        task_id: the task to play; ``None`` lets ``seed`` pick one.
        seed: passed to ``env.reset``.
        max_steps: an extra step limit enforced by the loop (the env's ``TimeLimit``,
            50 by default, applies as well); reaching it truncates.
        options: extra reset options. A policy's ``reset_options`` attribute (for
            example ``{"walkthrough": True}``) is merged in first.
        truncate_when: asked after each step; ``True`` truncates the episode there (a
            trainer's token budget), as a step limit would.

    Returns:
        The Episode, after ``policy.end`` has seen it; any LLM calls ``end`` made are
        added to its usage.
    """
    recorder = env if isinstance(env, RecordEpisode) else RecordEpisode(env)
    # ``reset_options`` is optional: a policy that needs nothing from the env need not say so
    opts: dict[str, Any] = {**dict(getattr(policy, "reset_options", {}) or {}), **(options or {})}
    if task_id is not None:
        opts["task_id"] = task_id
    training = bool(policy.training)

    try:
        obs, info = recorder.reset(seed=seed, options=opts)
    except InfrastructureError as e:
        episode = _failed_start(env, task_id, seed, e, training)
        return _finish(policy, episode, seed, training, began=False)

    try:
        policy.begin(obs, info)
        terminated = truncated = False
        while not (terminated or truncated):
            action = policy.act(obs, info)
            obs, _reward, terminated, truncated, info = recorder.step(action)
            if not terminated and ((max_steps is not None and recorder.num_steps >= max_steps)
                                   or (truncate_when is not None and truncate_when())):
                truncated = True
        episode = recorder.episode or recorder.build(info, terminated, truncated)
    except InfrastructureError as e:
        episode = recorder.build(
            recorder.start_info, False, False, termination=Termination.INFRA,
            error=f"{type(e).__name__}: {e}",
        )
    except PromptRejected as e:  # the method's own prompt: a failed task, counted in every rate
        episode = recorder.build(recorder.start_info, False, False, termination=Termination.PROMPT_REJECTED,
                                 error=f"{type(e).__name__}: {e}")
    return _finish(policy, episode, seed, training)


def _finish(
    policy: Policy, episode: Episode, seed: int | None, training: bool, *, began: bool = True
) -> Episode:
    trace: PolicyTrace = policy.trace() if began else PolicyTrace()
    steps = tuple(dataclasses.replace(step, trace=t) for step, t in zip(episode.steps, trace.steps, strict=False)) \
        + episode.steps[len(trace.steps):]
    episode = dataclasses.replace(
        episode, steps=steps, usage=trace.usage, policy_info=dict(trace.info), seed=seed,
        training=training,
    )
    try:
        extra = policy.end(episode)
    except (InfrastructureError, PromptRejected) as e:  # e.g. the backbone died during reflection
        return dataclasses.replace(
            episode, error=f"after the episode: {type(e).__name__}: {e}",
            policy_info={**episode.policy_info, "end_failed": True},
        )
    if extra is not None:
        episode = dataclasses.replace(episode, usage=episode.usage + extra)
    if began:  # what the policy decided while learning (stored or rejected abstractions) is kept too
        after = dict(policy.trace().info)
        if after != episode.policy_info:
            episode = dataclasses.replace(episode, policy_info={**episode.policy_info, **after})
    return episode


def _failed_start(env: gym.Env, task_id: str | None, seed: int | None, e: Exception, training: bool) -> Episode:
    family = "?"
    if task_id is not None:
        task_family = getattr(env.unwrapped, "task_family", None)  # a TextEnv's, when the env has one
        with contextlib.suppress(Exception):
            family = str(task_family(task_id)) if callable(task_family) else family
    return Episode(
        task_id=task_id or "?", task_family=family, instruction="", initial_observation="",
        steps=(), success=False, score=None, max_score=None, termination=Termination.INFRA,
        error=f"reset failed: {type(e).__name__}: {e}", seed=seed, training=training,
    )


def run_episodes(
    envs: Sequence[gym.Env[str, str]],
    policies: Sequence[Policy],
    task_ids: Sequence[Any],
    *,
    runner: Callable[[gym.Env[str, str], Policy, Any], Any] | None = None,
    on_lane_done: Callable[[int], None] | None = None,
) -> list[Any]:
    """Play ``task_ids`` on several (env, policy) lanes at once, one thread per lane.

    Lanes take the next task as they free up; results come back in task order. Used
    with :class:`~ap_gym.backbones.batching.BatchingBackbone` lane views as the
    policies' backbones, the lanes' model calls run as one batch per step; with an HTTP
    backbone they are concurrent requests.

    Args:
        envs, policies: one per lane, same length; a lane never shares either.
        task_ids: the tasks to play (task ids, or whatever ``runner`` takes).
        runner: ``runner(env, policy, task_id)`` plays one task (default:
            :func:`run_episode` with that task id).
        on_lane_done: called with the lane's index when it has no task left.
    """
    if len(envs) != len(policies) or not envs:
        raise ValueError("run_episodes needs one policy per env, and at least one lane")
    play = runner or (lambda env, policy, task_id: run_episode(env, policy, task_id=task_id))
    results: list[Any] = [None] * len(task_ids)
    errors: list[BaseException] = []
    lock = threading.Lock()
    queue = list(enumerate(task_ids))

    def lane(i: int) -> None:
        try:
            while True:
                with lock:
                    if not queue or errors:
                        return
                    index, task_id = queue.pop(0)
                results[index] = play(envs[i], policies[i], task_id)
        except BaseException as e:  # surfaces in the caller after every lane stopped
            with lock:
                errors.append(e)
        finally:
            if on_lane_done is not None:
                on_lane_done(i)

    threads = [threading.Thread(target=lane, args=(i,), name=f"ap-gym-lane-{i}", daemon=True)
               for i in range(min(len(envs), len(task_ids)) or 1)]
    for i in range(len(threads), len(envs)):  # lanes without a task never call
        if on_lane_done is not None:
            on_lane_done(i)
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results
