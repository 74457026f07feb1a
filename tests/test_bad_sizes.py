"""Issue 42 item 8: sizes and switches that made no sense were accepted (or failed with a raw
IndexError, or were iterated character by character); each is now refused, saying what
is expected, before anything runs."""

from __future__ import annotations

import gymnasium as gym
import pytest

import ap_gym
from ap_gym.protocol import RunConfig
from ap_gym.protocol.config import ConfigError
from tests.helpers import register_dial

DIAL = register_dial()


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"num_envs": 0}, "num_envs is a whole number of at least 1"),
    ({"num_envs": 4, "group_size": 0}, "group_size is a whole number of at least 1"),
    ({"num_envs": 4, "group_size": -2}, "group_size is a whole number of at least 1"),
    ({"num_envs": 2, "group_size": 2, "tasks": []}, "names no task"),
    ({"num_envs": 2, "group_size": 2, "tasks": "dial/1"}, "not one string"),
    ({"num_envs": 2, "max_episode_steps": -1}, "max_episode_steps is a whole number"),
])
def test_make_vec_refuses_sizes_that_make_no_sense(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ap_gym.make_vec(DIAL, split="train", **kwargs)


def test_an_env_refuses_a_switch_that_is_no_boolean():
    with pytest.raises(ValueError, match="True or False"):
        gym.make(DIAL, admissible_commands="no")
    env = gym.make(DIAL)
    with pytest.raises(ValueError, match="True or False"):
        env.reset(options={"admissible_commands": "no"})
    env.close()


def test_a_policy_default_no_policy_takes_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="'agnet' is an option of no policy"):
        RunConfig.from_dict({"out": str(tmp_path), "policies": [{"name": "no_memory"}],
                             "policy_defaults": {"agnet": {"action_mode": "react"}}})


def test_the_trainable_log_probabilities_refuse_what_they_cannot_score():
    from ap_gym.backbones.hf import TransformersBackbone, tiny_llama

    model, tokenizer = tiny_llama(seed=0)
    backbone = TransformersBackbone(model, tokenizer=tokenizer)
    vocab = model.get_input_embeddings().num_embeddings
    with pytest.raises(ValueError, match="outside the model's vocabulary"):
        backbone.sequence_logprobs([[1, 2, 3]], [[vocab + 5]])
    with pytest.raises(ValueError, match="at least one token"):
        backbone.token_logprobs([{"role": "user", "content": "hi"}], "")


def test_recovery_refuses_zero_seeds():
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, str(root / "benchmarks" / "recovery.py"), "--seeds", "0"],
                          capture_output=True, text=True, timeout=120, cwd=root)
    assert done.returncode == 2 and "at least 1" in done.stderr
