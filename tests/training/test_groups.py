"""Group rollouts for policy gradients: a group of stochastic attempts shares its start and
differs after it, replays exactly for a seed, and the three rules' advantages hold their
definitions on real trajectories."""

from __future__ import annotations

import numpy as np
import pytest

from ap_gym.training.groups import RULES, play_groups, training_choose_agent
from tests.helpers import register_dial

ENV = register_dial()


def _play(backbone, seed):
    # T = 30: the tiny random model is near-sure of one command at T = 1; a flatter softmax samples
    agent = training_choose_agent(30.0)
    return play_groups(backbone, ENV, [("dial/3", 5), ("dial/2", 6)], 4, agent=agent, sample_seed=seed,
                       lanes=4, env_kwargs={"split": "train"})


def test_a_group_of_stochastic_attempts_differs_and_replays_for_its_seed(tiny_backbone):
    trajectories = _play(tiny_backbone, 0)
    assert [t.group for t in trajectories] == [0] * 4 + [1] * 4
    for k in (0, 1):
        group = [t for t in trajectories if t.group == k]
        assert len({t.episode.initial_observation for t in group}) == 1  # one start
        paths = {tuple(s.action for s in t.episode.steps) for t in group}
        assert len(paths) > 1, f"group {k}: every attempt played {paths}"  # distinct agent seeds
    again = _play(tiny_backbone, 0)
    assert [[s.action for s in t.episode.steps] for t in again] == \
        [[s.action for s in t.episode.steps] for t in trajectories]
    for t in trajectories:
        for d in t.decisions:
            assert sorted(d.candidates) == [f"turn {i}" for i in range(10)] and np.isfinite(d.logprob) and d.logprob < 0


@pytest.mark.parametrize("rule", sorted(RULES))
def test_advantages_hold_their_definitions(tiny_backbone, rule):
    trajectories = _play(tiny_backbone, 1)
    advantages = RULES[rule](trajectories)
    assert [len(a) for a in advantages] == [len(t.decisions) for t in trajectories]
    if rule == "grpo":  # one value per attempt, zero mean within each group
        for k in (0, 1):
            values = [float(a[0]) for a, t in zip(advantages, trajectories, strict=True) if t.group == k]
            assert all(np.allclose(a, a[0]) for a in advantages) and abs(sum(values)) < 1e-6
    elif rule == "rebn":  # normalised over every decision of the batch
        flat = np.concatenate(advantages)
        assert abs(flat.mean()) < 1e-6 and (flat.std() < 1e-3 or abs(flat.std() - 1) < 1e-3)
    else:  # GRPO's plus a step term; the first decisions of a group share the start: an anchor state
        grpo = RULES["grpo"](trajectories)
        for k in (0, 1):
            first = [float(a[0] - g[0]) for a, g, t in zip(advantages, grpo, trajectories, strict=True) if t.group == k]
            assert abs(sum(first)) < 1e-6
