"""ap-gym environments inside TRL's ``GRPOTrainer`` (TRL >= 1.16): two routes.

**rollout_func** (:class:`TRLRollout`), for any causal LM: the trainer hands over a batch of
prompts (each repeated ``num_generations`` times, consecutively: a GRPO group); each
prompt names a task and a seed (:meth:`TRLRollout.dataset` writes them), and the rollout
plays that episode with the trainer's own model through the evaluation stepper and prompt
(:func:`~ap_gym.training.tokens.play_tokens`), sampling with the trainer's settings
(temperature, top-p, ``max_completion_length``): the whole episode is one completion, the
environment's turns masked out with ``env_mask``. A group's members share task and env
seed, so they start identically, and sample with seeds of their own. The episode's reward
goes to the reward function (:func:`env_reward`) as the extra field ``env_reward``; an
episode the infrastructure broke is played again, and never reaches the trainer as a reward.

**environment_factory** (:class:`EnvTools`), for models whose chat template calls tools
(TRL checks: ``trl.chat_template_utils.supports_tool_calling``; Qwen3, Llama 3.1/3.2,
GLM-4, gpt-oss and others it knows): TRL gives the model the env's ``act`` method as a
tool, calls ``reset`` per rollout (with the dataset row's columns: :meth:`EnvTools.dataset`
writes conversational rows with ``task_id`` and ``seed``) and ``get_reward`` at its end.
The first prompt is the evaluation prompt (the acting system prompt, then the first
observation as the agent lists it); later turns are TRL's tool messages. SmolLM2's template
has no tool calls, so with the packaged model the rollout route is the one that runs.
"""

from __future__ import annotations

import logging
import math
import queue
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym

from ap_gym.backbones.base import GenerationConfig
from ap_gym.backbones.hf import TransformersBackbone
from ap_gym.envs.base import TextEnv
from ap_gym.errors import InfrastructureError
from ap_gym.policies.base import BasePolicy
from ap_gym.policies.prompting import PromptBuilder
from ap_gym.policies.react import AgentConfig
from ap_gym.rollout import run_episode
from ap_gym.training.tokens import TokenEpisode, play_tokens
from ap_gym.types import Episode

__all__ = ["EnvTools", "TRLRollout", "env_reward"]

log = logging.getLogger(__name__)
_KEY = re.compile(r"^\[task (?P<task>\S+) seed (?P<seed>-?\d+)\]")


def env_reward(prompts: Sequence[Any], completions: Sequence[Any], env_reward: Sequence[float] | None = None,
               **kwargs: Any) -> list[float]:
    """A TRL reward function: the reward the environment gave each rollout."""
    if env_reward is None:
        raise ValueError("env_reward: the rollout gave no 'env_reward' field; use TRLRollout as rollout_func")
    rewards = [float(r) for r in env_reward]
    if not all(math.isfinite(r) for r in rewards):
        raise ValueError(f"env_reward: a reward is not a finite number ({rewards}); a trainer cannot learn from it")
    return rewards


