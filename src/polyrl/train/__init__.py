"""Train: GRPO-family losses, the trainer loop, curriculum, replay, checkpoints.

Public API::

    from polyrl.train import (Trainer, grpo_loss, group_advantages, Curriculum,
                              ReplayBuffer, save_checkpoint, load_checkpoint)
"""

from polyrl.train.advantages import group_advantages, overlong_penalty, zero_variance
from polyrl.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from polyrl.train.curriculum import Curriculum
from polyrl.train.groups import Group, build_groups
from polyrl.train.logprobs import dense_logprobs, shared_prefix_logprobs
from polyrl.train.losses import LOSS_AGGREGATIONS, LossOutput, grpo_loss, kl_penalty
from polyrl.train.replay import ReplayBuffer
from polyrl.train.trainer import Trainer
from polyrl.train.update import UpdateOptions, UpdateStats, policy_update

__all__ = [
    "LOSS_AGGREGATIONS",
    "Curriculum",
    "Group",
    "LossOutput",
    "ReplayBuffer",
    "Trainer",
    "UpdateOptions",
    "UpdateStats",
    "build_groups",
    "dense_logprobs",
    "group_advantages",
    "grpo_loss",
    "kl_penalty",
    "latest_checkpoint",
    "load_checkpoint",
    "overlong_penalty",
    "policy_update",
    "save_checkpoint",
    "shared_prefix_logprobs",
    "zero_variance",
]
