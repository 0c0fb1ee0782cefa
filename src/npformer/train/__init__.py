"""Training: the optimizer, learning-rate schedules, gradient clipping, checkpoints and the loop.

The loop (``npformer.train.trainer``) and the run directories (``npformer.train.checkpoint``)
are imported from their modules; this package re-exports the small pieces.
"""
from .clip import clip_by_global_norm, global_norm
from .optim import Adam, AdamW
from .schedules import cosine_lr, make_schedule, noam_lr

__all__ = ["Adam", "AdamW", "clip_by_global_norm", "cosine_lr", "global_norm", "make_schedule", "noam_lr"]
