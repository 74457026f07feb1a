"""The backbone interface: what a policy may ask of a language model.

A backbone generates chat completions and scores candidate continuations. Everything a
policy needs for accounting comes back with the answer: tokens on the
:class:`Completion` of ``generate``, and on the :class:`Scores` of ``score``; the policy
records the call under its purpose. Nothing is fetched from the backbone afterwards, so
a backbone shared by threads cannot mix up two callers' counts.

Optional abilities are small runtime-checkable protocols, checked with ``isinstance``:
:class:`BatchScorer` (several prompts' candidates in one pass, for lanes) and
:class:`EpisodeCache` (a KV cache kept within an episode, dropped when one begins).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import Field

from ap_gym.options import Options
from ap_gym.seeding import derived_seed

__all__ = ["Backbone", "BatchScorer", "Best", "Choice", "CommandActor", "Completion", "ConstrainedChooser",
           "EpisodeCache", "ExactSearcher",
           "GenerationConfig", "Message", "Reduction", "Scores", "ServedBackbone"]

#: A chat message: ``{"role": "system"|"user"|"assistant", "content": str}``.
Message = Mapping[str, str]
Reduction = Literal["sum", "mean"]


class GenerationConfig(Options):
    """Decoding options, passed whole through every layer.

    Attributes:
        max_new_tokens: hard cap on the completion; an endless answer is cut here.
        temperature: 0 means greedy (the default, for reproducible runs).
        top_p: nucleus sampling mass when sampling.
        stop: strings that end the completion (not included in the text).
        seed: seeds sampling; ignored when greedy.
    """

    max_new_tokens: int = Field(default=64, ge=1)
    temperature: float = Field(default=0.0, ge=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    stop: tuple[str, ...] = ()
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def seeded(self, run_seed: int | None, *keys: object) -> GenerationConfig:
        """This config with a sampling seed derived from the run's seed and ``keys`` (the
        task, the step, the prompt), when it samples and names no seed of its own.

        Why: with ``temperature > 0`` the run's seed must reach sampling, or three seeds
        are three draws of nobody's choosing; derived per call, so a call's sample does
        not depend on which calls ran before it (resume, workers). Greedy configs and
        configs with their own seed are returned as they are.
        """
        if self.greedy or self.seed is not None or run_seed is None:
            return self
        return self.model_copy(update={"seed": derived_seed(run_seed, *keys, bits=31)})


@dataclass(frozen=True)
class Completion:
    """One generated answer and what it cost."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    finish_reason: str = "stop"
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Scores:
    """The log-likelihood of each candidate, and what computing them cost.

    Attributes:
        values: one score per candidate, in the candidates' order.
        prompt_tokens: the prompt's tokens (computed or reused from a cache).
        candidate_tokens: the candidates' tokens, all together.
    """

    values: tuple[float, ...]
    prompt_tokens: int = 0
    candidate_tokens: int = 0

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, i: int) -> float:
        return self.values[i]

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.candidate_tokens


@runtime_checkable
class Backbone(Protocol):
    """A language model behind ap-gym's policies.

    ``identity`` names the model exactly (saved with results). ``generate`` and
    ``generate_batch`` answer chat messages; ``score`` returns the log-likelihood of
    each candidate as the assistant's reply, so a policy can choose among admissible
    commands instead of generating freely. ``describe`` says what the model is and how
    it runs (saved with results).
    """

    identity: str

    def generate(self, messages: Sequence[Message], config: GenerationConfig = ...) -> Completion: ...

    def generate_batch(
        self, batch: Sequence[Sequence[Message]], config: GenerationConfig = ...
    ) -> list[Completion]: ...

    def score(
        self, messages: Sequence[Message], candidates: Sequence[str], reduction: Reduction = "sum"
    ) -> Scores: ...

    def describe(self) -> dict[str, Any]: ...


#: One scoring request of a batch: (messages, candidates, reduction).
ScoreRequest = tuple[Sequence[Message], Sequence[str], Reduction]


@runtime_checkable
class BatchScorer(Protocol):
    """Scores several prompts' candidates in one forward pass (episodes in lock-step).

    ``keys`` name a KV cache per request (a lane), kept across calls.
    """

    def score_batch(self, requests: Sequence[ScoreRequest], *, keys: Sequence[Any] | None = None) -> list[Scores]: ...


@runtime_checkable
class EpisodeCache(Protocol):
    """A backbone that reuses its KV cache within an episode; ``reset_cache`` forgets it, so
    every episode computes the same numbers whichever episodes ran before it."""

    def reset_cache(self) -> None: ...


@dataclass(frozen=True)
class Choice:
    """The command a constrained generation chose and what the call cost.

    ``masked_logprob`` is the server's log-probability of the tokens it generated, taken
    after the grammar's mask (renormalised over the allowed tokens): not the model's
    log-likelihood of the command, and never stored as one."""

    text: str
    masked_logprob: float | None
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True)
class Best:
    """The exact argmax of the candidates' summed log-likelihood, found without scoring every
    candidate (a search over their token trie).

    Attributes:
        index: the best candidate's position.
        scored: ``(index, summed log-likelihood)`` of every candidate whose whole
            log-likelihood the search computed, the best among them; true values only.
        prompt_tokens: the prompt's tokens.
        candidate_tokens: the candidate tokens whose log-probability was read.
        requests: the requests (or forward passes) the search took.
    """

    index: int
    scored: tuple[tuple[int, float], ...]
    prompt_tokens: int = 0
    candidate_tokens: int = 0
    requests: int = 0

    @property
    def logprob(self) -> float:
        return dict(self.scored)[self.index]


@runtime_checkable
class ExactSearcher(Protocol):
    """A backbone that finds the exact argmax of the candidates' summed log-likelihood by a
    search (a served model whose log-probabilities of named tokens come over its prefix
    cache); ``supports_search`` probes once. The same decision as scoring every candidate."""

    def supports_search(self) -> bool: ...

    def best(self, messages: Sequence[Message], candidates: Sequence[str]) -> Best: ...


@runtime_checkable
class ConstrainedChooser(Protocol):
    """A backbone that can constrain one generation to a list of commands (a server's
    structured outputs: vLLM's ``choice``). One request, over the server's prefix cache,
    instead of a log-likelihood per candidate; ``supports_choice`` probes once."""

    def supports_choice(self) -> bool: ...

    def choose(self, messages: Sequence[Message], candidates: Sequence[str]) -> Choice: ...


@runtime_checkable
class CommandActor(Protocol):
    """A backbone that is handed the step's admissible commands with its prompt (the scripted
    actor of the studies, an instrument): it acts on the commands it is given and never
    reads them back out of the prompt's text."""

    def act_on(self, messages: Sequence[Message], candidates: Sequence[str]) -> Completion: ...


@runtime_checkable
class ServedBackbone(Protocol):
    """A backbone behind a server: ``check`` says at the start of a run whether the model is
    served and, when ``scoring``, whether candidates can be scored, raising a clear
    :class:`~ap_gym.errors.BackboneError` otherwise."""

    def check(self, *, scoring: bool) -> dict[str, Any]: ...
