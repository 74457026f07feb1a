"""Gymnasium wrappers that each change one thing.

* :class:`RecoveringVectorEnv`: an async vector env whose failure is an infrastructure
  error, started anew on the next reset;
* :class:`RecordEpisode` records every step and builds an :class:`~ap_gym.types.Episode`
  when the episode ends, for users who write their own loop.
* :class:`PutToMove` accepts ALFWorld's old ``put X in/on Y`` as ``move X to Y``.
* :class:`NormalisedReward` divides rewards by the task's ``max_score``.
* :class:`GroupVectorEnv` (with :class:`HoldWhenDone` on each sub-env) runs G copies of
  one task and seed that move through tasks together; :func:`ap_gym.make_vec` builds it.
"""

from __future__ import annotations

from ap_gym.wrappers.action_syntax import PutToMove, put_to_move
from ap_gym.wrappers.group import GroupEpisodeStatistics, GroupVectorEnv, HoldWhenDone
from ap_gym.wrappers.recording import RecordEpisode
from ap_gym.wrappers.recovering import RecoveringVectorEnv
from ap_gym.wrappers.reward import NormalisedReward

__all__ = ["GroupEpisodeStatistics", "GroupVectorEnv", "HoldWhenDone", "NormalisedReward", "PutToMove", "RecordEpisode", "RecoveringVectorEnv",
           "put_to_move"]
