"""The acting agent (ReAct-style, acting only) and the no-memory baseline.

Every memory design is this agent plus something in its prompt. The prompt is a chat:

* system: how to act, the task's instruction, and an optional **guidance block**
  (whatever a memory design puts there: retrieved records, rules, reflections), under
  a header that names where it came from;
* then the episode so far as turns (observation as user, command as assistant), a
  bounded window of them; the current observation is last, followed by the admissible
  commands when the env gives them.

The prompt grows by appending within the window, so a backbone that reuses its KV cache
prefills only the new turn. When the window overflows, the oldest half is dropped at
once (rather than one turn per step) so that reuse resumes on the next step.

Two action modes:

* ``choose``: score every admissible command with the backbone and take the best
  (``reduction`` ``"sum"`` or ``"mean"`` log-likelihood; recorded in the Episode). When
  the env gives no admissible commands the agent generates instead.
* ``generate``: free text, normalised: the first non-empty line, with prefixes such as
  ``> `` or ``Action:`` stripped, matched to the closest admissible command when one is
  close enough (difflib ratio >= 0.6). Empty output becomes ``look``; output close to no
  admissible command is sent as written (the env answers "nothing happens"). Both
  count as parse failures; nothing the model writes can crash an episode.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from ap_gym.backbones.base import Backbone, EpisodeCache, GenerationConfig, Message
from ap_gym.policies.base import BasePolicy
from ap_gym.policies.prompting import load_prompt
from ap_gym.policies.registry import register_policy

__all__ = ["AgentConfig", "NoMemory", "ReActAgent", "normalise_action"]

_PREFIX = re.compile(r"^\s*(?:>+|action\s*:|command\s*:|next action\s*:|assistant\s*:|\d+[.)])\s*", re.I)
FALLBACK_ACTION = "look"
#: difflib similarity above which free text is mapped to an admissible command.
MATCH_CUTOFF = 0.6


@dataclass(frozen=True)
class AgentConfig:
    """How the acting agent turns a backbone into commands.

    Attributes:
        action_mode: ``"choose"`` among admissible commands by score, or ``"generate"``.
        reduction: how ``choose`` reduces token log-likelihoods: ``"sum"`` or ``"mean"``.
        history_window: at most this many past steps in the prompt.
        max_observation_chars: observations are cut to this length in the prompt.
        list_admissible: show the admissible commands in the prompt.
        max_admissible_listed: list at most this many (ScienceWorld has hundreds).
        generation: decoding options for ``generate`` mode.
    """

    action_mode: Literal["choose", "generate"] = "choose"
    reduction: Literal["sum", "mean"] = "sum"
    history_window: int = 20
    max_observation_chars: int = 2000
    list_admissible: bool = True
    max_admissible_listed: int = 60
    generation: GenerationConfig = field(default_factory=lambda: GenerationConfig(max_new_tokens=24, stop=("\n",)))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["generation"] = self.generation.to_dict()
        return d

    @classmethod
    def coerce(cls, value: AgentConfig | Mapping[str, Any] | None) -> AgentConfig:
        """An AgentConfig from itself, a plain mapping (YAML) or ``None`` (the defaults)."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        options = dict(value)
        if isinstance(options.get("generation"), Mapping):
            options["generation"] = GenerationConfig.coerce(options["generation"])
        return cls(**options)


def normalise_action(text: str, admissible: Sequence[str] | None = None) -> tuple[str, bool]:
    """Turn raw model output into a command; returns ``(action, parse_failure)``."""
    line = next((ln for ln in text.splitlines() if ln.strip()), "")
    line = _PREFIX.sub("", line).strip().strip("`'\"").strip()
    line = re.sub(r"[.!]+$", "", line).strip()[:200]
    if not line:
        return FALLBACK_ACTION, True
    if not admissible:
        return line, False
    lowered = {a.lower(): a for a in admissible}
    if line.lower() in lowered:
        return lowered[line.lower()], False
    close = difflib.get_close_matches(line.lower(), list(lowered), n=1, cutoff=MATCH_CUTOFF)
    # Too far from every admissible command: send it as written (the env answers it)
    # and count it, rather than guess a command the model did not mean.
    return (lowered[close[0]], False) if close else (line, True)


