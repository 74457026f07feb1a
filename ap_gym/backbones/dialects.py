"""What each serving engine offers beyond chat completions, declared in one place.

Every OpenAI-compatible server answers ``/v1/chat/completions``; the rest differs by engine:
whether it tokenizes with the model's chat template (``/tokenize``), how it returns the
log-probabilities of a prompt's tokens (the agent's ``choose`` scores candidates with
them), how it constrains a generation to a list of commands, and whether it reads the
log-probabilities of named next tokens (the exact search). :class:`~ap_gym.backbones.openai.OpenAIBackbone`
keeps the transport (deadlines, retries, sessions) and asks its :class:`Dialect` for the
rest, so a new engine is one subclass here and one :func:`register_dialect`, not branches
inside the backbone.

Two ship:

* ``vllm`` (the default): vLLM's wire format, which ``ap-gym serve`` speaks too. Each
  extension is probed once at the start of a run, since a server may lack some of them
  (``ap-gym serve`` has no choice grammar and no named-token read);
* ``openai``: a plain OpenAI-compatible server (OpenAI's API, llama.cpp's server, Ollama):
  chat completions only. Nothing is probed, so no request goes to a route it lacks, and a
  ``choose`` agent is refused at the start with the modes that work (``generate``, ``react``).

Select one with ``serving: {dialect: openai}`` in a run config (or
``OpenAIBackbone(url, dialect=...)``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from ap_gym.errors import BackboneError

__all__ = ["DIALECTS", "Dialect", "OpenAIDialect", "VLLMDialect", "get_dialect", "register_dialect"]


class Dialect:
    """One engine's extensions of the OpenAI API, and how each is asked and read.

    A subclass sets the class attributes to what its engine offers and overrides the
    payload and reader of each extension it offers; what it does not offer is never
    requested. The readers raise ``KeyError``/``TypeError``/``ValueError`` on a malformed
    answer; the backbone turns those into a :class:`~ap_gym.errors.BackboneError` that
    quotes the answer.
    """

    #: the name a config selects it by (``serving: {dialect: NAME}``)
    name: ClassVar[str] = "none"
    #: ``POST /tokenize`` beside ``/v1``, with ``messages`` + ``add_generation_prompt``
    tokenize: ClassVar[bool] = False
    #: the ways it returns a prompt's token log-probabilities, tried in this order
    scoring: ClassVar[tuple[str, ...]] = ()
    #: it constrains a chat generation to a list of strings
    choice: ClassVar[bool] = False
    #: it returns the raw log-probabilities of named next tokens (the exact search)
    next_token_ids: ClassVar[bool] = False

    def offers(self) -> dict[str, Any]:
        """What it declares, for ``describe()`` and error messages."""
        return {"tokenize": self.tokenize, "scoring": list(self.scoring), "choice": self.choice,
                "next_token_ids": self.next_token_ids}

    def scoring_payload(self, method: str) -> dict[str, Any]:
        """The ``/v1/completions`` fields that ask for the prompt's log-probabilities."""
        raise BackboneError(f"the {self.name} dialect does not score prompts ({method})")

    def read_scoring(self, choice: Mapping[str, Any], ids: Sequence[int], method: str) -> list[float | None]:
        """Each prompt token's log-probability (``None`` for the first) from one choice."""
        raise BackboneError(f"the {self.name} dialect does not score prompts ({method})")

    def choice_payload(self, candidates: Sequence[str]) -> dict[str, Any]:
        """The ``/v1/chat/completions`` fields that constrain the answer to ``candidates``."""
        raise BackboneError(f"the {self.name} dialect has no choice grammar")

    def next_payload(self, ids: Sequence[int]) -> dict[str, Any]:
        """The ``/v1/completions`` fields that ask for the next token's log-probability of each id."""
        raise BackboneError(f"the {self.name} dialect does not read named next tokens")

    def read_next(self, choice: Mapping[str, Any], tokens: Sequence[int]) -> list[Any]:
        """The raw log-probability of each of ``tokens`` as the next token, from one choice
        (unchecked: the backbone refuses anything but finite numbers at most 0)."""
        raise BackboneError(f"the {self.name} dialect does not read named next tokens")


class VLLMDialect(Dialect):
    """vLLM's extensions (and ``ap-gym serve``'s, which speaks the same): ``/tokenize``,
    ``prompt_logprobs`` (else the legacy ``echo`` + ``logprobs``), ``structured_outputs``'
    choice, and ``logprob_token_ids``. Each is probed once, so a server with fewer works."""

    name = "vllm"
    tokenize = True
    scoring = ("prompt_logprobs", "echo")
    choice = True
    next_token_ids = True

    def scoring_payload(self, method: str) -> dict[str, Any]:
        return {"prompt_logprobs": 0} if method == "prompt_logprobs" else {"echo": True, "logprobs": 0}

    def read_scoring(self, choice: Mapping[str, Any], ids: Sequence[int], method: str) -> list[float | None]:
        if method == "prompt_logprobs":
            entries = choice["prompt_logprobs"]
            return [None] + [float(e[str(t)]["logprob"]) for e, t in zip(entries[1:], ids[1:], strict=True)]
        values = choice["logprobs"]["token_logprobs"][:len(ids)]
        return [None if v is None else float(v) for v in values]

    def choice_payload(self, candidates: Sequence[str]) -> dict[str, Any]:
        return {"structured_outputs": {"choice": list(candidates)}}

    def next_payload(self, ids: Sequence[int]) -> dict[str, Any]:
        return {"logprobs": 1, "logprob_token_ids": list(ids), "return_tokens_as_token_ids": True}

    def read_next(self, choice: Mapping[str, Any], tokens: Sequence[int]) -> list[Any]:
        read = choice["logprobs"]["top_logprobs"][0]
        return [read[f"token_id:{t}"] for t in tokens]


class OpenAIDialect(Dialect):
    """A plain OpenAI-compatible server: chat completions and nothing else. The agent's
    ``generate`` and ``react`` modes work; ``choose`` is refused before any episode."""

    name = "openai"


#: The dialects a config may name.
DIALECTS: dict[str, type[Dialect]] = {}


def register_dialect(cls: type[Dialect]) -> type[Dialect]:
    """Make ``cls`` selectable by its ``name`` (usable as a class decorator)."""
    if not (isinstance(cls, type) and issubclass(cls, Dialect)) or cls.name in ("", "none"):
        raise TypeError(f"{cls!r} is not a named Dialect subclass")
    if cls.name in DIALECTS and DIALECTS[cls.name] is not cls:
        raise ValueError(f"a dialect named {cls.name!r} is already registered ({DIALECTS[cls.name].__qualname__})")
    DIALECTS[cls.name] = cls
    return cls


register_dialect(VLLMDialect)
register_dialect(OpenAIDialect)


def get_dialect(spec: str | Dialect | type[Dialect] | None) -> Dialect:
    """A dialect from its name, class or instance (``None``: vLLM's)."""
    if spec is None:
        return VLLMDialect()
    if isinstance(spec, Dialect):
        return spec
    if isinstance(spec, type) and issubclass(spec, Dialect):
        return spec()
    if isinstance(spec, str) and spec in DIALECTS:
        return DIALECTS[spec]()
    raise BackboneError(f"unknown server dialect {spec!r}; the known ones are {', '.join(sorted(DIALECTS))} "
                        "(a new engine is a Dialect subclass passed to register_dialect)")
