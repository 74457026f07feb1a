from __future__ import annotations

import random

import numpy as np
import pytest

from ap_gym.memory import LogEntry
from ap_gym.policies.bandit import MODES, BanditConfig, ModeBandit, mode_reward


def entry(seq, mode, reward, vec):
    v = np.asarray(vec, dtype=np.float32)
    return LogEntry(seq, v / np.linalg.norm(v), mode, reward, "f", "t", reward > 0.5, 0)


def four_entries():
    return [
        entry(1, "none", 0.0, [1, 0]),
        entry(2, "imitation", 1.0, [0.8, 0.6]),
        entry(3, "strategic", 0.95, [1, 0]),
        entry(4, "corrective", -0.05, [0.6, 0.8]),
    ]


@pytest.mark.parametrize(
    ("success", "calls", "lam", "expected"),
    [(True, 0, 0.05, 1.0), (True, 1, 0.05, 0.95), (False, 1, 0.05, -0.05), (False, 0, 0.05, 0.0),
     (True, 3, 0.5, -0.5), (False, 30, 0.05, -1.0), (True, 1, 0.0, 1.0)],
)
def test_reward_is_clipped_outcome_minus_cost(success, calls, lam, expected):
    assert mode_reward(success, calls, lam) == pytest.approx(expected)


def test_round_robin_until_every_mode_is_logged():
    bandit = ModeBandit()
    rng = random.Random(0)
    q = np.array([1, 0], dtype=np.float32)
    log = []
    for expected in MODES:
        choice = bandit.select(q, log, rng)
        assert (choice.mode, choice.reason) == (expected, "round_robin")
        log.append(entry(len(log) + 1, expected, 0.0, [1, 0]))
    assert bandit.select(q, log, rng).reason in ("ucb", "explore", "fallback")


def test_weights_and_ucb_scores_by_hand():
    # weights: sim x 0.998**age -> 0.998**3, 0.8 x 0.998**2, 0.998, 0.6; N = 3.3888152
    choice = ModeBandit().exploit(np.array([1, 0], dtype=np.float32), four_entries())
    assert choice.reason == "ucb" and choice.mean_similarity == pytest.approx(0.85)
    expected = {"none": 0.5540380, "imitation": 1.6188136, "strategic": 1.5029300, "corrective": 0.6631154}
    for mode, value in expected.items():
        assert choice.utilities[mode] == pytest.approx(value, abs=1e-6)
    assert choice.mode == "imitation"


def test_low_similarity_falls_back_to_the_global_best():
    # query [0, 1]: sims 0, 0.6, 0, 0.8 -> mean 0.35 < rho = 0.7
    choice = ModeBandit().exploit(np.array([0, 1], dtype=np.float32), four_entries())
    assert choice.reason == "fallback" and choice.mean_similarity == pytest.approx(0.35)
    assert choice.utilities == pytest.approx({"none": 0.0, "imitation": 1.0, "strategic": 0.95, "corrective": -0.05})
    assert choice.mode == "imitation"
    # global means are recency-weighted: an old success is worth less than a new one
    log = [entry(1, "none", 1.0, [0, 1]), entry(2, "none", 0.0, [0, 1]), *four_entries()[1:]]
    means = ModeBandit(BanditConfig(gamma=0.5)).global_means(log)
    # none: weights 0.5**4 (reward 1) and 0.5**3 (reward 0) -> 0.0625 / 0.1875
    assert means["none"] == pytest.approx(1 / 3)


def test_only_the_nearest_neighbours_count():
    far = [entry(i, "corrective", 1.0, [0.75, 0.66]) for i in range(1, 11)]
    near = [entry(11 + i, m, 0.0, [1, 0.01]) for i, m in enumerate(MODES)]
    choice = ModeBandit(BanditConfig(neighbours=4)).exploit(np.array([1, 0], dtype=np.float32), far + near)
    assert set(choice.neighbour_seqs) == {11, 12, 13, 14}
    assert choice.mode == "none"  # all tied at reward 0 with ~equal weight: the first mode


def test_exploration_rate_is_epsilon():
    log = [entry(i + 1, m, 0.0, [1, 0]) for i, m in enumerate(MODES)]
    rng = random.Random(1)
    q = np.array([1, 0], dtype=np.float32)
    reasons = [ModeBandit().select(q, log, rng).reason for _ in range(4000)]
    assert reasons.count("explore") / 4000 == pytest.approx(0.1, abs=0.015)
    assert set(reasons) == {"explore", "ucb"}


def test_corrective_wins_where_failures_dominate_and_correction_pays():
    """A cluster of tasks where acting on corrective rules succeeds 80 % of the time and
    anything else 10 %: the bandit must learn to pick corrective."""
    bandit = ModeBandit()
    rng = random.Random(7)
    env_rng = np.random.default_rng(7)
    log: list[LogEntry] = []
    picks = []
    for t in range(300):
        vec = np.array([1.0, 0.05 * env_rng.standard_normal()], dtype=np.float32)
        q = vec / np.linalg.norm(vec)
        mode = bandit.select(q, log, rng).mode
        p = 0.8 if mode == "corrective" else 0.1
        success = bool(env_rng.random() < p)
        calls = 0 if mode == "none" else 1
        log.append(LogEntry(t + 1, q, mode, mode_reward(success, calls), "f", "t", success, calls))
        picks.append(mode)
    late = picks[150:]
    assert late.count("corrective") / len(late) > 0.7
