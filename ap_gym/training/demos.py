"""Expert demonstrations, seen through the prompt the agent is evaluated with.

Supervised fine-tuning teaches a model to answer each state's prompt with the expert's
command; it only helps if that prompt is the one ``ap-gym run`` will show the model. So a
demonstration is not read off a file of plans: the expert's plan (the env's own
walkthrough: ALFWorld's planner, TextWorld's walkthrough, ScienceWorld's gold path) is
played through :func:`~ap_gym.rollout.run_episode` by :class:`Demonstrator`, the acting
agent itself (:class:`~ap_gym.policies.react.ReActAgent` and its
:class:`~ap_gym.policies.prompting.PromptBuilder`) whose backbone is the plan. Each step
keeps the exact chat the agent built, the admissible commands it was offered and the
expert's command. Only episodes the plan won are kept: a plan that fails teaches a failure.

:class:`GuidedDemonstrator` does the same inside a memory design: the design retrieves its
records and writes its guidance (with a model of the trainer's choosing) into the system
prompt as it would at evaluation, and the expert's plan acts under it. A model fine-tuned on
those demonstrations has seen its design's guidance in training, so a memory design that
hurts it cannot be blamed on prompts it never saw.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym

from ap_gym.backbones.base import Completion, GenerationConfig, Message, Reduction, Scores
from ap_gym.policies.react import AgentConfig, ReActAgent
from ap_gym.rollout import run_episode
from ap_gym.types import Episode, PolicyTrace, Usage

__all__ = ["Demonstration", "Demonstrator", "ExpertPlan", "GuidedDemonstrator", "demonstrations",
           "load_demonstrations", "save_demonstrations"]


@dataclass(frozen=True)
class Demonstration:
    """One expert step as the agent saw it.

    Attributes:
        task_id, family: the task and its family.
        messages: the exact chat the acting agent built for this state.
        candidates: the admissible commands it was offered (what ``choose`` ranks).
        command: the expert's command.
    """

    task_id: str
    family: str
    messages: tuple[Message, ...]
    candidates: tuple[str, ...]
    command: str

    @property
    def chosen(self) -> int | None:
        """The expert command's index among the candidates (``None``: not offered)."""
        return self.candidates.index(self.command) if self.command in self.candidates else None

    def to_dict(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "family": self.family, "messages": [dict(m) for m in self.messages],
                "candidates": list(self.candidates), "command": self.command}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Demonstration:
        return cls(str(d["task_id"]), str(d["family"]),
                   tuple({"role": str(m["role"]), "content": str(m["content"])} for m in d["messages"]),
                   tuple(str(c) for c in d["candidates"]), str(d["command"]))


class ExpertPlan:
    """The demonstrator's backbone: it answers each prompt with the plan's next command
    (a :class:`~ap_gym.backbones.base.CommandActor`: it is handed the admissible commands),
    and keeps what it was shown."""

    identity = "expert plan"

    def __init__(self) -> None:
        self.plan: list[str] = []
        self.shown: list[tuple[tuple[Message, ...], tuple[str, ...], str]] = []

    def act_on(self, messages: Sequence[Message], candidates: Sequence[str]) -> Completion:
        command = self.plan.pop(0) if self.plan else "look"
        self.shown.append((tuple(messages), tuple(candidates), command))
        return Completion(command, 0, 0, 0.0)

    def generate(self, messages: Sequence[Message], config: GenerationConfig = GenerationConfig()) -> Completion:
        raise TypeError("the expert plan only acts on the admissible commands it is handed")

    def score(self, messages: Sequence[Message], candidates: Sequence[str], reduction: Reduction = "sum") -> Scores:
        raise TypeError("the expert plan scores nothing")

    def describe(self) -> dict[str, Any]:
        return {"kind": "expert plan"}


class Demonstrator(ReActAgent):
    """The acting agent with the env's walkthrough as its backbone (see the module docstring).

    Args:
        agent: the evaluation agent's options (history window, observation cut, listing):
            the prompts are the ones that agent would see on the expert's path.
    """

    def __init__(self, agent: AgentConfig | Mapping[str, Any] | None = None) -> None:
        config = AgentConfig.coerce(agent).replace(action_mode="generate")  # the plan answers through act_on
        self.plan_backbone = ExpertPlan()
        super().__init__(self.plan_backbone, config)  # type: ignore[arg-type]  # the plan acts on commands; it neither scores nor generates
        self.reset_options = {"admissible_commands": True, "walkthrough": True}

    def _begin(self, observation: str, info: Mapping[str, Any]) -> None:
        plan = info.get("walkthrough")
        if plan is None:
            raise ValueError("this env gives no walkthrough (reset option walkthrough=True): it has no expert plan "
                             "to learn from")
        self.plan_backbone.plan = list(plan)
        self.plan_backbone.shown = []
        self.start(observation, info)


