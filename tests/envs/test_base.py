from __future__ import annotations

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

from ap_gym.envs.base import sanitize_text, text_space
from ap_gym.errors import UnknownTaskError
from tests.helpers import Counter


def test_text_space_accepts_spaces_and_punctuation():
    space = text_space()
    assert space.contains("go north")
    assert space.contains("put mug 1 in/on coffeemachine 1.\n")
    assert space.contains("")
    assert not gym.spaces.Text(64).contains("go north")  # why we do not use the default


def test_sanitize_folds_unicode_into_the_space():
    text = sanitize_text("Caf\u00e9 \u201cnoir\u201d \u2014 \u2603 ok")
    assert text == 'Cafe "noir" -   ok'
    assert text_space().contains(text)


def test_check_env_passes_on_a_minimal_env():
    check_env(Counter(), skip_render_check=True)


def test_contract_info_keys_termination_and_truncation():
    env = gym.wrappers.TimeLimit(Counter(), max_episode_steps=4)
    obs, info = env.reset(options={"task_id": "c/1"})
    for key in ("task_id", "task_family", "instruction", "score", "max_score", "success", "admissible_commands"):
        assert key in info
    assert info["task_id"] == "c/1" and info["success"] is False
    for _ in range(2):
        _, r, term, trunc, info = env.step("add")
        assert r == 1.0 and not term and not trunc
    _, _, term, trunc, info = env.step("add")
    assert term and not trunc and info["success"] and info["won"]
    env.reset(options={"task_id": "c/1"})
    for _ in range(3):
        env.step("look")
    _, _, term, trunc, info = env.step("look")
    assert trunc and not term and not info["success"]
    env.reset(options={"task_id": "c/1"})
    _, _, term, _, info = env.step("quit")
    assert term and info["lost"] and not info["success"]


def test_seed_alone_picks_a_task_deterministically():
    env = Counter()
    picks = {env.reset(seed=s)[1]["task_id"] for s in range(20)}
    assert picks == {"c/1", "c/2"}  # the env's split only
    assert [env.reset(seed=7)[1]["task_id"] for _ in range(3)] == [env.reset(seed=7)[1]["task_id"]] * 3
    assert env.reset(options={"split": "test"})[1]["task_id"] == "c/3"


def test_bad_input_gets_clear_errors():
    env = Counter()
    with pytest.raises(gym.error.ResetNeeded):
        env.step("add")
    with pytest.raises(UnknownTaskError, match="unknown task id 'nope'.*task_ids"):
        env.reset(options={"task_id": "nope"})
    env.reset(options={"task_id": "c/1"})
    with pytest.raises(TypeError, match="actions are text"):
        env.step(3)  # type: ignore[arg-type]
    obs, *_ = env.step("\u00fcber-garbage ((")
    assert obs == "Nothing happens."
    env.step("quit")
    with pytest.raises(gym.error.ResetNeeded):
        env.step("add")


@pytest.mark.parametrize("bad", ["10", float("nan"), float("inf"), True])
def test_a_score_that_is_not_a_finite_number_is_an_infrastructure_failure(bad):
    import ap_gym
    from ap_gym.policies import RandomPolicy
    from ap_gym.types import Termination

    class BadScore(Counter):
        def _advance(self, action):
            result = super()._advance(action)
            return type(result)(result.observation, bad, result.won, result.lost, result.admissible_commands)

    ep = ap_gym.run_episode(BadScore(), RandomPolicy(seed=0), task_id="c/1", max_steps=5)
    assert ep.termination is Termination.INFRA and "finite number" in ep.error
    assert ap_gym.run_episode(Counter(), RandomPolicy(seed=0), task_id="c/1", max_steps=5).termination \
        is not Termination.INFRA  # the next episode simply runs


def test_a_registered_env_steps_after_a_first_reset_that_raised():
    """Gymnasium's passive checker (which ap-gym's registrations leave out) broke the first
    step after a first reset that raised: 'cannot unpack non-iterable NoneType object'."""
    env = gym.make("ap_gym/Shop-v0", split="test")
    with pytest.raises(UnknownTaskError):
        env.reset(options={"task_id": "nope/1"})
    with pytest.raises(gym.error.ResetNeeded):
        env.step("search[x]")
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("search[shirt]")
    assert isinstance(obs, str) and not truncated
    env.close()


def test_the_fast_paths_of_every_steps_text_checks_give_the_slow_paths_answers():
    """sanitize_text's printable check and search_folded's lower-cased refusal search are
    speed-ups (issue 52 item 3: a wrapped TextWorld step spent ~0.16 ms in them and the
    wrappers); on any text they must answer exactly as the per-character loop and the
    case-insensitive pattern do."""
    import random
    import re
    import string

    from ap_gym.envs.base import _PRINTABLE_SET, _UNPRINTABLE, sanitize_text
    from ap_gym.envs.textworld import TextWorldEnv
    from ap_gym.text import FAILED_FEEDBACK, failed_action, search_folded

    rng = random.Random(0)
    pieces = ["Nothing happens.", "You CAN'T go that way", "That's NOT a verb I recognise", "You see a Fridge",
              "It Is Locked.", "what do you want to take?", "The door is ALREADY open", "caf\u00e9 \u2019quoted\u2019",
              "\u212aelvin", "no \u017fuch door",  # a long s: re.I matches it to "s", lower() leaves it
              "tab\there", "new\nline", "]^-\\", "\x00\x07", "You need to open it first"]
    texts = ["".join(rng.choice(pieces + list(string.printable)) for _ in range(rng.randint(0, 12)))
             for _ in range(3000)] + pieces
    custom = re.compile(r"Nothing HAPPENS|\bno\b", re.I)  # not written in lower case: the slow path
    for text in texts:
        # the one thing sanitize_text changed: which texts take its return-as-is path
        assert (_UNPRINTABLE.search(text) is None) == all(c in _PRINTABLE_SET for c in text), text
        assert set(sanitize_text(text)) <= _PRINTABLE_SET
        for pattern in (FAILED_FEEDBACK, TextWorldEnv.refused, custom):
            assert search_folded(pattern, text) == bool(pattern.search(text)), (pattern.pattern[:30], text)
        assert failed_action(text) == bool(FAILED_FEEDBACK.search(text[:300]))

