"""An episode as one token sequence, for trainers that learn from token log-probabilities.

A multi-turn episode becomes what a single-turn trainer (TRL's ``GRPOTrainer``) expects:
``prompt_ids`` (the chat up to the first reply) and ``completion_ids``: the model's reply,
then the tokens the chat template puts between it and the next reply (the end of the
turn, the environment's observation as a user turn, the next assistant header), then the
next reply, and so on. ``env_mask`` is 1 on the model's tokens and 0 on the environment's,
so a loss counts only what the model chose; ``logprobs`` holds each generated token's
log-probability (0 on the environment's tokens).

Each reply is generated over the sequence so far, so the backbone's KV cache makes a turn
cost only its new tokens.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from ap_gym.backbones.base import GenerationConfig, Message
from ap_gym.backbones.hf import TransformersBackbone
from ap_gym.policies.react import normalise_action
from ap_gym.prompts import load_prompt

__all__ = ["TokenEpisode", "observation_turn", "play_tokens", "turn_suffix"]

_MARK = "\u2063AP_GYM_REPLY\u2063"


@dataclass(frozen=True)
class TokenEpisode:
    """One played episode as token ids, and how it went.

    Attributes:
        task_id: the task played.
        prompt_ids: the chat up to the first reply.
        completion_ids: the replies and the environment's answers between them.
        env_mask: 1 on the model's tokens, 0 on the environment's (same length).
        logprobs: the model's log-probability of each of its tokens, 0 elsewhere.
        reward: the final score divided by the task's ``max_score`` (1 for a full win).
        success: the env's success.
        actions: the commands sent.
        cut: the completion reached ``max_completion_tokens`` before the episode ended.
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


def observation_turn(observation: str, info: Mapping[str, Any], max_listed: int = 60) -> str:
    """The user turn for an observation: the text, then the admissible commands if any."""
    admissible = list(info.get("admissible_commands") or [])
    if not admissible:
        return observation
    listed = admissible[:max_listed]
    more = f" (and {len(admissible) - len(listed)} more)" if len(admissible) > len(listed) else ""
    return f"{observation}\n\nAdmissible commands: {', '.join(listed)}{more}"


def turn_suffix(tokenizer: Any, messages: Sequence[Message], observation: str, ended_with_eos: bool) -> str:
    """The text the chat template puts after an assistant reply and before the next one:
    the end of the reply's turn (unless the model's own end-of-turn token already ended
    it), the observation as a user turn, and the next assistant header.

    Read from the template itself (a marker reply, rendered with and without the next
    turn), so it holds for any chat template.
    """
    convo = [dict(m) for m in messages]
    closed = tokenizer.apply_chat_template(convo + [{"role": "assistant", "content": _MARK}], tokenize=False)
    after = tokenizer.apply_chat_template(convo + [{"role": "assistant", "content": _MARK},
                                                   {"role": "user", "content": observation}],
                                          tokenize=False, add_generation_prompt=True)
    if not after.startswith(closed[: closed.index(_MARK)]) or _MARK not in after:
        raise ValueError("the chat template does not render a conversation as a growing prefix; "
                         "multi-turn token episodes need one that does")
    suffix = after[after.index(_MARK) + len(_MARK):]
    eos = tokenizer.eos_token or ""
    if ended_with_eos and eos and suffix.startswith(eos):
        suffix = suffix[len(eos):]
    return suffix


def _start(env: gym.Env[str, str], task_id: str | None, seed: int | None) -> tuple[list[Message], dict[str, Any]]:
    options: dict[str, Any] = {"admissible_commands": True}
    if task_id is not None:
        options["task_id"] = task_id
    obs, info = env.reset(seed=seed, options=options)
    system = load_prompt("acting_system").format(instruction=info.get("instruction", ""))
    return [{"role": "system", "content": system}, {"role": "user", "content": observation_turn(obs, info)}], info


def play_tokens(
    backbone: TransformersBackbone,
    env: gym.Env[str, str],
    *,
    task_id: str | None = None,
    seed: int | None = None,
    generation: GenerationConfig = GenerationConfig(max_new_tokens=24, temperature=1.0),
    max_turns: int = 10,
    max_completion_tokens: int = 512,
) -> TokenEpisode:
    """Play one episode of ``env`` with ``backbone`` generating each command.

    Args:
        backbone: a transformers backbone (the trainer's model and tokenizer).
        env: an ap-gym env (``admissible_commands`` are asked for and listed).
        task_id, seed: the task and the seed (equal seeds give equal starts).
        generation: decoding options; sampling (temperature > 0) is what a policy
            gradient needs. Its ``seed`` (else ``seed``) makes the samples reproducible.
        max_turns: replies at most (the env's own step limit may end it sooner).
        max_completion_tokens: the completion's length at most; a longer episode is cut.
    """
    messages, info = _start(env, task_id, seed)
    prompt, _ = backbone.encode_prompt(messages, generation.max_new_tokens)
    completion: list[int] = []
    mask: list[int] = []
    logprobs: list[float] = []
    actions: list[str] = []
    cut = False
    with backbone.lock:
        backbone.reset_cache()
        for turn in range(max_turns):
            config = generation.model_copy(update={"seed": (generation.seed or seed or 0) * 1009 + turn})
            reply = backbone.complete(prompt + completion, config)
            ids = list(reply.extra["completion_ids"])
            completion, mask, logprobs = completion + ids, mask + [1] * len(ids), logprobs + list(reply.extra["logprobs"])
            action, _ = normalise_action(reply.text, info.get("admissible_commands"))
            actions.append(action)
            obs, _, terminated, truncated, info = env.step(action)
            if terminated or truncated or turn == max_turns - 1:
                break
            # the reply's end-of-turn token is in ids when it stopped there
            user = observation_turn(obs, info)
            between = turn_suffix(backbone.tokenizer, messages, user, len(ids) > reply.completion_tokens)
            messages += [{"role": "assistant", "content": reply.text}, {"role": "user", "content": user}]
            env_ids = backbone.tokenizer(between, add_special_tokens=False)["input_ids"]
            if len(completion) + len(env_ids) + config.max_new_tokens > max_completion_tokens:
                cut = True
                break
            completion, mask, logprobs = completion + env_ids, mask + [0] * len(env_ids), logprobs + [0.0] * len(env_ids)
    reward = float(info.get("score") or 0.0) / float(info.get("max_score") or 1.0)
    return TokenEpisode(str(info.get("task_id", task_id)), tuple(prompt), tuple(completion), tuple(mask),
                        tuple(logprobs), reward, bool(info.get("success")), tuple(actions), cut)
