"""Training on ap-gym: episodes as token sequences, and GRPO through TRL.

* :mod:`ap_gym.training.tokens`: play an episode with a transformers backbone through the
  evaluation stepper and prompt, and keep it as token sequences: per turn (the exact
  prompt, the reply, each token's log-probability) and as one sequence (the prompt, then
  the model's tokens interleaved with the environment's answers, masked out).
* :mod:`ap_gym.training.trl`: the adapters for TRL's ``GRPOTrainer``:
  :class:`TRLRollout` (its ``rollout_func``, for any model) and :class:`EnvTools` (its
  ``environment_factory``, for models whose chat template calls tools).

The pure-torch route (group rollouts, GRPO advantages, a policy gradient over the
admissible commands) is ``examples/grpo_torch.py``.
"""

from __future__ import annotations

from ap_gym.training.tokens import (
    TokenEpisode,
    TokenTurn,
    play_tokens,
    require_valid,
    training_agent,
)

__all__ = ["TokenEpisode", "TokenTurn", "play_tokens", "require_valid", "training_agent"]
