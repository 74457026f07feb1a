"""Scripted rules: the best simple rule per kind of game, a baseline for learned agents.

A learned agent's success means little without the floor (random), the ceiling (the
walkthrough) and the best rule a person writes in a few lines: a game that a one-line rule
wins cannot show learning. Each rule reads only what an agent reads (the instruction, the
observation and the admissible commands), never the engine's state or the walkthrough.

* :class:`HouseholdRule` (``rule_household``): ALFWorld's six task types. Parse the goal
  from the instruction; search the receptacles in the order the commands list them,
  opening closed ones; take the goal's object; heat, cool or clean it at the appliance; use
  the lamp (look tasks); put it in the goal's receptacle (twice for pick-two).
* :class:`ExploreRule` (``rule_explore``): TextWorld's coin collector and treasure hunter.
  Take the goal's object when it is listed; else open what is closed (doors, containers);
  else go through an exit not yet taken from this room, preferring one that is not the way
  back; else the way back. It never takes another object (a treasure hunt is lost by it).

They are text rules, not env code: a policy never imports an environment.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ap_gym.policies.base import BasePolicy
from ap_gym.policies.registry import register_policy

__all__ = ["ExploreRule", "HouseholdRule", "household_goal"]

#: The appliance each ALFWorld state change is done with, as its commands name it.
_APPLIANCE = {"heat": "microwave", "cool": "fridge", "clean": "sinkbasin"}
_OPPOSITE = {"north": "south", "south": "north", "east": "west", "west": "east"}


def household_goal(instruction: str) -> tuple[str, str, str | None, int]:
    """An ALFWorld instruction as ``(object, receptacle or lamp, change, count)``: change is
    ``heat``, ``cool``, ``clean``, ``look`` or ``None``; count is 2 for pick-two tasks."""
    text = instruction.lower().rstrip(". ")
    words = re.findall(r"[a-z]+", text)
    change = next((c for c, cue in (("heat", "hot"), ("cool", "cool"), ("clean", "clean"))
                   if c in words or cue in words), None)
    if re.match(r"(look at|examine)\b", text):
        change = "look"
    skip = {"put", "a", "an", "some", "two", "the", "clean", "hot", "cool", "heat", "find", "look", "at", "examine"}
    obj = next(w for w in words if w not in skip)
    return obj, words[-1], change, 2 if "two" in words else 1


def _named(command: str, *names: str) -> bool:
    """``command`` mentions each of ``names`` as an object name (``apple`` in ``apple 2``)."""
    return all(re.search(rf"\b{re.escape(n)} \d+\b", command) for n in names)


@register_policy("rule_household")
class HouseholdRule(BasePolicy):
    """ALFWorld's best simple rule (see the module docstring)."""

    reset_options = {"admissible_commands": True}

    def _begin(self, observation: str, info: Mapping[str, Any]) -> None:
        self.goal = household_goal(str(info.get("instruction", "")))
        self.held: str | None = None
        self.changed = False
        self.placed: list[str] = []
        self.visited: set[str] = set()
        self.last = ""

    def act(self, observation: str, info: Mapping[str, Any]) -> str:
        self._observe(observation)
        self.last = self._decide(list(info.get("admissible_commands") or ["look"]))
        self.record_step()
        return self.last

    def _observe(self, observation: str) -> None:
        """What the last command did: picked up, changed or put down the object."""
        if self.last.startswith("take ") and observation.startswith("You pick up"):
            self.held = self.last[5:].split(" from ")[0]
        elif self.last.startswith(("heat ", "cool ", "clean ")) and observation.startswith("You "):
            self.changed = True
        elif self.last.startswith("move ") and observation.startswith("You move") and self.held:
            self.placed.append(self.held)
            self.held, self.changed = None, False

    def _decide(self, commands: Sequence[str]) -> str:
        obj, where, change, _ = self.goal

        def first(verb: str, *names: str, skip: Sequence[str] = ()) -> str | None:
            return next((c for c in commands if c.startswith(verb + " ") and _named(c, *names)
                         and not any(s in c for s in skip)), None)

        if self.held and change == "look":
            plan = [first("use", where)]
        elif self.held and change and not self.changed:
            plan = [first(change, obj, _APPLIANCE[change]), first("go to", _APPLIANCE[change])]
        elif self.held:
            here = self.last.removeprefix("go to ") if self.last.startswith("go to") else ""
            plan = [first("move", obj, where), first("open", where) if where in here else None,
                    first("go to", where) if where not in here else None]
        else:
            plan = [first("take", obj, skip=[p + " " for p in self.placed] or ["\0"])]
            if self.last.startswith("go to "):
                plan.append(first("open", self.last[6:].split()[0]))
        if (command := next((c for c in plan if c), None)) is not None:
            return command
        unvisited = [c for c in commands if c.startswith("go to ") and c not in self.visited]
        if not unvisited:  # searched everywhere: search again (a closed one may have been skipped)
            self.visited.clear()
            unvisited = [c for c in commands if c.startswith("go to ")] or list(commands)
        self.visited.add(unvisited[0])
        return unvisited[0]


@register_policy("rule_explore")
class ExploreRule(BasePolicy):
    """TextWorld's coin collector and treasure hunter rule (see the module docstring)."""

    reset_options = {"admissible_commands": True}

    def _begin(self, observation: str, info: Mapping[str, Any]) -> None:
        instruction = str(info.get("instruction", "")).lower()
        found = re.search(r"(?:find|pick up|take|hold)(?: the| a| an)? ([a-z -]+?)(?: and| in| from|[.,]|$)",
                          instruction)
        self.target = found.group(1).strip() if found else "coin"
        self.taken: dict[str, set[str]] = {}  # room -> exits taken from it
        self.back: str | None = None

    def act(self, observation: str, info: Mapping[str, Any]) -> str:
        commands = list(info.get("admissible_commands") or ["look"])
        room = _room(observation) or "?"
        take = re.compile(rf"take (?:the )?{re.escape(self.target)}(?: from .+)?")  # the whole name: not 'passkey' for 'key'
        action = next((c for c in commands if take.fullmatch(c)), None) \
            or next((c for c in commands if c.startswith("open ")), None)
        if action is None:
            exits = [c for c in commands if c.startswith("go ")]
            fresh = [c for c in exits if c not in self.taken.setdefault(room, set())]
            ahead = [c for c in fresh if c != self.back]
            if not exits:
                action = commands[0]
            else:
                action = (ahead or fresh or ([self.back] if self.back in exits else exits))[0]
            self.taken[room].add(action)
            direction = action.removeprefix("go ")
            self.back = f"go {_OPPOSITE[direction]}" if direction in _OPPOSITE else None
        self.record_step()
        return action


def _room(observation: str) -> str | None:
    """The room an observation describes (TextWorld's ``-= Kitchen =-`` header)."""
    found = re.search(r"-= (.+?) =-", observation)
    return found.group(1) if found else None
