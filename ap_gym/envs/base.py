"""The text-environment contract every ap-gym benchmark follows.

:class:`TextEnv` is a Gymnasium env whose observations and actions are printable text.
Subclasses implement three hooks (``_task_ids``, ``_start``, ``_advance``); the base
class owns everything the contract fixes, so that each benchmark says only what is
specific to its engine:

* ``reset(*, seed=None, options=None)``: ``options={"task_id": ...}`` picks the task,
  ``options={"split": "test"}`` the split to draw from; a seed alone picks a task
  deterministically from the env's split.
* ``info`` always carries ``task_id``, ``task_family``, ``instruction``, ``score``,
  ``max_score``, ``success``, ``won``, ``lost`` and, when asked for, ``admissible_commands``;
  after a step, ``action_valid`` (whether the engine took the command as one it can carry
  out) and ``action_valid_by``, which says how that was decided: ``"engine"`` (the env's
  own verdict), ``"admissible"`` (the command was, up to case and spacing, one of the
  commands the state listed: verl-agent's ``is_action_valid``), or ``"refusal"`` (no list
  was computed; the engine's reply was not one of its refusals, ``refused``).
* A win or a loss terminates; the step limit (Gymnasium's ``TimeLimit``, 50 by default
  through registration) truncates, and a truncated episode is a failure.
* An engine crash raises :class:`~ap_gym.errors.EnvInfrastructureError`; the next
  ``reset`` starts the engine again.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import gymnasium as gym
from gymnasium import spaces

from ap_gym.envs.engine_process import EngineProcess, EngineTiming
from ap_gym.envs.text_space import TextSpace
from ap_gym.errors import EnvInfrastructureError, UnknownTaskError
from ap_gym.text import FAILED_FEEDBACK, Grammar, search_folded
from ap_gym.types import WorldFacts

__all__ = [
    "ABILITIES",
    "MAX_TEXT_LENGTH",
    "PRINTABLE",
    "SPLITS",
    "StartResult",
    "StepResult",
    "TextEnv",
    "sanitize_text",
    "text_env",
    "text_space",
]

#: What an env can declare it can do, beyond the contract: ``walkthrough`` (a winning
#: command sequence per task, :meth:`TextEnv.walkthrough`) and ``grammar`` (its command
#: grammar, :attr:`TextEnv.grammar`, which the audit checks abstractions against).
ABILITIES = ("walkthrough", "grammar")


#: Every printable ASCII character including whitespace. Gymnasium's default Text
#: charset is 62 alphanumerics, in which "go north" is not a valid action.
PRINTABLE = string.printable
#: Long enough for any observation of the shipped benchmarks; longer text is cut.
MAX_TEXT_LENGTH = 65_536
SPLITS = ("train", "test")
_PRINTABLE_SET = frozenset(PRINTABLE)
_UNPRINTABLE = re.compile(f"[^{re.escape(PRINTABLE)}]")


def text_space(max_length: int = MAX_TEXT_LENGTH) -> spaces.Text:
    """A Text space of printable characters that accepts the empty string, and that
    Gymnasium's async vector env can share between processes (:mod:`~ap_gym.envs.text_space`)."""
    return TextSpace(max_length=max_length, min_length=0, charset=PRINTABLE)


def text_env(env: gym.Env[Any, Any]) -> TextEnv:
    """The ap-gym text env under ``env``'s wrappers (its task ids, families, suite), or a
    ``TypeError`` that names what it is instead."""
    inner = env.unwrapped
    if not isinstance(inner, TextEnv):
        raise TypeError(f"{env} is not an ap-gym text env ({type(inner).__name__}): it has no task ids or suite")
    return inner


def sanitize_text(text: str, max_length: int = MAX_TEXT_LENGTH) -> str:
    """Map text into the printable charset so that it always lies in the space.

    Accents are folded (``é`` -> ``e``), typographic quotes and dashes become ASCII,
    anything else unprintable becomes a space. Nothing is dropped silently except
    beyond ``max_length``.
    """
    if _UNPRINTABLE.search(text) is None:  # the common case, at C speed (a per-character loop cost ~10 µs a step)
        return text[:max_length]
    folded = unicodedata.normalize("NFKD", text)
    table = {"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2013": "-", "\u2014": "-"}
    out = []
    for c in folded:
        c = table.get(c, c)
        if c in _PRINTABLE_SET:
            out.append(c)
        elif unicodedata.combining(c):
            continue
        else:
            out.append(" ")
    return "".join(out)[:max_length]


def _checked_score(score: Any, benchmark: str, where: str) -> None:
    """A score must be a finite number: anything else is the engine's fault, not the agent's."""
    import math

    if score is None:
        return
    if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
        raise EnvInfrastructureError(
            f"{benchmark}: the engine reported the score {score!r} on {where}; a score must be a finite number. "
            "The episode is recorded as an infrastructure failure; fix the env's _start/_advance.")


