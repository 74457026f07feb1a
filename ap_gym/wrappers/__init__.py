"""Gymnasium wrappers that each change one thing.

* :class:`RecordEpisode` records every step and builds an :class:`~ap_gym.types.Episode`
  when the episode ends, for users who write their own loop.
"""

from __future__ import annotations

from ap_gym.wrappers.recording import RecordEpisode

__all__ = ["RecordEpisode"]
