"""Training on ap-gym: the one trainer, episodes as token sequences, and GRPO through TRL.

* :mod:`ap_gym.training.trainer`: :class:`Trainer` (``ap-gym train``): supervised
  fine-tuning on the env's expert demonstrations (:mod:`ap_gym.training.demos`), then
  GRPO, ReBN or GiGPO (:mod:`ap_gym.training.groups`), resumable, with checkpoints
  published atomically with a manifest (:mod:`ap_gym.backbones.checkpoint`).

* :mod:`ap_gym.training.tokens`: play an episode with a transformers backbone through the
  evaluation stepper and prompt, and keep it as token sequences: per turn (the exact
  prompt, the reply, each token's log-probability) and as one sequence (the prompt, then
  the model's tokens interleaved with the environment's answers, masked out).
* :mod:`ap_gym.training.trl`: the adapters for TRL's ``GRPOTrainer``:
  :class:`TRLRollout` (its ``rollout_func``, for any model) and :class:`EnvTools` (its
  ``environment_factory``, for models whose chat template calls tools).

``examples/grpo_torch.py`` and ``benchmarks/learning.py`` are thin callers of the trainer.
"""

from __future__ import annotations

from ap_gym.backbones.checkpoint import (
    Checkpoint,
    CheckpointError,
    publish_checkpoint,
    verify_checkpoint,
    weights_checksum,
)
from ap_gym.training.demos import Demonstration, Demonstrator, demonstrations
from ap_gym.training.tokens import (
    TokenEpisode,
    TokenTurn,
    play_tokens,
    require_valid,
    training_agent,
)
from ap_gym.training.trainer import Guidance, RLStage, SFTStage, TrainConfig, Trainer, TrainError

__all__ = ["Checkpoint", "CheckpointError", "Demonstration", "Demonstrator", "Guidance", "RLStage", "SFTStage", "TokenEpisode",
           "TokenTurn", "TrainConfig", "TrainError", "Trainer", "demonstrations", "play_tokens", "publish_checkpoint",
           "require_valid", "training_agent", "verify_checkpoint", "weights_checksum"]
