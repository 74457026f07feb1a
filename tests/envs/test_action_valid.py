"""``info["action_valid"]`` on every env, and how each decides it (``action_valid_by``)."""

from __future__ import annotations

import gymnasium as gym
import pytest

from ap_gym.envs.webshop import _valid
from tests.helpers import Counter


def _step(env, action):
    _, _, _, _, info = env.step(action)
    return info["action_valid"], info["action_valid_by"]


def test_a_listed_command_is_valid_and_anything_else_is_not():
    env = gym.wrappers.TimeLimit(Counter(), max_episode_steps=10)
    env.reset(options={"task_id": "c/3"})
    assert _step(env, "add") == (True, "admissible")
    assert _step(env, "  ADD ") == (True, "admissible")  # up to case and spacing
    assert _step(env, "dance") == (False, "admissible")


def test_textworld_listed_and_unlisted(tw_env):
    _, info = tw_env.reset(seed=0, options={"split": "test"})
    listed = info["admissible_commands"]
    assert _step(tw_env, listed[0]) == (True, "admissible")
    assert _step(tw_env, "dance wildly") == (False, "admissible")
    tw_env.reset(seed=0, options={"split": "test", "admissible_commands": False})
    assert _step(tw_env, "dance wildly") == (False, "refusal")  # "That's not a verb I recognise."
    assert _step(tw_env, "take unicorn") == (False, "refusal")  # "You can't see any such thing."
    assert _step(tw_env, "open the") == (False, "refusal")  # "What do you want to open?"
    assert _step(tw_env, "look") == (True, "refusal")


def test_scienceworld_refusal_without_a_list(sw_env):
    sw_env.reset(seed=0, options={"admissible_commands": False})
    assert _step(sw_env, "dance wildly") == (False, "refusal")  # "No known action matches that input."
    assert _step(sw_env, "look around") == (True, "refusal")


@pytest.mark.slow
def test_alfworld_nothing_happens_is_a_refusal():
    env = gym.make("ap_gym/ALFWorld-v0", split="test", admissible_commands=False)
    try:
        env.reset(seed=0)
        assert _step(env, "dance wildly") == (False, "refusal")  # "Nothing happens."
        assert _step(env, "look") == (True, "refusal")
    finally:
        env.close()


def test_shop_says_itself_what_it_refused():
    env = gym.make("ap_gym/Shop-v0", split="test")
    try:
        env.reset(seed=0)
        assert _step(env, "dance wildly") == (False, "engine")
        assert _step(env, "search[red shoes]") == (True, "engine")  # on the search page: not in any list, valid
        _, _, _, _, info = env.step("click[nowhere]")
        assert (info["action_valid"], info["action_valid_by"]) == (False, "engine")
    finally:
        env.close()


def test_webshops_rule():
    page = {"has_search_bar": True, "clickables": ["back to search", "b0abcdefgh"]}
    assert _valid("search[red shoes]", page) and not _valid("search[red shoes]", {**page, "has_search_bar": False})
    assert _valid("click[B0ABCDEFGH]", page) and not _valid("click[buy now]", page) and not _valid("dance", page)
