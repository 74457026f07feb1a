"""The backbone interface: what a policy may ask of a language model.

A backbone generates chat completions and scores candidate continuations. Everything a
policy needs for accounting (prompt and completion tokens) comes back on the
:class:`Completion`; the policy records the call under its purpose.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = ["Backbone", "Completion", "GenerationConfig", "Message", "Reduction"]

#: A chat message: ``{"role": "system"|"user"|"assistant", "content": str}``.
Message = Mapping[str, str]
Reduction = Literal["sum", "mean"]


@dataclass(frozen=True)
class GenerationConfig:
    """Decoding options, passed whole through every layer.

    Attributes:
        max_new_tokens: hard cap on the completion; an endless answer is cut here.
        temperature: 0 means greedy (the default, for reproducible runs).
        top_p: nucleus sampling mass when sampling.
        stop: strings that end the completion (not included in the text).
        seed: seeds sampling; ignored when greedy.
    """

    max_new_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"max_new_tokens": self.max_new_tokens, "temperature": self.temperature,
                "top_p": self.top_p, "stop": list(self.stop), "seed": self.seed}


@dataclass(frozen=True)
class Completion:
    """One generated answer and what it cost."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    finish_reason: str = "stop"
    extra: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class Backbone(Protocol):
    """A language model behind ap-gym's policies.

    ``identity`` names the model exactly (saved with results). ``generate`` and
    ``generate_batch`` answer chat messages; ``score`` returns the log-likelihood of
    each candidate as the assistant's reply, so a policy can choose among admissible
    commands instead of generating freely.
    """

    identity: str

    def generate(self, messages: Sequence[Message], config: GenerationConfig = ...) -> Completion: ...

    def generate_batch(
        self, batch: Sequence[Sequence[Message]], config: GenerationConfig = ...
    ) -> list[Completion]: ...

    def score(
        self, messages: Sequence[Message], candidates: Sequence[str], reduction: Reduction = "sum"
    ) -> list[float]: ...
