"""ap-gym environments inside TRL's ``GRPOTrainer`` (TRL >= 1.16): two routes.

**rollout_func** (:class:`TRLRollout`), for any causal LM: the trainer hands over a batch of
prompts (each repeated ``num_generations`` times, consecutively: a GRPO group); each
prompt names a task and a seed (:meth:`TRLRollout.dataset` writes them), and the rollout
plays that episode with the trainer's own model (:func:`~ap_gym.training.tokens.play_tokens`):
the whole episode is one completion, the environment's turns masked out with
``env_mask``. A group's members share task and seed, so they start identically and differ
only by sampling. The episode's reward goes to the reward function
(:func:`env_reward`) as the extra field ``env_reward``.

**environment_factory** (:class:`EnvTools`), for models whose chat template calls tools
(TRL checks: ``trl.chat_template_utils.supports_tool_calling``; Qwen3, Llama 3.1/3.2,
GLM-4, gpt-oss and others it knows): TRL gives the model the env's ``act`` method as a
tool, calls ``reset`` per rollout and ``get_reward`` at its end. SmolLM2's template has no
tool calls, so with the packaged model the rollout route is the one that runs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym

from ap_gym.backbones.base import GenerationConfig
from ap_gym.backbones.hf import TransformersBackbone
from ap_gym.training.tokens import observation_turn, play_tokens

__all__ = ["EnvTools", "TRLRollout", "env_reward"]

_KEY = re.compile(r"^\[task (?P<task>\S+) seed (?P<seed>-?\d+)\]")


def env_reward(prompts: Sequence[Any], completions: Sequence[Any], env_reward: Sequence[float] | None = None,
               **kwargs: Any) -> list[float]:
    """A TRL reward function: the reward the environment gave each rollout."""
    if env_reward is None:
        raise ValueError("env_reward: the rollout gave no 'env_reward' field; use TRLRollout as rollout_func")
    return [float(r) for r in env_reward]


class TRLRollout:
    """``rollout_func`` for ``GRPOTrainer``: each prompt's task played as one completion.

    Args:
        env_id: a registered env (``"ap_gym/TextWorld-v0"``, your own).
        generation: decoding options (sampling; ``max_new_tokens`` per reply).
        max_turns: replies per episode at most.
        max_completion_tokens: the whole completion at most (the trainer's
            ``max_completion_length`` should be at least this).
        **env_kwargs: passed to ``gym.make`` (``split=``, ``status_line=False``, ...).
    """

    def __init__(self, env_id: str, *, generation: GenerationConfig = GenerationConfig(max_new_tokens=24, temperature=1.0),
                 max_turns: int = 8, max_completion_tokens: int = 512, **env_kwargs: Any) -> None:
        self.env_id = env_id
        self.generation = generation
        self.max_turns = max_turns
        self.max_completion_tokens = max_completion_tokens
        self.env_kwargs = env_kwargs
        self._env: gym.Env[str, str] | None = None
        self._backbone: TransformersBackbone | None = None
        self._calls = 0
        #: the last batch's episodes (for logging: success, actions)
        self.last: list[Any] = []

    def env(self) -> gym.Env[str, str]:
        if self._env is None:
            self._env = gym.make(self.env_id, **self.env_kwargs)
        return self._env

    def dataset(self, split: str = "train", *, seeds: Sequence[int] = (0,), tasks: Sequence[str] | None = None) -> list[dict[str, str]]:
        """Rows for a ``datasets.Dataset``: one prompt per task and seed, naming both."""
        ids = list(tasks) if tasks is not None else list(self.env().unwrapped.task_ids(split))
        rows = []
        for seed in seeds:
            for task in ids:
                obs, info = self.env().reset(seed=seed, options={"task_id": task})
                rows.append({"prompt": f"[task {task} seed {seed}] {info.get('instruction', '')}", "task_id": task})
        return rows

    def backbone(self, trainer: Any) -> TransformersBackbone:
        """The trainer's model and tokenizer as a backbone (its KV cache follows the
        weights' version, so a training step never leaves stale scores behind)."""
        model = trainer.accelerator.unwrap_model(trainer.model) if hasattr(trainer, "accelerator") else trainer.model
        if self._backbone is None or self._backbone.model is not model:
            tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
            self._backbone = TransformersBackbone(model, tokenizer=tokenizer, identity="trl-policy")
        return self._backbone

    def __call__(self, prompts: Sequence[Any], trainer: Any) -> dict[str, list[Any]]:
        backbone = self.backbone(trainer)
        self._calls += 1
        out: dict[str, list[Any]] = {k: [] for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask",
                                                       "env_reward", "success")}
        episodes = []
        for i, prompt in enumerate(prompts):
            task, seed = _task_of(prompt)
            generation = self.generation.model_copy(update={"seed": self._calls * 100_003 + i})
            episode = play_tokens(backbone, self.env(), task_id=task, seed=seed, generation=generation,
                                  max_turns=self.max_turns, max_completion_tokens=self.max_completion_tokens)
            episodes.append(episode)
            out["prompt_ids"].append(list(episode.prompt_ids))
            out["completion_ids"].append(list(episode.completion_ids))
            out["logprobs"].append(list(episode.logprobs))
            out["env_mask"].append(list(episode.env_mask))
            out["env_reward"].append(episode.reward)
            out["success"].append(episode.success)
        self.last = episodes
        return out

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None