class GuidedDemonstrator:
    """A memory policy whose acting agent is the expert's plan (see the module docstring).

    Args:
        policy: a memory policy built with an :class:`ExpertPlan` as its backbone (the
            actor: give the agent ``action_mode: generate``, so the plan is handed the
            admissible commands) and the model that writes its guidance as
            ``synthesis_backbone``.
        plan: that :class:`ExpertPlan`.
    """

    def __init__(self, policy: Any, plan: ExpertPlan) -> None:
        self.policy = policy
        self.plan_backbone = plan

    @property
    def training(self) -> bool:
        return bool(self.policy.training)

    @training.setter
    def training(self, mode: bool) -> None:
        self.policy.train(mode)

    @property
    def reset_options(self) -> Mapping[str, Any]:
        return {**dict(self.policy.reset_options), "admissible_commands": True, "walkthrough": True}

    def train(self, mode: bool = True) -> GuidedDemonstrator:
        self.policy.train(mode)
        return self

    def eval(self) -> GuidedDemonstrator:
        return self.train(False)

    def begin(self, observation: str, info: Mapping[str, Any]) -> None:
        plan = info.get("walkthrough")
        if plan is None:
            raise ValueError("this env gives no walkthrough: it has no expert plan to learn from")
        self.plan_backbone.plan, self.plan_backbone.shown = list(plan), []
        self.policy.begin(observation, info)

    def act(self, observation: str, info: Mapping[str, Any]) -> str:
        return str(self.policy.act(observation, info))

    def trace(self) -> PolicyTrace:
        trace: PolicyTrace = self.policy.trace()
        return trace

    def end(self, episode: Episode) -> Usage | None:
        usage: Usage | None = self.policy.end(episode)
        return usage


def demonstrations(env: gym.Env[str, str], task_ids: Iterable[str], *, agent: AgentConfig | Mapping[str, Any] | None
                   = None, max_steps: int | None = None, progress: Callable[[int, int], None] | None = None,
                   player: Demonstrator | GuidedDemonstrator | None = None, training: bool = False
                   ) -> tuple[list[Demonstration], dict[str, int]]:
    """The expert's steps on ``task_ids`` as the agent with options ``agent`` sees them (or as
    ``player`` shows them: a :class:`GuidedDemonstrator`, whose memory learns from each
    episode when ``training``).

    Returns:
        The demonstrations of every task whose plan won, in task order, and a count of
        ``tasks``, ``won``, ``failed`` (plans that did not win: left out) and
        ``infrastructure`` (engine failures: left out).
    """
    ids = list(task_ids)
    demonstrator = player if player is not None else Demonstrator(agent)
    demonstrator.train(training)
    out: list[Demonstration] = []
    counts = {"tasks": len(ids), "won": 0, "failed": 0, "infrastructure": 0}
    for k, task_id in enumerate(ids):
        episode = run_episode(env, demonstrator, task_id=task_id, seed=0, max_steps=max_steps)
        if episode.infrastructure_failure:
            counts["infrastructure"] += 1
        elif not episode.success:
            counts["failed"] += 1
        else:
            counts["won"] += 1
            shown = demonstrator.plan_backbone.shown[: len(episode.steps)]
            out += [Demonstration(task_id, episode.task_family, m, c, step.action)
                    for (m, c, _), step in zip(shown, episode.steps, strict=True)]
        if progress is not None:
            progress(k + 1, len(ids))
    return out, counts


def save_demonstrations(path: str | Path, demos: Sequence[Demonstration], counts: Mapping[str, int]) -> None:
    """One JSON line per demonstration after a header line with the counts (written whole,
    then renamed into place)."""
    from ap_gym.paths import atomic_write_text

    lines = [json.dumps({"format": "ap-gym-demonstrations/1", "counts": dict(counts)})]
    lines += [json.dumps(d.to_dict()) for d in demos]
    atomic_write_text(Path(path), "\n".join(lines) + "\n")


def load_demonstrations(path: str | Path) -> tuple[list[Demonstration], dict[str, int]] | None:
    """What :func:`save_demonstrations` wrote, or ``None`` when the file is missing or damaged."""
    try:
        lines: Iterator[str] = iter(Path(path).read_text(encoding="utf-8").splitlines())
        header = json.loads(next(lines))
        if header.get("format") != "ap-gym-demonstrations/1":
            return None
        return [Demonstration.from_dict(json.loads(line)) for line in lines if line.strip()], dict(header["counts"])
    except (OSError, ValueError, KeyError, TypeError, StopIteration, UnicodeDecodeError):
        return None