class TRLRollout:
    """``rollout_func`` for ``GRPOTrainer``: each prompt's task played as one completion.

    Args:
        env_id: a registered env (``"ap_gym/TextWorld-v0"``, your own).
        generation: decoding options; ``None`` (the default) takes the trainer's
            (``temperature``, ``top_p``) with ``max_reply_tokens`` per reply.
        max_turns: replies per episode at most.
        max_completion_tokens: the whole completion at most; ``None`` takes the trainer's
            ``max_completion_length``.
        max_reply_tokens: one reply's tokens at most (when ``generation`` is ``None``).
        agent: the evaluation agent's options (history window, observation cut, listing),
            so that the trained model is evaluated on the prompts it was trained on.
        retries: an episode the infrastructure broke is played again this many times, then
            the rollout raises :class:`~ap_gym.errors.InfrastructureError`.
        **env_kwargs: passed to ``gym.make`` (``split=``, ``status_line=False``, ...).
    """

    def __init__(self, env_id: str, *, generation: GenerationConfig | None = None, max_turns: int = 8,
                 max_completion_tokens: int | None = None, max_reply_tokens: int = 24,
                 agent: AgentConfig | Mapping[str, Any] | None = None, retries: int = 2, **env_kwargs: Any) -> None:
        if max_turns < 1 or max_reply_tokens < 1 or retries < 0 or (max_completion_tokens is not None
                                                                     and max_completion_tokens < 1):
            raise ValueError("max_turns, max_reply_tokens and max_completion_tokens are at least 1, retries at least 0")
        self.env_id = env_id
        self.generation = generation
        self.max_turns = max_turns
        self.max_completion_tokens = max_completion_tokens
        self.max_reply_tokens = max_reply_tokens
        self.agent = AgentConfig.coerce(agent)
        self.retries = retries
        self.env_kwargs = env_kwargs
        self._env: gym.Env[str, str] | None = None
        self._backbone: TransformersBackbone | None = None
        self._calls = 0
        #: the last batch's episodes (for logging: success, actions)
        self.last: list[TokenEpisode] = []

    def env(self) -> gym.Env[str, str]:
        if self._env is None:
            self._env = gym.make(self.env_id, **self.env_kwargs)
        return self._env

    def dataset(self, split: str = "train", *, seeds: Sequence[int] = (0,), tasks: Sequence[str] | None = None
                ) -> list[dict[str, Any]]:
        """Rows for a ``datasets.Dataset``: one prompt per task and seed, naming both (the
        prompt starts ``[task <id> seed <n>]``), with ``task_id`` and ``seed`` columns."""
        ids = _tasks(self.env(), split, tasks)
        rows = []
        for seed in seeds:
            for task in ids:
                _, info = self.env().reset(seed=int(seed), options={"task_id": task})
                rows.append({"prompt": f"[task {task} seed {int(seed)}] {info.get('instruction', '')}",
                             "task_id": task, "seed": int(seed)})
        return rows

    def backbone(self, trainer: Any) -> TransformersBackbone:
        """The trainer's model and tokenizer as a backbone (its KV cache follows the
        weights' version, so a training step never leaves stale scores behind)."""
        model = trainer.accelerator.unwrap_model(trainer.model) if hasattr(trainer, "accelerator") else trainer.model
        if self._backbone is None or self._backbone.model is not model:
            tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
            self._backbone = TransformersBackbone(model, tokenizer=tokenizer, identity="trl-policy")
        return self._backbone

    def settings(self, trainer: Any) -> tuple[GenerationConfig, int]:
        """The sampling options and the completion budget: the trainer's, unless given."""
        args = getattr(trainer, "args", None)
        budget = self.max_completion_tokens or int(getattr(args, "max_completion_length", None) or 512)
        if self.generation is not None:
            return self.generation, budget
        temperature = getattr(args, "temperature", None)
        top_p = getattr(args, "top_p", None)
        return GenerationConfig(max_new_tokens=self.max_reply_tokens,
                                temperature=1.0 if temperature is None else float(temperature),
                                top_p=1.0 if top_p is None else float(top_p)), budget

    def __call__(self, prompts: Sequence[Any], trainer: Any) -> dict[str, list[Any]]:
        backbone = self.backbone(trainer)
        generation, budget = self.settings(trainer)
        self._calls += 1
        out: dict[str, list[Any]] = {k: [] for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask",
                                                       "env_reward", "success")}
        episodes = []
        for i, prompt in enumerate(prompts):
            task, seed = _task_of(prompt)
            episode = self._play(backbone, task, seed, generation, budget, self._calls * 100_003 + i)
            episodes.append(episode)
            out["prompt_ids"].append(list(episode.prompt_ids))
            out["completion_ids"].append(list(episode.completion_ids))
            out["logprobs"].append(list(episode.logprobs))
            out["env_mask"].append(list(episode.env_mask))
            out["env_reward"].append(episode.reward)
            out["success"].append(episode.success)
        self.last = episodes
        return out

    def _play(self, backbone: TransformersBackbone, task: str, seed: int, generation: GenerationConfig, budget: int,
              sample_seed: int) -> TokenEpisode:
        """One member's episode; one the infrastructure broke is played again, then refused."""
        for attempt in range(self.retries + 1):
            episode = play_tokens(backbone, self.env(), task_id=task, seed=seed, generation=generation,
                                  max_turns=self.max_turns, max_completion_tokens=budget, agent=self.agent,
                                  sample_seed=sample_seed + 7919 * attempt)
            if not episode.infrastructure_failure:
                return episode
        error = episode.episode.error if episode.episode is not None else "?"
        raise InfrastructureError(f"TRLRollout: {task} (seed {seed}) failed {self.retries + 1} time(s): {error}; "
                                  "no reward is made up for it")

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None


