"""The acting agent (ReAct) and the no-memory baseline.

Every memory design is this agent plus something in its prompt: a **guidance block** in
the system prompt. The prompt itself is written by :class:`~ap_gym.policies.prompting.PromptBuilder`,
the one builder that evaluation and training share (the system prompt, a bounded window of
turns, observations cut to a length, the admissible commands, a token budget).

Three action modes (``AgentConfig.action_mode``, recorded in every Episode):

* ``choose``: score every admissible command with the backbone and take the best
  (``reduction`` ``"sum"`` or ``"mean"`` log-likelihood). When the env gives no
  admissible commands the agent generates instead.
* ``react``: the paper's agents: the model writes a ``Thought:`` line, then an
  ``Action:`` line (the format is in ``prompts/acting_react.txt``). The parser takes the
  action; the thought is kept in the step record (``reasoning``) and stays in the
  history, so later turns see it as the model wrote it.
* ``generate``: one free line, no reasoning.

Generated commands are normalised: prefixes such as ``> `` or ``Action:`` stripped,
matched to the closest admissible command when one is close enough (difflib ratio >=
0.6). Empty output becomes ``look``; output close to no admissible command is sent as
written (the env answers "nothing happens"); a ReAct reply without an ``Action:`` line
is read from its last line. Each of these counts as a parse failure; nothing the model
writes can crash an episode.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
from pydantic import Field

from ap_gym.backbones.base import (
    Backbone,
    CommandActor,
    Completion,
    ConstrainedChooser,
    EpisodeCache,
    ExactSearcher,
    GenerationConfig,
    Message,
)
from ap_gym.errors import BackboneError
from ap_gym.options import Options
from ap_gym.policies.base import BasePolicy
from ap_gym.policies.prompting import PromptBuilder, transcript
from ap_gym.policies.registry import register_policy
from ap_gym.seeding import derived_rng

__all__ = ["AgentConfig", "NoMemory", "ReActAgent", "normalise_action", "parse_react"]

_THOUGHT = re.compile(r"^\s*(?:thought|reasoning|think)\s*:\s*(.*)$", re.I)
_ACTION = re.compile(r"^\s*action\s*:\s*(.*)$", re.I)
_PREFIX = re.compile(r"^\s*(?:>+|action\s*:|command\s*:|next action\s*:|assistant\s*:|\d+[.)])\s*", re.I)
FALLBACK_ACTION = "look"
#: difflib similarity above which free text is mapped to an admissible command.
MATCH_CUTOFF = 0.6


class AgentConfig(Options):
    """How the acting agent turns a backbone into commands.

    Attributes:
        action_mode: ``"choose"`` among admissible commands by score, ``"react"`` (a
            thought, then an action), or ``"generate"`` (an action alone).
        reduction: how ``choose`` reduces token log-likelihoods: ``"sum"`` or ``"mean"``.
        history_window: at most this many past steps in the prompt.
        max_observation_chars: observations are cut to this length in the prompt.
        list_admissible: show the admissible commands in the prompt.
        max_admissible_listed: list at most this many (ScienceWorld has hundreds).
        max_prompt_tokens: the prompt's declared budget, in ap-gym's token proxy (words and
            punctuation; a BPE tokenizer counts about 1.3 times as many): the oldest turns
            of the history go first when the prompt would exceed it, so the prompt stays
            inside the model's context and an overflow (a failure of the method) is rare.
            ``None``: the history window alone bounds it.
        generation: decoding options for ``generate`` mode.
        react_generation: decoding options for ``react`` mode (room for a thought).
        choose_temperature: 0 (the default) takes the best-scored command; above 0,
            ``choose`` samples from the softmax of the candidates' scores divided by it (a
            stochastic policy, seeded per run, task and step) and records the chosen
            command's log-probability under that softmax in ``Step.logprob``.
        record_messages: keep the chat the backbone saw in ``Step.messages`` (a trainer
            re-scores it); off by default, since it repeats the history on every step.
        candidates_kept: how many of the best-scored candidates a ``choose`` step records
            (``Step.trace.candidates``); ``None`` keeps every one (a policy gradient over
            the admissible commands needs them all).
        choose_method: how ``choose`` picks a command. Every method but ``constrained`` is
            the paper's rule, exact: the argmax of the candidates' log-likelihood (summed or
            by ``reduction``), or a sample from its softmax. ``"auto"`` (default): on a
            backbone that offers an exact search (a vLLM server with
            ``logprob_token_ids``: a branch-and-bound over the candidates' token trie) and
            for the argmax of summed log-likelihoods, the search; else every candidate
            scored. ``"score"``: every candidate scored. ``"search"``: the search, or an
            error. ``"constrained"``: greedy decoding under a choice grammar (a server's
            structured outputs): another decision rule (it can pick another command than
            the argmax), never chosen by ``auto``, and reported as a different agent.
            Each episode records which ran (``choice_method``).
    """

    action_mode: Literal["choose", "generate", "react"] = "choose"
    reduction: Literal["sum", "mean"] = "sum"
    history_window: int = Field(default=20, ge=1)
    max_observation_chars: int = Field(default=2000, ge=1)
    list_admissible: bool = True
    max_admissible_listed: int = Field(default=60, ge=0)
    max_prompt_tokens: int | None = Field(default=None, ge=64)
    generation: GenerationConfig = GenerationConfig(max_new_tokens=24, stop=("\n",))
    react_generation: GenerationConfig = GenerationConfig(max_new_tokens=128, stop=("\nObservation", "\n\n"))
    choose_temperature: float = Field(default=0.0, ge=0.0)
    record_messages: bool = False
    candidates_kept: int | None = Field(default=10, ge=0)
    choose_method: Literal["auto", "score", "search", "constrained"] = "auto"


def parse_react(text: str, admissible: Sequence[str] | None = None) -> tuple[str, str, bool]:
    """A ReAct reply as ``(thought, action, parse_failure)``.

    The first ``Action:`` line is the action (normalised as in :func:`normalise_action`);
    the ``Thought:`` lines before it are the thought. Without an ``Action:`` line the last
    non-empty line is read as the action, and that counts as a parse failure.
    """
    lines = [ln for ln in text.splitlines() if ln.strip()]
    thought: list[str] = []
    for ln in lines:
        if m := _ACTION.match(ln):
            action, failure = normalise_action(m.group(1), admissible)
            return " ".join(thought).strip(), action, failure
        m = _THOUGHT.match(ln)
        thought.append(m.group(1) if m else ln.strip())
    action, _ = normalise_action(lines[-1] if lines else "", admissible)
    return " ".join(thought[:-1]).strip(), action, True


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
        seed: the run's seed; it seeds sampling when a generation config samples
            (per task and step, see :meth:`GenerationConfig.seeded`).
    """

    def __init__(self, backbone: Backbone, config: AgentConfig | Mapping[str, Any] | None = None,
                 seed: int | None = None) -> None:
        super().__init__()
        self.backbone = backbone
        self.seed = seed
        self._task_id = ""
        self.config = AgentConfig.coerce(config)
        self.reset_options = {"admissible_commands": self.config.action_mode == "choose" or self.config.list_admissible}
        self.guidance: str | None = None
        self.prompt = PromptBuilder(self.config)

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
        self._task_id = str(info.get("task_id", ""))
        self.decisions["action_mode"] = self.config.action_mode
        self.prompt.start(str(info.get("instruction", "")), guidance)

    def messages(self, observation: str, admissible: Sequence[str] | None) -> list[Message]:
        """The chat the backbone sees for this step (:class:`PromptBuilder`)."""
        messages = self.prompt.messages(observation, admissible)
        if self.prompt.trimmed:
            self.decisions["history_trimmed"] = self.prompt.trimmed
        return messages

    @staticmethod
    def transcript(messages: Sequence[Message]) -> str:
        """A readable, backbone-independent rendering of the prompt, saved per step."""
        return transcript(messages)

    # ------------------------------------------------------------------ act
    def act(self, observation: str, info: Mapping[str, Any]) -> str:
        admissible = list(info.get("admissible_commands") or [])
        messages = self.messages(observation, admissible)
        scored_step: dict[str, Any] = {}
        if self.config.record_messages:
            scored_step["messages"] = messages
        if self.config.action_mode == "choose" and admissible:
            action, response, chosen = self._choose(messages, admissible)
            scored_step.update(chosen)
            failure, thought, reply = False, None, action
        elif self.config.action_mode == "react":
            completion = self._generate(messages, self.config.react_generation, admissible)
            self.meter.record("acting", completion.prompt_tokens, completion.completion_tokens)
            scored_step.update(_generated_logprob(completion, self.config.react_generation))
            thought, action, failure = parse_react(completion.text, admissible)
            thought, response = thought or None, completion.text
            reply = f"Thought: {thought or ''}\nAction: {action}"  # what later turns see, as ReAct's agents do
        else:
            completion = self._generate(messages, self.config.generation, admissible)
            self.meter.record("acting", completion.prompt_tokens, completion.completion_tokens)
            scored_step.update(_generated_logprob(completion, self.config.generation))
            action, failure = normalise_action(completion.text, admissible)
            response, reply, thought = completion.text, action, None
        self.record_step(self.transcript(messages), response, failure, reasoning=thought, **scored_step)
        self.prompt.record(observation, reply)
        return action

    def _generate(self, messages: list[Message], config: GenerationConfig, admissible: Sequence[str]) -> Completion:
        """The backbone's reply, sampled with a seed of this run, task and step; a backbone that
        acts on commands (the scripted actor) is handed the admissible ones."""
        if isinstance(self.backbone, CommandActor):
            return self.backbone.act_on(messages, admissible)
        return self.backbone.generate(messages, config.seeded(self.seed, self._task_id, len(self._steps)))

    def _method(self) -> str:
        """How this step chooses (see ``choose_method``): ``scored``, ``searched`` or
        ``constrained``. ``auto`` is always an exact method: the search where the backbone
        offers it and the choice is the argmax of summed log-likelihoods, else scoring."""
        method, name = self.config.choose_method, getattr(self.backbone, "identity", "the backbone")
        if method == "constrained":
            if not (isinstance(self.backbone, ConstrainedChooser) and self.backbone.supports_choice()):
                raise BackboneError(f"choose_method: constrained, but {name} offers no constrained choice (a server "
                                    "with structured outputs does); use 'auto'")
            return "constrained"
        searchable = self.config.choose_temperature <= 0 and self.config.reduction == "sum"
        if method == "search":
            if not searchable:
                raise BackboneError("choose_method: search finds the argmax of summed log-likelihoods: it needs "
                                    "reduction 'sum' and choose_temperature 0; use 'score'")
            if not (isinstance(self.backbone, ExactSearcher) and self.backbone.supports_search()):
                raise BackboneError(f"choose_method: search, but {name} offers no exact search (a vLLM server with "
                                    "logprob_token_ids does); use 'auto' or 'score'")
            return "searched"
        if method == "auto" and searchable and isinstance(self.backbone, ExactSearcher) \
                and self.backbone.supports_search():
            return "searched"
        return "scored"

    def _choose(self, messages: list[Message], admissible: list[str]) -> tuple[str, str, dict[str, Any]]:
        """The command chosen among ``admissible``, the step's response text and what the step
        records (candidates with their true log-likelihoods, the reduction, a sampled choice's
        log-probability; a constrained choice's post-mask value under its own name)."""
        method = self._method()
        self.decisions["choice_method"] = method
        if method == "constrained":
            assert isinstance(self.backbone, ConstrainedChooser)
            picked = self.backbone.choose(messages, admissible)
            self.meter.record("acting", picked.prompt_tokens, picked.completion_tokens)
            return picked.text, (f"chose {picked.text!r} (greedy decoding constrained to the {len(admissible)} "
                                 "admissible commands)"), {"reduction": "constrained",
                                                           "masked_logprob": picked.masked_logprob}
        if method == "searched":
            assert isinstance(self.backbone, ExactSearcher)
            best = self.backbone.best(messages, admissible)
            self.meter.record("acting", best.prompt_tokens + best.candidate_tokens, 0)
            values = dict(best.scored)
            ranked = sorted(values, key=lambda i: -values[i])
            action = admissible[best.index]
            return action, (f"chose {action!r} (sum log-lik {values[best.index]:.3f}, exact search: "
                            f"{len(values)} of {len(admissible)} commands scored whole); top: "
                            + ", ".join(f"{admissible[i]!r}={values[i]:.3f}" for i in ranked[:3])), \
                {"candidates": tuple((admissible[i], round(values[i], 4)) for i in ranked[:self.config.candidates_kept]),
                 "reduction": "sum"}
        scored = self.backbone.score(messages, admissible, self.config.reduction)
        scores = scored.values
        if len(scores) != len(admissible) or not all(math.isfinite(v) for v in scores):
            raise BackboneError(f"the backbone scored {len(admissible)} commands as {list(scores)[:5]}...: "
                                "missing or not finite (NaN), which no choice can be made from; an "
                                "infrastructure failure, not the agent's")
        best_index, logprob = self._pick(scores)
        self.meter.record("acting", scored.tokens, 0)
        ranked = sorted(range(len(admissible)), key=lambda i: -scores[i])
        action = admissible[best_index]
        recorded: dict[str, Any] = {
            "candidates": tuple((admissible[i], round(float(scores[i]), 4)) for i in ranked[:self.config.candidates_kept]),
            "reduction": self.config.reduction}
        if logprob is not None:
            recorded["logprob"] = logprob
        return action, (f"chose {action!r} ({self.config.reduction} log-lik {scores[best_index]:.3f}); top: "
                        + ", ".join(f"{admissible[i]!r}={scores[i]:.3f}" for i in ranked[:3])), recorded

    def _pick(self, scores: Sequence[float]) -> tuple[int, float | None]:
        """The chosen candidate and, when sampling, its log-probability under the softmax."""
        temperature = self.config.choose_temperature
        if temperature <= 0:
            return max(range(len(scores)), key=lambda i: scores[i]), None
        logits = np.asarray(scores, dtype=np.float64) / temperature
        logp = logits - logits.max()
        logp -= np.log(np.exp(logp).sum())
        rng = derived_rng(self.seed if self.seed is not None else 0, "choose", self._task_id, len(self._steps))
        chosen = rng.choices(range(len(scores)), weights=np.exp(logp).tolist())[0]
        return chosen, float(logp[chosen])

    def describe(self) -> dict[str, Any]:
        """The agent's options and its backbone, saved with results."""
        return {"agent": self.config.to_dict(), "backbone": self.backbone.describe()}


def _generated_logprob(completion: Any, config: GenerationConfig) -> dict[str, Any]:
    """The sampled completion's log-probability (the model's, token by token), when the
    backbone reports it and the completion was sampled (a greedy one is no draw)."""
    logprobs = completion.extra.get("logprobs") if isinstance(completion.extra, Mapping) else None
    if config.greedy or not logprobs:
        return {}
    return {"logprob": float(sum(logprobs))}


@register_policy("no_memory", needs=("backbone", "seed"))
class NoMemory(ReActAgent):
    """The acting agent alone: the no-memory baseline.

    Args:
        skills: given skills shown in every prompt (the paper's §F.1: correct or wrong skill
            texts supplied to an agent without memory); none by default.
    """

    def __init__(self, backbone: Backbone, agent: AgentConfig | Mapping[str, Any] | None = None,
                 seed: int | None = None, skills: Sequence[str] = ()) -> None:
        super().__init__(backbone, agent, seed)
        if isinstance(skills, str):
            raise ValueError("skills is a list of texts, not one string")
        self.skills = [str(s) for s in skills]

    def _begin(self, observation: str, info: Mapping[str, Any]) -> None:
        guidance = "## Skills\n" + "\n".join(f"- {s}" for s in self.skills) if self.skills else None
        self.start(observation, info, guidance)
