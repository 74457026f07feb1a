"""Gymnasium wrappers that each change one thing.

* :class:`RecordEpisode` records every step and builds an :class:`~ap_gym.types.Episode`
  when the episode ends, for users who write their own loop.
* :class:`PutToMove` accepts ALFWorld's old ``put X in/on Y`` as ``move X to Y``.
"""

from __future__ import annotations

from ap_gym.wrappers.action_syntax import PutToMove, put_to_move
from ap_gym.wrappers.recording import RecordEpisode

__all__ = ["PutToMove", "RecordEpisode", "put_to_move"]
