"""The acting prompt: one builder for evaluation and training alike.

A policy evaluated by ``ap-gym run`` and a model trained through :mod:`ap_gym.training`
must see the same prompt on the same state, or the trained model is evaluated on text it
never saw. :class:`PromptBuilder` is the only code that writes it:

* system: how to act (``prompts/acting_system.txt``, or ``acting_react.txt`` for ReAct),
  the task's instruction, and an optional **guidance block** (whatever a memory design puts
  there, under a header that names where it came from);
* then the episode so far as turns (observation as user, reply as assistant), a bounded
  window of them; the current observation last, cut to ``max_observation_chars``, followed
  by the admissible commands when the env gives them (:meth:`PromptBuilder.user_turn`).

The prompt grows by appending within the window, so a backbone that reuses its KV cache
prefills only the new turn. When the window overflows, the oldest half is dropped at once
(rather than one turn per step) so that reuse resumes on the next step; a declared token
budget (``max_prompt_tokens``) drops the oldest turns first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ap_gym.backbones.base import Message
from ap_gym.prompts import load_prompt
from ap_gym.text import count_tokens

__all__ = ["PromptBuilder", "transcript"]


def transcript(messages: Sequence[Message]) -> str:
    """A readable, backbone-independent rendering of a chat, saved per step."""
    return "\n".join(f"[{m['role']}]\n{m['content']}" for m in messages)


class PromptBuilder:
    """The chat an acting backbone sees, step by step (see the module docstring).

    Args:
        config: the agent's options (:class:`~ap_gym.policies.react.AgentConfig`): the
            action mode picks the system prompt; ``history_window``,
            ``max_observation_chars``, ``list_admissible``, ``max_admissible_listed`` and
            ``max_prompt_tokens`` shape the turns.
    """

    def __init__(self, config: Any) -> None:
        self.config = config
        self.system = ""
        self.turns: list[Message] = []
        #: turn pairs dropped to keep the prompt inside ``max_prompt_tokens`` this episode
        self.trimmed = 0

    def start(self, instruction: str, guidance: str | None = None) -> None:
        """A new episode: the system prompt for ``instruction`` (and its guidance), no turns."""
        prompt = "acting_react" if self.config.action_mode == "react" else "acting_system"
        system = load_prompt(prompt).format(instruction=instruction)
        self.system = system + ("\n\n" + guidance if guidance else "")
        self.turns = []
        self.trimmed = 0

    def cut(self, text: str) -> str:
        """An observation as the prompt shows it: at most ``max_observation_chars``."""
        limit = self.config.max_observation_chars
        return text if len(text) <= limit else text[:limit] + " [...]"

    def user_turn(self, observation: str, admissible: Sequence[str] | None) -> str:
        """The current observation's turn: its text, then the admissible commands (at most
        ``max_admissible_listed``) when they are listed."""
        current = self.cut(observation)
        if admissible and self.config.list_admissible:
            listed = list(admissible)[: self.config.max_admissible_listed]
            more = len(admissible) - len(listed)
            current += "\n\nAdmissible commands: " + ", ".join(listed) + (f" (and {more} more)" if more > 0 else "")
        return current

    def messages(self, observation: str, admissible: Sequence[str] | None) -> list[Message]:
        """The chat for this step: system, the history window, the current turn."""
        window = 2 * self.config.history_window
        if len(self.turns) > window:
            self.turns = self.turns[len(self.turns) - window // 2:]
            if self.turns and self.turns[0]["role"] == "assistant":
                self.turns = self.turns[1:]
        messages = [{"role": "system", "content": self.system}, *self.turns,
                    {"role": "user", "content": self.user_turn(observation, admissible)}]
        budget = self.config.max_prompt_tokens
        while budget is not None and len(self.turns) >= 2 and sum(count_tokens(m["content"]) for m in messages) > budget:
            self.turns = self.turns[2:]  # the oldest observation and reply go first
            self.trimmed += 1
            messages = [messages[0], *self.turns, messages[-1]]
        return messages

    def record(self, observation: str, reply: str) -> None:
        """The step just taken, as the history later turns show: the observation (cut, without
        the command list) and the reply."""
        self.turns += [{"role": "user", "content": self.cut(observation)}, {"role": "assistant", "content": reply}]
