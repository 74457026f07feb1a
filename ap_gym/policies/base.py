"""What every policy shares: train/eval mode, per-episode usage and step traces."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ap_gym.policies.registry import spec_of
from ap_gym.types import Episode, PolicyTrace, StepTrace, Usage, UsageMeter

__all__ = ["BasePolicy"]


class BasePolicy:
    """A convenient base for :class:`~ap_gym.types.Policy` implementations.

    Subclasses implement ``act`` (and usually ``_begin``/``end``); the base keeps the
    per-episode :class:`UsageMeter`, the step traces and the decision record
    (``self.decisions``) that the rollout loop merges into the Episode.
    """

    #: Reset options this policy needs from the env (merged by the rollout loop).
    reset_options: Mapping[str, Any] = {}

    def __init__(self) -> None:
        self.training = True
        self.meter = UsageMeter()
        self._steps: list[StepTrace] = []
        self.decisions: dict[str, Any] = {}

    def train(self, mode: bool = True) -> BasePolicy:
        self.training = mode
        return self

    def eval(self) -> BasePolicy:
        return self.train(False)

    def begin(self, observation: str, info: Mapping[str, Any]) -> None:
        self.reset_episode()
        self._begin(observation, info)

    def reset_episode(self) -> None:
        """Forget the last episode's usage, steps and decisions."""
        self.meter.reset()
        self._steps = []
        self.decisions = {}

    def _begin(self, observation: str, info: Mapping[str, Any]) -> None:
        """Per-episode set-up; the default does nothing."""

    def act(self, observation: str, info: Mapping[str, Any]) -> str:
        raise NotImplementedError

    def record_step(self, prompt: str | None = None, response: str | None = None, parse_failure: bool = False,
                    reasoning: str | None = None, *, candidates: tuple[tuple[str, float], ...] | None = None,
                    reduction: str | None = None, logprob: float | None = None,
                    messages: Sequence[Mapping[str, str]] | None = None,
                    masked_logprob: float | None = None) -> None:
        self._steps.append(StepTrace(prompt, response, parse_failure, reasoning, candidates, reduction, logprob,
                                     tuple(dict(m) for m in messages) if messages is not None else None,
                                     masked_logprob))

    def trace(self) -> PolicyTrace:
        return PolicyTrace(self.meter.snapshot(), tuple(self._steps), dict(self.decisions))

    def end(self, episode: Episode) -> Usage | None:
        return None

    def spec(self) -> dict[str, Any]:
        """Name and arguments that re-create this policy (recorded by the registry)."""
        return spec_of(self)
