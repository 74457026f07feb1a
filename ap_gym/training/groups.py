"""Group rollouts through the evaluation stepper, and the credit-assignment rules that turn
them into a policy gradient over the admissible commands.

A trainer that chooses among admissible commands (the ``choose`` agent with a temperature:
its policy is the softmax of the commands' log-likelihoods over T) plays through
:func:`~ap_gym.rollout.run_episodes`: one lane per attempt, each with its own env and a
:class:`~ap_gym.policies.react.NoMemory` agent talking to a lane of one
:class:`~ap_gym.backbones.batching.BatchingBackbone` (the lanes' scoring calls share a
forward pass). So a training attempt is played by the code and seen through the prompt
that ``ap-gym run`` evaluates with. Each step's trace keeps the exact chat
(``record_messages``), every candidate (``candidates_kept: None``) and the sampled
command's log-probability; :func:`decisions` reads them back as :class:`Decision` s.

Three credit-assignment rules, each giving one advantage per decision:

* :func:`grpo_advantages`: a trajectory's return against its group's (GRPO; the same
  advantage for every decision of the trajectory);
* :func:`rebn_advantages`: per-turn discounted returns, normalised over the batch
  (REINFORCE with Return Batch Normalisation, as GEM's baselines);
* :func:`gigpo_advantages`: GRPO's trajectory advantage plus a step-level one from anchor
  states: decisions of one group taken in the same state (equal observation text: use
  ``status_line=False`` on TextWorld) compared by their discounted returns (after
  verl-agent's GiGPO).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from ap_gym.backbones.base import Message
from ap_gym.backbones.batching import BatchingBackbone
from ap_gym.backbones.hf import TransformersBackbone
from ap_gym.policies.react import AgentConfig, NoMemory
from ap_gym.rollout import run_episode, run_episodes
from ap_gym.types import Episode

__all__ = ["Decision", "Trajectory", "choice_logprobs", "chosen_logprob", "decisions", "gigpo_advantages", "grpo_advantages",
           "play_groups", "rebn_advantages", "training_choose_agent"]


@dataclass(frozen=True)
class Decision:
    """One ``choose`` step of an attempt: the state, the commands, the pick and its outcome.

    Attributes:
        messages: the exact chat the model saw (the evaluation prompt of this state).
        candidates: every admissible command, as scored.
        chosen: the index of the command taken.
        logprob: its log-probability under the policy that played it.
        reward: the env's reward for it, over the task's ``max_score``.
        state: the observation it was taken in (anchor states: equal text, equal state).
    """

    messages: tuple[Message, ...]
    candidates: tuple[str, ...]
    chosen: int
    logprob: float
    reward: float
    state: str


@dataclass(frozen=True)
class Trajectory:
    """One attempt: its episode (the stepper's record), its decisions, its group."""

    episode: Episode
    decisions: tuple[Decision, ...]
    group: int

    @property
    def ret(self) -> float:
        """The attempt's return: the sum of its normalised rewards."""
        return float(sum(d.reward for d in self.decisions))


def training_choose_agent(temperature: float, agent: AgentConfig | Mapping[str, Any] | None = None) -> AgentConfig:
    """The evaluation agent's options (``agent``), choosing stochastically at ``temperature``
    and keeping what a policy gradient needs: the chat and every candidate of each step."""
    if temperature <= 0:
        raise ValueError("a policy gradient needs a stochastic policy: temperature > 0")
    return AgentConfig.coerce(agent).replace(action_mode="choose", choose_temperature=temperature,
                                             record_messages=True, candidates_kept=None, choose_method="score")


def decisions(episode: Episode) -> tuple[Decision, ...]:
    """An episode's ``choose`` steps as :class:`Decision` s (steps without a recorded chat,
    candidates or log-probability, such as the generated steps of an env with no admissible
    commands, are left out)."""
    out = []
    max_score = float(episode.max_score or 1.0) or 1.0
    state = episode.initial_observation
    for step in episode.steps:
        t = step.trace
        if t.messages is not None and t.candidates and t.logprob is not None:
            names = tuple(c for c, _ in t.candidates)
            if step.action in names:
                out.append(Decision(t.messages, names, names.index(step.action), t.logprob,
                                    float(step.reward) / max_score, state))
        state = step.observation
    return tuple(out)


def play_groups(backbone: TransformersBackbone, env_id: str, tasks: Sequence[tuple[str, int]], group_size: int, *,
                agent: AgentConfig, sample_seed: int, max_steps: int | None = None, lanes: int | None = None,
                env_kwargs: Mapping[str, Any] | None = None) -> list[Trajectory]:
    """Every ``(task id, env seed)`` of ``tasks`` played ``group_size`` times from one start,
    each attempt with an agent seed of its own (so a group of stochastic attempts differs),
    through :func:`~ap_gym.rollout.run_episodes` on ``lanes`` lanes (default: one per
    attempt, at most 8) batched on ``backbone``.

    Returns the trajectories in order: group k holds attempts ``k * group_size`` to
    ``(k + 1) * group_size - 1``. An attempt the infrastructure broke is left out of its
    group (say so in the trajectories' count: the caller decides).
    """
    if group_size < 1 or not tasks:
        raise ValueError(f"group_size is at least 1 and tasks not empty (got {group_size}, {len(tasks)} tasks)")
    jobs = [(k, task, seed, sample_seed * 1_000_003 + k * group_size + m)
            for k, (task, seed) in enumerate(tasks) for m in range(group_size)]
    n = min(len(jobs), lanes or 8)
    batcher = BatchingBackbone(backbone, n)
    envs = [gym.make(env_id, **dict(env_kwargs or {})) for _ in range(n)]
    policies = [NoMemory(batcher.lane(i), agent).eval() for i in range(n)]

    def play(env: gym.Env[str, str], policy: Any, job: Any) -> Episode:
        _, task, seed, agent_seed = job
        policy.seed = agent_seed
        return run_episode(env, policy, task_id=task, seed=seed, max_steps=max_steps)

    try:
        episodes = run_episodes(envs, policies, jobs, runner=play, on_lane_done=lambda _: batcher.retire())
    finally:
        for env in envs:
            env.close()
    return [Trajectory(ep, decisions(ep), k) for (k, *_), ep in zip(jobs, episodes, strict=True)
            if not ep.infrastructure_failure]


def _normalise(values: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    return (values - values.mean()) / (values.std() + eps) if len(values) else values


def _returns(decisions_: Sequence[Decision], gamma: float) -> list[float]:
    out, running = [], 0.0
    for d in reversed(decisions_):
        running = d.reward + gamma * running
        out.append(running)
    return out[::-1]


def grpo_advantages(trajectories: Sequence[Trajectory]) -> list[np.ndarray]:
    """Per trajectory, one advantage for each decision: its return minus its group's mean,
    over the group's standard deviation (GRPO)."""
    groups: dict[int, list[int]] = defaultdict(list)
    for i, t in enumerate(trajectories):
        groups[t.group].append(i)
    adv = [0.0] * len(trajectories)
    for members in groups.values():
        values = _normalise(np.array([trajectories[i].ret for i in members], dtype=np.float64))
        for i, v in zip(members, values, strict=True):
            adv[i] = float(v)
    return [np.full(len(t.decisions), adv[i]) for i, t in enumerate(trajectories)]


def rebn_advantages(trajectories: Sequence[Trajectory], gamma: float = 0.9) -> list[np.ndarray]:
    """Per decision, its discounted return from that turn, normalised over every decision of
    the batch (REINFORCE with Return Batch Normalisation)."""
    returns = [np.array(_returns(t.decisions, gamma), dtype=np.float64) for t in trajectories]
    flat = np.concatenate(returns) if returns else np.zeros(0)
    mean, std = (flat.mean(), flat.std()) if len(flat) else (0.0, 1.0)
    return [(r - mean) / (std + 1e-6) for r in returns]


def gigpo_advantages(trajectories: Sequence[Trajectory], gamma: float = 0.9, omega: float = 1.0) -> list[np.ndarray]:
    """GRPO's trajectory advantage plus ``omega`` times a step advantage: within a group, the
    decisions taken in the same anchor state (equal observation) compared by their
    discounted returns; a state met once has no step advantage."""
    episode = grpo_advantages(trajectories)
    returns = [_returns(t.decisions, gamma) for t in trajectories]
    anchors: dict[tuple[int, str], list[tuple[int, int]]] = defaultdict(list)
    for i, t in enumerate(trajectories):
        for j, d in enumerate(t.decisions):
            anchors[(t.group, d.state)].append((i, j))
    step = [np.zeros(len(t.decisions)) for t in trajectories]
    for members in anchors.values():
        if len(members) < 2:
            continue
        values = _normalise(np.array([returns[i][j] for i, j in members], dtype=np.float64))
        for (i, j), v in zip(members, values, strict=True):
            step[i][j] = v
    return [e + omega * s for e, s in zip(episode, step, strict=True)]


RULES: dict[str, Callable[..., list[np.ndarray]]] = {
    "grpo": grpo_advantages, "rebn": rebn_advantages, "gigpo": gigpo_advantages}


def choice_logprobs(backbone: TransformersBackbone, messages: Sequence[Message], candidates: Sequence[str],
                    temperature: float = 1.0) -> Any:
    """The choose agent's policy over ``candidates``, with gradients: log softmax of their
    summed log-likelihoods over ``temperature`` (the prompt encoded as ``score`` encodes it;
    the prompt computed once, the candidates packed after it)."""
    import torch

    cand_ids = backbone.candidate_ids(candidates)
    prompt, _ = backbone.encode_prompt(messages, max(len(c) for c in cand_ids) + 1)
    sums = torch.stack([s.sum() for s in backbone.candidate_logprobs(prompt, cand_ids)])
    return torch.log_softmax(sums.float() / temperature, -1)


def chosen_logprob(backbone: TransformersBackbone, decision: Decision, temperature: float) -> Any:
    """log softmax(candidates' summed log-likelihoods / T)[chosen], with gradients: the
    policy that played the decision."""
    return choice_logprobs(backbone, decision.messages, decision.candidates, temperature)[decision.chosen]
