from __future__ import annotations

import gymnasium as gym
import pytest

import ap_gym  # noqa: F401
from ap_gym.wrappers import PutToMove, put_to_move
from tests.helpers import Counter


@pytest.mark.parametrize(("action", "expected"), [
    ("put mug 1 in/on coffeemachine 1", "move mug 1 to coffeemachine 1"),
    ("Put egg 1 on countertop 3", "move egg 1 to countertop 3"),
    ("go to fridge 1", "go to fridge 1"),
])
def test_put_is_rewritten(action, expected):
    assert put_to_move(action) == expected


def test_the_wrapper_rewrites_what_reaches_the_env():
    seen = []

    class Echo(Counter):
        def _advance(self, action):
            seen.append(action)
            return super()._advance(action)

    env = PutToMove(Echo())
    env.reset(options={"task_id": "c/1"})
    env.step("put key in box")
    assert seen == ["move key to box"]


def test_alfworld_is_made_with_it():
    env = gym.make("ap_gym/ALFWorld-v0", split="test")
    assert isinstance(env, PutToMove)
    env.close()