def _tasks(env: gym.Env[str, str], split: str, tasks: Sequence[str] | None) -> list[str]:
    if isinstance(tasks, str):
        raise ValueError(f"tasks is a list of task ids, not one string ({tasks!r}); pass [{tasks!r}]")
    if tasks is not None:
        ids = list(tasks)
    else:
        unwrapped = env.unwrapped
        if not isinstance(unwrapped, TextEnv):
            raise TypeError(f"{env} is not an ap-gym text env (it lists no task ids): pass tasks=[...]")
        ids = list(unwrapped.task_ids(split))
    if not ids:
        raise ValueError(f"no tasks: {split!r} of {env.spec.id if env.spec else env} is empty, or tasks=[] was given")
    return ids


def _task_of(prompt: Any) -> tuple[str, int]:
    text = prompt if isinstance(prompt, str) else " ".join(str(m.get("content", "")) for m in prompt)
    match = _KEY.match(text.strip())
    if match is None:
        raise ValueError(f"TRLRollout: the prompt {text[:80]!r} names no task; build the dataset with "
                         "TRLRollout.dataset() (prompts start '[task <id> seed <n>]')")
    return match["task"], int(match["seed"])


class _Stopped(BaseException):
    """The trainer asked for the reward before the episode ended: the episode stops there."""


class _ToolAgent(BasePolicy):
    """The acting side of a tool rollout: each step it hands the observation to the trainer's
    tool loop and waits for the command the model calls ``act`` with."""

    reset_options = {"admissible_commands": True}

    def __init__(self, commands: queue.Queue[Any], events: queue.Queue[Any]) -> None:
        super().__init__()
        self.commands, self.events = commands, events

    def act(self, observation: str, info: Mapping[str, Any]) -> str:
        self.events.put(("observation", observation, dict(info)))
        command = self.commands.get()
        if command is _STOP:
            raise _Stopped
        self.record_step(response=str(command))
        return str(command)


_STOP = object()
#: The longest a tool call waits for the environment's answer (an engine has its own watchdog).
TOOL_WAIT_S = 600.0