@dataclass(frozen=True)
class StartResult:
    """What a benchmark reports when a task starts."""

    observation: str
    instruction: str
    score: float = 0.0
    max_score: float | None = None
    admissible_commands: Sequence[str] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StepResult:
    """What a benchmark reports after one action."""

    observation: str
    score: float
    won: bool = False
    lost: bool = False
    admissible_commands: Sequence[str] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    #: the engine's own verdict on the command, where it has one (``info["action_valid"]``)
    valid: bool | None = None


def _command(text: str) -> str:
    return " ".join(text.lower().split())


class TextEnv(gym.Env[str, str]):
    """Base class of ap-gym's text environments.

    Args:
        split: the split that ``reset`` draws from when no task id is given.
        admissible_commands: compute the engine's valid actions at every step. Off by
            default where the engine makes them expensive; ``reset(options=
            {"admissible_commands": True})`` turns it on for one episode.
        render_mode: ``"ansi"`` returns the last observation, ``"human"`` prints it.
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi", "human"], "render_fps": 4}
    #: The benchmark's name, used in task listings and errors.
    benchmark: ClassVar[str] = "text"
    #: What stands in for the published benchmark, when something does (a replica, a
    #: generated suite); every report table of its results says so. ``None``: the real one.
    stand_in: str | None = None
    #: The benchmark's commands: their verbs and shape. The audit flags an abstraction that
    #: recommends a command outside it; ``None`` (the default): no grammar check, and the
    #: report says so for this benchmark.
    grammar: ClassVar[Grammar | None] = None
    #: the engine's words for a command it would not carry out (``info["action_valid"]``
    #: when the state listed no admissible commands); the default is the feedback every
    #: benchmark shares (:data:`ap_gym.text.FAILED_FEEDBACK`), which also reads a command
    #: that ran and did nothing as refused.
    refused: ClassVar[re.Pattern[str]] = FAILED_FEEDBACK

    def __init__(
        self,
        *,
        split: str = "train",
        admissible_commands: bool = False,
        render_mode: str | None = None,
    ) -> None:
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, not {split!r}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}")
        if not isinstance(admissible_commands, bool):  # "no" is truthy: it would turn them on
            raise ValueError(f"admissible_commands is True or False, not {admissible_commands!r}")
        self.split = split
        self.render_mode = render_mode
        self.default_admissible = admissible_commands
        self.observation_space = text_space()
        self.action_space = text_space(max_length=1024)
        self._task_id: str | None = None
        self._info: dict[str, Any] = {}
        self._last_obs = ""
        self._done = False

    # ----------------------------------------------------------------- hooks
    def _task_ids(self, split: str) -> list[str]:
        raise NotImplementedError

    def task_family(self, task_id: str) -> str:
        """The task's type (ScienceWorld's task name, ALFWorld's task type, ...)."""
        raise NotImplementedError

    def _start(self, task_id: str, options: Mapping[str, Any]) -> StartResult:
        raise NotImplementedError

    def _advance(self, action: str) -> StepResult:
        raise NotImplementedError

    # ------------------------------------------------------------- abilities
    def world_facts(self, task_id: str) -> WorldFacts | None:
        """What the engine knows of ``task_id``'s world at its start (where things are, what
        actions need, a winning plan), for the audit's grounded labeller; ``None`` (the
        default) when the engine cannot say. The protocol records it for each training task
        a setting plays (``worlds.jsonl``). Must not disturb an episode in progress."""
        return None

    def walkthrough(self, task_id: str) -> list[str]:
        """A command sequence that wins ``task_id`` (an env that can give one overrides this).

        ``reset(options={"walkthrough": True})`` puts it in ``info["walkthrough"]``, which is
        how the walkthrough policy reads it. An engine that can only say so while a task is
        loaded may end the episode in progress to answer.
        """
        raise NotImplementedError(f"{self.benchmark} gives no walkthrough: a policy that needs one (walkthrough) "
                                  "cannot play it")

    @classmethod
    def abilities(cls) -> frozenset[str]:
        """What this env can do beyond the contract (see :data:`ABILITIES`)."""
        out = set()
        if cls.walkthrough is not TextEnv.walkthrough:
            out.add("walkthrough")
        if cls.grammar is not None:
            out.add("grammar")
        return frozenset(out)

    def prepare_suite(self, workers: int = 1, progress: Callable[[int, int], None] | None = None) -> int:
        """Make everything the suite's tasks need ahead of time (generated games, task
        lists), ``workers`` at a time, so that the first episodes do not pay for it;
        ``progress(done, total)`` is called as items finish. Returns how many items were
        made (0 when the cache already held them). The default has nothing to prepare."""
        return 0

    # ---------------------------------------------------------------- public
    def task_ids(self, split: str | None = None) -> list[str]:
        """The deterministic, ordered task ids of ``split`` (default: the env's split)."""
        split = self.split if split is None else split
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, not {split!r}")
        return list(self._task_ids(split))

    def has_task(self, task_id: str) -> bool:
        return any(task_id in self._task_ids(s) for s in SPLITS)

    @property
    def task_id(self) -> str | None:
        """The task of the episode in progress."""
        return self._task_id

    def engine_timings(self) -> Mapping[str, EngineTiming]:
        """Where this env's time went, per call into an engine process of its own: the
        engine's seconds and the caller's wait (empty for an env whose engine runs
        elsewhere: in process, or a JVM)."""
        engine = getattr(self, "_engine", None)
        return engine.timings() if isinstance(engine, EngineProcess) else {}

    def engine_round_trip_s(self) -> float | None:
        """One round trip to this env's engine process that does no engine work (``None``
        without one): what the boundary costs a step, apart from the engine's own time."""
        engine = getattr(self, "_engine", None)
        return engine.ping() if isinstance(engine, EngineProcess) else None

    def _abandon(self) -> None:
        """The engine lost the episode in progress: ``step`` now asks for a ``reset``."""
        self._task_id = None

    def close(self) -> None:
        """Closed for good: a later ``reset`` or ``step`` is refused (an engine would otherwise
        start again, unseen, in an env its owner has let go of)."""
        self._closed = True
        super().close()

    def _refuse_closed(self) -> None:
        if getattr(self, "_closed", False):
            raise gym.error.ClosedEnvironmentError(f"{self.benchmark}: this env was closed; make a new one "
                                                   "(gym.make) to play again")

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        self._refuse_closed()
        super().reset(seed=seed)
        if options is not None and not isinstance(options, Mapping):
            raise TypeError(f"{self.benchmark}: reset options are a dict such as {{'task_id': ...}}, not "
                            f"{type(options).__name__} {options!r}")
        options = dict(options or {})
        split = options.get("split", self.split)
        task_id = options.get("task_id")
        if task_id is None:
            ids = self.task_ids(split)
            if not ids:
                raise UnknownTaskError(f"{self.benchmark}: split {split!r} holds no tasks")
            task_id = ids[int(self.np_random.integers(len(ids)))]
        elif not isinstance(task_id, str) or not self.has_task(task_id):
            examples = ", ".join(self.task_ids("test")[:3])
            raise UnknownTaskError(
                f"{self.benchmark}: unknown task id {task_id!r}. "
                f"List valid ids with env.unwrapped.task_ids('train'|'test') "
                f"or `ap-gym list {self.benchmark}` (for example: {examples})."
            )
        admissible = options.get("admissible_commands", self.default_admissible)
        if not isinstance(admissible, bool):
            raise ValueError(f"options['admissible_commands'] is True or False, not {admissible!r}")
        self._admissible = admissible
        self._task_id = None  # not playable until the engine has started
        start = self._start(task_id, options)
        _checked_score(start.score, self.benchmark, "reset")
        self._task_id = task_id
        self._done = False
        self._last_obs = sanitize_text(start.observation)
        self._info = {
            "task_id": task_id,
            "task_family": self.task_family(task_id),
            "instruction": sanitize_text(start.instruction),
            "score": start.score,
            "max_score": start.max_score,
            "won": False,
            "lost": False,
            "success": False,
            **dict(start.extra),
        }
        if start.admissible_commands is not None:
            self._info["admissible_commands"] = [sanitize_text(a) for a in start.admissible_commands]
        if options.get("walkthrough") and "walkthrough" not in self._info:
            self._info["walkthrough"] = list(self.walkthrough(task_id))
        if self.render_mode == "human":
            self.render()
        return self._last_obs, dict(self._info)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self._refuse_closed()
        if self._task_id is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        if self._done:
            raise gym.error.ResetNeeded("the episode has ended; call reset() to start another")
        if not isinstance(action, str):
            raise TypeError(
                f"{self.benchmark}: actions are text; got {type(action).__name__} {action!r}. "
                "Pass a command such as 'look around'."
            )
        action = sanitize_text(action, 1024).strip()
        previous = self._info["score"]
        listed = self._info.get("admissible_commands")
        result = self._advance(action)
        _checked_score(result.score, self.benchmark, f"step {action!r}")
        self._last_obs = sanitize_text(result.observation)
        self._done = result.won or result.lost
        info = {**self._info, **dict(result.extra)}
        info.update(score=result.score, won=result.won, lost=result.lost, success=result.won)
        info["action_valid"], info["action_valid_by"] = self._action_valid(action, listed, result)
        info.pop("admissible_commands", None)
        if result.admissible_commands is not None:
            info["admissible_commands"] = [sanitize_text(a) for a in result.admissible_commands]
        self._info = info
        reward = float(result.score - previous) if previous is not None else float(result.score)
        if self.render_mode == "human":
            self.render()
        return self._last_obs, reward, self._done, False, dict(info)

    def _action_valid(self, action: str, listed: Sequence[str] | None, result: StepResult) -> tuple[bool, str]:
        """Whether the engine took ``action`` as a command it can carry out, and how that
        was decided (the module docstring); an env with a sharper rule overrides this."""
        if result.valid is not None:
            return bool(result.valid), "engine"
        if listed:
            return _command(action) in {_command(c) for c in listed}, "admissible"
        return not search_folded(self.refused, result.observation[:300]), "refusal"

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self._last_obs
        if self.render_mode == "human":
            print(self._last_obs)
        return None