class ReActAgent(BasePolicy):
    """The acting agent. A memory policy wraps it and hands it guidance (with headers) at
    the start of each episode (:meth:`start`).

    Args:
        backbone: any :class:`~ap_gym.backbones.base.Backbone`.
        config: an :class:`AgentConfig` (or its options as a mapping).
    """

    def __init__(self, backbone: Backbone, config: AgentConfig | Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self.backbone = backbone
        self.config = AgentConfig.coerce(config)
        self.reset_options = {"admissible_commands": self.config.action_mode == "choose" or self.config.list_admissible}
        self.guidance: str | None = None
        self._system = ""
        self._turns: list[Message] = []

    # --------------------------------------------------------------- prompt
    def reset_episode(self) -> None:
        super().reset_episode()
        # KV-cache reuse is within an episode only: every episode computes the same
        # numbers whichever episodes ran before it (so worker count never changes results).
        if isinstance(self.backbone, EpisodeCache):
            self.backbone.reset_cache()

    def _begin(self, observation: str, info: Mapping[str, Any]) -> None:
        self.start(observation, info)

    def start(self, observation: str, info: Mapping[str, Any], guidance: str | None = None) -> None:
        """Set up the episode's prompt: the instruction and, when given, the guidance block."""
        self.guidance = guidance
        system = load_prompt("acting_system").format(instruction=info.get("instruction", ""))
        if self.guidance:
            system += "\n\n" + self.guidance
        self._system = system
        self._turns = []

    def _cut(self, text: str) -> str:
        limit = self.config.max_observation_chars
        return text if len(text) <= limit else text[:limit] + " [...]"

    def messages(self, observation: str, admissible: Sequence[str] | None) -> list[Message]:
        """The chat the backbone sees for this step."""
        window = 2 * self.config.history_window
        if len(self._turns) > window:
            self._turns = self._turns[len(self._turns) - window // 2:]
            if self._turns and self._turns[0]["role"] == "assistant":
                self._turns = self._turns[1:]
        current = self._cut(observation)
        if admissible and self.config.list_admissible:
            listed = list(admissible)[: self.config.max_admissible_listed]
            more = len(admissible) - len(listed)
            current += "\n\nAdmissible commands: " + ", ".join(listed) + (f" (and {more} more)" if more > 0 else "")
        return [{"role": "system", "content": self._system}, *self._turns, {"role": "user", "content": current}]

    @staticmethod
    def transcript(messages: Sequence[Message]) -> str:
        """A readable, backbone-independent rendering of the prompt, saved per step."""
        return "\n".join(f"[{m['role']}]\n{m['content']}" for m in messages)

    # ------------------------------------------------------------------ act
    def act(self, observation: str, info: Mapping[str, Any]) -> str:
        admissible = list(info.get("admissible_commands") or [])
        messages = self.messages(observation, admissible)
        if self.config.action_mode == "choose" and admissible:
            scored = self.backbone.score(messages, admissible, self.config.reduction)
            scores = scored.values
            best = max(range(len(admissible)), key=lambda i: scores[i])
            action, failure = admissible[best], False
            self.meter.record("acting", scored.tokens, 0)
            top = sorted(range(len(admissible)), key=lambda i: -scores[i])[:3]
            response = f"chose {action!r} ({self.config.reduction} log-lik {scores[best]:.3f}); top: " + \
                ", ".join(f"{admissible[i]!r}={scores[i]:.3f}" for i in top)
        else:
            completion = self.backbone.generate(messages, self.config.generation)
            self.meter.record("acting", completion.prompt_tokens, completion.completion_tokens)
            action, failure = normalise_action(completion.text, admissible)
            response = completion.text
        self.record_step(self.transcript(messages), response, failure)
        self._turns += [{"role": "user", "content": self._cut(observation)}, {"role": "assistant", "content": action}]
        return action

    def describe(self) -> dict[str, Any]:
        """The agent's options and its backbone, saved with results."""
        return {"agent": self.config.to_dict(), "backbone": self.backbone.describe()}


@register_policy("no_memory", needs=("backbone",))
class NoMemory(ReActAgent):
    """The acting agent alone: the no-memory baseline."""

    def __init__(self, backbone: Backbone, agent: AgentConfig | Mapping[str, Any] | None = None) -> None:
        super().__init__(backbone, agent)
