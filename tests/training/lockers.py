"""A two-step toy env with a walkthrough, for the trainer's tests (registered on import).

A note in the kitchen says which box holds the coin; go north, then open that box. Opening
another box loses. Every word is in the tiny model's vocabulary, so it can learn it."""

from __future__ import annotations

import gymnasium as gym

from ap_gym.envs.base import StartResult, StepResult, TextEnv

ENV_ID = "test_training/Lockers-v0"


class Lockers(TextEnv):
    benchmark = "lockers"

    def _task_ids(self, split):
        return [f"lockers/{i}" for i in range(8)] if split == "train" else ["lockers/8", "lockers/9"]

    def task_family(self, task_id):
        return "lockers"

    def _start(self, task_id, options):
        self.code = (int(task_id.split("/")[1]) + int(self.np_random.integers(4))) % 4
        self.north = False
        return StartResult(f"you are in the kitchen . the coin is in box {self.code} .", "take the coin .",
                           score=0.0, max_score=1.0, admissible_commands=["look", "go north"])

    def _commands(self):
        return ["look", "go south", *(f"open box {k}" for k in range(4))] if self.north else ["look", "go north"]

    def _advance(self, action):
        if action == "go north":
            self.north = True
            return StepResult("you are in a room with a box .", 0.0, admissible_commands=self._commands())
        if action == "go south":
            self.north = False
            return StepResult("you are in the kitchen .", 0.0, admissible_commands=self._commands())
        if self.north and action.startswith("open box "):
            won = action == f"open box {self.code}"
            return StepResult("you take the coin !" if won else "the box is empty .", 1.0 if won else 0.0,
                              won=won, lost=not won)
        return StepResult("you are in a room ." if self.north else "you are in the kitchen .", 0.0,
                          admissible_commands=self._commands())

    def walkthrough(self, task_id):
        return ["go north", f"open box {self.code}"]


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=Lockers, max_episode_steps=6)
