"""Game generation runs in a helper process: a native crash there is an error, not a dead caller."""

from __future__ import annotations

import os

import pytest

from ap_gym.envs.isolated import isolated
from ap_gym.errors import EnvInfrastructureError


def _crash() -> None:
    os.abort()  # as a segfaulting native library would


def _pid() -> int:
    return os.getpid()


def test_a_crashing_helper_is_retried_then_reported():
    with pytest.raises(EnvInfrastructureError, match="crashed its helper process twice"):
        isolated(_crash, what="a crash")
    assert isolated(_pid) != os.getpid()  # a new helper does the next job


def test_a_game_is_generated_in_the_helper_on_an_empty_cache(tmp_path, monkeypatch):
    from ap_gym.envs.textworld import default_suite, ensure_game

    monkeypatch.setenv("AP_GYM_CACHE", str(tmp_path))
    spec = default_suite()["test"][0]
    game = ensure_game(spec)
    assert game.exists() and str(game).startswith(str(tmp_path))