class EnvTools:
    """An ap-gym env as a TRL ``environment_factory`` object: ``reset`` starts a task and
    returns its first observation (as the evaluation agent lists it), ``act`` (the one tool)
    sends a command, ``get_reward`` scores the rollout (the final score over ``max_score``).

    The episode is played by the evaluation stepper (:func:`~ap_gym.rollout.run_episode`,
    in a thread of its own) with an agent whose every command comes from the model's ``act``
    calls, so the step limit, the infrastructure-versus-task split and the record are the
    stepper's. An engine that dies mid-episode makes the rollout an infrastructure failure:
    the pending and every later ``act`` raise (TRL's tool loop shows the model the error),
    and ``get_reward`` returns ``None`` with a warning saying why: TRL reads ``None`` as NaN
    and leaves the rollout unscored. It is never scored 0 (a task failure it was not).

    TRL calls the factory with no arguments: pass ``EnvTools.factory(env_id, ...)``. The
    dataset's columns reach ``reset`` as keywords: ``task_id`` and ``seed`` pick the task
    (:meth:`dataset` writes such rows, whose prompt is the evaluation agent's system prompt).
    """

    def __init__(self, env_id: str, agent: AgentConfig | Mapping[str, Any] | None = None, **env_kwargs: Any) -> None:
        self._env = gym.make(env_id, **env_kwargs)
        self._prompt = PromptBuilder(AgentConfig.coerce(agent))
        self._info: dict[str, Any] = {}
        self._commands: queue.Queue[Any] = queue.Queue()
        self._events: queue.Queue[Any] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._episode: Episode | None = None
        self._broken: str | None = None
        self._done = False

    @classmethod
    def factory(cls, env_id: str, agent: AgentConfig | Mapping[str, Any] | None = None,
                **env_kwargs: Any) -> Callable[[], EnvTools]:
        return lambda: cls(env_id, agent, **env_kwargs)

    @classmethod
    def dataset(cls, env_id: str, split: str = "train", *, seeds: Sequence[int] = (0,),
                tasks: Sequence[str] | None = None, agent: AgentConfig | Mapping[str, Any] | None = None,
                **env_kwargs: Any) -> list[dict[str, Any]]:
        """Conversational rows for ``GRPOTrainer(environment_factory=...)``: the acting system
        prompt with the task's instruction and an empty user turn (TRL appends what
        ``reset`` returns: the first observation), and ``task_id`` and ``seed`` columns.
        (A class method: TRL offers every public method of an instance as a tool.)"""
        tools = cls(env_id, agent, **env_kwargs)
        rows = []
        try:
            for seed in seeds:
                for task in _tasks(tools._env, split, tasks):
                    _, info = tools._env.reset(seed=int(seed), options={"task_id": task})
                    tools._prompt.start(str(info.get("instruction", "")))
                    rows.append({"prompt": [{"role": "system", "content": tools._prompt.system},
                                            {"role": "user", "content": ""}],
                                 "task_id": task, "seed": int(seed)})
        finally:
            tools._env.close()
        return rows

    def reset(self, **kwargs: Any) -> str:
        """Start the row's task (``task_id``, ``seed`` columns); the first observation."""
        seed = kwargs.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int | float) or seed != int(seed)):
            raise ValueError(f"EnvTools.reset: seed is a whole number, not {seed!r} (the dataset's seed column)")
        self._stop()
        task = str(kwargs["task_id"]) if kwargs.get("task_id") else None
        self._commands, self._events = queue.Queue(), queue.Queue()
        self._episode, self._broken, self._done, self._info = None, None, False, {}
        agent = _ToolAgent(self._commands, self._events)

        def play() -> None:
            try:
                self._events.put(("end", run_episode(self._env, agent.eval(), task_id=task,
                                                     seed=int(seed) if seed is not None else None)))
            except _Stopped:
                self._events.put(("stopped", None))
            except BaseException as e:  # the trainer hears of it at its next call
                self._events.put(("error", e))

        self._thread = threading.Thread(target=play, name="ap-gym-env-tools", daemon=True)
        self._thread.start()
        event = self._next()
        if event[0] == "observation":
            _, obs, self._info = event
            self._prompt.start(str(self._info.get("instruction", "")))
            return self._prompt.user_turn(obs, self._info.get("admissible_commands"))
        return f"[the environment failed to start the task: {self._broken}]"

    def act(self, command: str) -> str:
        """Send one command to the text environment and read what happens.

        Args:
            command: the command, for example "go north" or "take key".

        Returns:
            What the environment answers, with the commands it accepts next.
        """
        if self._broken is not None:
            raise InfrastructureError(f"the environment failed ({self._broken}); this rollout will not be scored")
        if self._done:
            return "The episode has ended; no more commands are taken."
        self._commands.put(str(command))
        event = self._next()
        if event[0] == "observation":
            _, obs, self._info = event
            return self._prompt.user_turn(obs, self._info.get("admissible_commands"))
        if self._broken is not None:
            raise InfrastructureError(f"the environment failed ({self._broken}); this rollout will not be scored")
        last = self._episode.steps[-1].observation if self._episode and self._episode.steps else ""
        return self._prompt.user_turn(last, None) + " [the episode has ended]"

    def get_reward(self) -> float | None:
        """The rollout's final score over ``max_score``; ``None`` (unscored, with a warning)
        when the environment broke it."""
        self._stop()
        if self._broken is not None:
            log.warning("EnvTools: the rollout was broken by the infrastructure (%s); it is left unscored (None), "
                        "never scored as a failed task", self._broken)
            return None
        if self._episode is not None:
            score, max_score = self._episode.score, self._episode.max_score
        else:
            score, max_score = self._info.get("score"), self._info.get("max_score")
        return float(score or 0.0) / float(max_score or 1.0)

    def _next(self) -> tuple[Any, ...]:
        """The episode thread's next event (an observation, its end, an error)."""
        try:
            event: tuple[Any, ...] = self._events.get(timeout=TOOL_WAIT_S)
        except queue.Empty:
            event = ("error", InfrastructureError(f"no answer from the environment in {TOOL_WAIT_S:g} s"))
        if event[0] == "end":
            self._episode, self._done = event[1], True
            if event[1].infrastructure_failure:
                self._broken = str(event[1].error)
        elif event[0] == "error":
            self._done, self._broken = True, f"{type(event[1]).__name__}: {event[1]}"
        elif event[0] == "stopped":
            self._done = True
        return event

    def _stop(self) -> None:
        """End an episode the trainer left before its end (the score reached is kept)."""
        if self._thread is not None and self._thread.is_alive():
            if not self._done:
                self._commands.put(_STOP)
                while self._next()[0] == "observation":  # pragma: no cover (the stop is read at the next act)
                    self._commands.put(_STOP)
            self._thread.join(timeout=TOOL_WAIT_S)
        self._thread = None
