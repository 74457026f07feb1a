"""The paper's protocol as a package, along its seams.

* :mod:`~ap_gym.protocol.config`: the run config (typed, frozen, validated);
* :mod:`~ap_gym.protocol.results`: the results format (episode lines, load, summarise),
  which ``report`` and ``view`` read without importing the runner;
* :mod:`~ap_gym.protocol.loop`: iterations, the training sample, the held-out subset, resume;
* :mod:`~ap_gym.protocol.executors`: where held-out episodes run (local, Ray).

The runner's names are imported on first use, so ``import ap_gym.protocol.results``
loads the results format alone.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "ConfigError",
    "EpisodeLine",
    "EpisodeLog",
    "PolicySpec",
    "RunConfig",
    "Runner",
    "heldout_subset",
    "load_episodes",
    "load_headers",
    "run",
    "summarise",
    "training_sample",
]

_WHERE = {
    "ConfigError": "config", "PolicySpec": "config", "RunConfig": "config",
    "Runner": "loop", "heldout_subset": "loop", "run": "loop", "training_sample": "loop",
    "EpisodeLine": "results", "EpisodeLog": "results", "load_episodes": "results", "load_headers": "results",
    "summarise": "results",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f"ap_gym.protocol.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'ap_gym.protocol' has no attribute {name!r}")
