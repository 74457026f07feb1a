"""A run of the tiny backbone with every kind of link the viewer shows: retrieved records
(Anti-Persistence), stored abstractions with provenance (abstraction memory), and two
seeds, on the Shop (fast)."""

from __future__ import annotations

import pytest

from ap_gym.protocol import RunConfig, run
from tests.helpers import TINY_AGENT, config


@pytest.fixture(scope="session")
def view_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("view")
    policies = [
        {"name": "no_memory", "options": {"agent": TINY_AGENT["agent"]}},
        {"name": "abstraction", "options": TINY_AGENT},
        {"name": "anti_persistence", "options": TINY_AGENT},
    ]
    return run(RunConfig.from_dict(config(tmp, policies=policies, benchmarks=["shop"], seeds=[0, 1],
                                          train_per_iter=4, heldout=3)), progress=False)