def _task_of(prompt: Any) -> tuple[str, int]:
    text = prompt if isinstance(prompt, str) else " ".join(str(m.get("content", "")) for m in prompt)
    match = _KEY.match(text.strip())
    if match is None:
        raise ValueError(f"TRLRollout: the prompt {text[:80]!r} names no task; build the dataset with "
                         "TRLRollout.dataset() (prompts start '[task <id> seed <n>]')")
    return match["task"], int(match["seed"])


class EnvTools:
    """An ap-gym env as a TRL ``environment_factory`` object: ``reset`` starts a task and
    returns its first observation, ``act`` (the one tool) sends a command, ``get_reward``
    scores the rollout (the final score over ``max_score``).

    TRL calls the factory with no arguments: pass ``EnvTools.factory(env_id, ...)``.
    Dataset columns reach ``reset`` as keywords: ``task_id`` (and ``seed``) pick the task.
    """

    def __init__(self, env_id: str, **env_kwargs: Any) -> None:
        self._env = gym.make(env_id, **env_kwargs)
        self._info: dict[str, Any] = {}
        self._done = False

    @classmethod
    def factory(cls, env_id: str, **env_kwargs: Any) -> Callable[[], EnvTools]:
        return lambda: cls(env_id, **env_kwargs)

    def reset(self, **kwargs: Any) -> str:
        options: dict[str, Any] = {"admissible_commands": True}
        if kwargs.get("task_id"):
            options["task_id"] = str(kwargs["task_id"])
        seed = kwargs.get("seed")
        obs, self._info = self._env.reset(seed=int(seed) if seed is not None else None, options=options)
        self._done = False
        return f"Your task: {self._info.get('instruction', '')}\n\n{observation_turn(obs, self._info)}"

    def act(self, command: str) -> str:
        """Send one command to the text environment and read what happens.

        Args:
            command: the command, for example "go north" or "take key".

        Returns:
            What the environment answers, with the commands it accepts next.
        """
        if self._done:
            return "The episode has ended; no more commands are taken."
        obs, _, terminated, truncated, self._info = self._env.step(str(command))
        self._done = terminated or truncated
        end = " [the episode has ended]" if self._done else ""
        return observation_turn(obs, self._info) + end

    def get_reward(self) -> float:
        max_score = self._info.get("max_score") or 1.0
        return float(self._info.get("score") or 0.0) / float(max_score)
