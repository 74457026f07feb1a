"""An episode as token sequences, for trainers that learn from token log-probabilities.

A training rollout is played by the evaluation code itself: :func:`play_tokens` runs
:func:`~ap_gym.rollout.run_episode` (the one stepper: infrastructure failures and refused
prompts handled as in ``ap-gym run``) with the acting agent
(:class:`~ap_gym.policies.react.ReActAgent`, whose
:class:`~ap_gym.policies.prompting.PromptBuilder` writes every prompt) generating each
command with the trainer's model. So the prompt a model sees while it is trained is, token
for token, the prompt ``ap-gym run`` evaluates it with on the same state.

Two views of the played episode come back:

* ``turns``: per reply, the exact prompt ids it was generated from, its completion ids and
  each token's log-probability: what a per-turn trainer (REINFORCE over turns, step groups)
  needs; always exact.
* one sequence, what a single-turn trainer (TRL's ``GRPOTrainer``) expects:
  ``prompt_ids`` (the first prompt) and ``completion_ids``: the first reply, then the tokens
  the next prompt adds (the end of the turn, the environment's observation as a user turn,
  the next assistant header), then the next reply, and so on. ``env_mask`` is 1 on the
  model's tokens and 0 on the environment's; ``logprobs`` holds each generated token's
  log-probability (0 on the environment's). The sequence is only valid while each prompt
  extends the one before with the reply as generated: when the agent's history shows
  something else (a reply normalised to a command, a window that dropped old turns, a
  token budget), the sequence stops at that turn (``cut``, with ``cut_reason``), the
  episode ends there, and the reward is the score reached by the last reply it holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from ap_gym.backbones.base import Completion, GenerationConfig, Message, Reduction, Scores
from ap_gym.backbones.hf import TransformersBackbone
from ap_gym.errors import InfrastructureError
from ap_gym.policies.react import AgentConfig, NoMemory
from ap_gym.rollout import run_episode
from ap_gym.types import Episode, Termination

__all__ = ["TokenEpisode", "TokenTurn", "play_tokens", "require_valid", "training_agent"]


@dataclass(frozen=True)
class TokenTurn:
    """One reply: the exact prompt it was generated from and what the model wrote.

    Attributes:
        prompt_ids: the prompt's token ids (the evaluation prompt of this state).
        completion_ids: the generated ids (with the end-of-turn token when the model stopped).
        logprobs: the model's log-probability of each completion id.
        action: the command the reply became.
        reward: the env's reward for that command, over the task's ``max_score``.
    """

    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    action: str
    reward: float


@dataclass(frozen=True)
class TokenEpisode:
    """One played episode as token ids, and how it went.

    Attributes:
        task_id: the task played.
        prompt_ids: the chat up to the first reply.
        completion_ids: the replies and the environment's answers between them.
        env_mask: 1 on the model's tokens, 0 on the environment's (same length).
        logprobs: the model's log-probability of each of its tokens, 0 elsewhere.
        reward: the score reached by the last reply the sequence holds, over the task's
            ``max_score`` (1 for a full win).
        success: the env's success, won by a reply the sequence holds.
        actions: the commands the sequence's replies became.
        cut: the sequence stopped before the episode would have ended (token budget, or a
            prompt that does not extend the sequence: ``cut_reason``).
        turns: every reply with its exact prompt (:class:`TokenTurn`).
        episode: the stepper's record (termination, infrastructure failure, usage, prompts).
        cut_reason: why the sequence stopped early, or ``None``.
    """

    task_id: str
    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    env_mask: tuple[int, ...]
    logprobs: tuple[float, ...]
    reward: float
    success: bool
    actions: tuple[str, ...]
    cut: bool = False
    turns: tuple[TokenTurn, ...] = ()
    episode: Episode | None = None
    cut_reason: str | None = None

    @property
    def infrastructure_failure(self) -> bool:
        return self.episode is not None and self.episode.infrastructure_failure


def training_agent(generation: GenerationConfig, agent: AgentConfig | Mapping[str, Any] | None = None) -> AgentConfig:
    """The agent options of a training rollout: the evaluation agent's (``agent``, default
    :class:`AgentConfig`'s), generating each command with ``generation`` (the trainer's
    sampling settings)."""
    config = AgentConfig.coerce(agent)
    return config.replace(action_mode="generate", generation=generation)


class _Recorder:
    """The backbone the agent talks to in a training rollout: the trainer's model, with each
    reply's prompt ids, completion ids and log-probabilities kept, and the sequence's budget."""

    def __init__(self, backbone: TransformersBackbone, max_completion_tokens: int) -> None:
        self.backbone = backbone
        self.identity = backbone.identity
        self.max_completion_tokens = max_completion_tokens
        self.turns: list[tuple[tuple[int, ...], tuple[int, ...], tuple[float, ...]]] = []
        self.cut_reason: str | None = None
        self.held = 0  # turns the sequence holds (the rest were played past a cut)

    @property
    def done(self) -> bool:
        """The sequence can take no more turns: the episode ends at this step."""
        return self.cut_reason is not None

    def _used(self, prompt_ids: Sequence[int]) -> int:
        """Completion tokens the sequence holds before a reply to ``prompt_ids``."""
        return len(prompt_ids) - len(self.turns[0][0]) if self.turns else 0

    def _extends(self, prompt_ids: Sequence[int]) -> bool:
        if not self.turns:
            return True
        prompt, completion, _ = self.turns[-1]
        before = prompt + completion
        return tuple(prompt_ids[: len(before)]) == before

    def generate(self, messages: Sequence[Message], config: GenerationConfig = GenerationConfig()) -> Completion:
        ids, _ = self.backbone.encode_prompt(messages, min(config.max_new_tokens, self.backbone.max_context // 2))
        if self.cut_reason is None and not self._extends(ids):
            self.cut_reason = (f"the prompt of turn {len(self.turns) + 1} does not extend the sequence (the agent's "
                               "history shows a reply other than as generated, or dropped old turns)")
        room = self.max_completion_tokens - self._used(ids)
        if self.cut_reason is None and room < 1:
            self.cut_reason = f"the completion reached max_completion_tokens ({self.max_completion_tokens})"
        if self.cut_reason is None:
            config = config.model_copy(update={"max_new_tokens": min(config.max_new_tokens, room)})
        completion = self.backbone.generate(messages, config)
        extra = completion.extra
        self.turns.append((tuple(extra["prompt_ids"]), tuple(extra["completion_ids"]), tuple(extra["logprobs"])))
        if self.cut_reason is None:
            self.held = len(self.turns)
            if self._used(ids) + len(extra["completion_ids"]) >= self.max_completion_tokens:
                self.cut_reason = f"the completion reached max_completion_tokens ({self.max_completion_tokens})"
                self.held = len(self.turns)
        return completion

    def generate_batch(self, batch: Sequence[Sequence[Message]],
                       config: GenerationConfig = GenerationConfig()) -> list[Completion]:
        return [self.generate(m, config) for m in batch]

    def score(self, messages: Sequence[Message], candidates: Sequence[str], reduction: Reduction = "sum") -> Scores:
        raise TypeError("a token rollout generates its commands (action_mode: generate)")

    def reset_cache(self) -> None:
        self.backbone.reset_cache()

    def describe(self) -> dict[str, Any]:
        return self.backbone.describe()


def play_tokens(
    backbone: TransformersBackbone,
    env: gym.Env[str, str],
    *,
    task_id: str | None = None,
    seed: int | None = None,
    generation: GenerationConfig = GenerationConfig(max_new_tokens=24, temperature=1.0),
    max_turns: int = 10,
    max_completion_tokens: int = 512,
    agent: AgentConfig | Mapping[str, Any] | None = None,
    sample_seed: int | None = None,
) -> TokenEpisode:
    """Play one episode of ``env`` with ``backbone`` generating each command, through the
    evaluation stepper and prompt (see the module docstring).

    Args:
        backbone: a transformers backbone (the trainer's model and tokenizer).
        env: an ap-gym env (its admissible commands are listed as the agent lists them).
        task_id, seed: the task and the env's seed (equal seeds give equal starts).
        sample_seed: seeds sampling, per task and turn, as ``ap-gym run`` seeds an agent
            (default ``seed``); the members of a group start alike and sample apart with
            distinct sample seeds.
        generation: decoding options; sampling (temperature > 0) is what a policy gradient
            needs. Its ``max_new_tokens`` bounds each reply.
        max_turns: replies at most (the env's own step limit may end it sooner).
        max_completion_tokens: the sequence's completion at most, replies and the
            environment's turns together: no reply is generated past it.
        agent: the evaluation agent's options (history window, observation cut, listing,
            token budget); the action mode is ``generate``.

    Returns:
        The :class:`TokenEpisode`; an infrastructure failure is recorded on its ``episode``
        as ``run_episode`` records it (``infrastructure_failure``, reward 0): a trainer
        must not learn from it (:func:`require_valid`).
    """
    if max_turns < 1 or max_completion_tokens < 1:
        raise ValueError(f"max_turns and max_completion_tokens are at least 1, not {max_turns}, "
                         f"{max_completion_tokens}")
    from gymnasium.spaces import Text

    if not isinstance(env.observation_space, Text) or not isinstance(env.action_space, Text):
        raise TypeError(f"play_tokens plays a text env (observations and actions are text: an ap-gym env); "
                        f"{env.spec.id if env.spec else env} has {env.observation_space} and {env.action_space}")
    recorder = _Recorder(backbone, max_completion_tokens)
    policy = NoMemory(recorder, training_agent(generation, agent), seed=seed if sample_seed is None else sample_seed)
    with backbone.lock:
        episode = run_episode(env, policy.eval(), task_id=task_id, seed=seed, max_steps=max_turns,
                              truncate_when=lambda: recorder.done)
    return _assemble(episode, recorder)


def _assemble(episode: Episode, recorder: _Recorder) -> TokenEpisode:
    max_score = float(episode.max_score or 1.0)
    turns = tuple(TokenTurn(p, c, lp, step.action, float(step.reward) / max_score if max_score else 0.0)
                  for (p, c, lp), step in zip(recorder.turns, episode.steps, strict=False))
    held = turns[: recorder.held] if recorder.cut_reason else turns
    prompt = held[0].prompt_ids if held else ()
    completion: list[int] = []
    mask: list[int] = []
    logprobs: list[float] = []
    for k, turn in enumerate(held):
        if k:
            between = turn.prompt_ids[len(prompt) + len(completion):]
            completion, mask, logprobs = completion + list(between), mask + [0] * len(between), \
                logprobs + [0.0] * len(between)
        completion += turn.completion_ids
        mask += [1] * len(turn.completion_ids)
        logprobs += turn.logprobs
    steps = episode.steps[: len(held)]
    score = next((s.score for s in reversed(steps) if s.score is not None), None)
    reward = float(score) / max_score if score is not None and max_score else sum(t.reward for t in held)
    ended = episode.termination in (Termination.WON, Termination.LOST) and len(held) == len(turns)
    cut = recorder.cut_reason is not None and not ended
    return TokenEpisode(episode.task_id, tuple(prompt), tuple(completion), tuple(mask), tuple(logprobs),
                        0.0 if episode.infrastructure_failure else reward,
                        episode.termination is Termination.WON and len(held) == len(turns),
                        tuple(t.action for t in held), cut, turns, episode, recorder.cut_reason if cut else None)


def require_valid(episode: TokenEpisode) -> TokenEpisode:
    """``episode``, or an :class:`~ap_gym.errors.InfrastructureError` when the environment or
    the model failed (a trainer must never read that as a reward)."""
    if episode.infrastructure_failure:
        assert episode.episode is not None
        raise InfrastructureError(f"the rollout of {episode.task_id} failed: {episode.episode.error}")
    return episode
