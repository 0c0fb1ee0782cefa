"""Clipping by global gradient norm (Pascanu et al. 2013), with the meaning of
``torch.nn.utils.clip_grad_norm_``:

    norm = sqrt(sum over every gradient g of sum(g^2))
    if norm > max_norm: every g *= max_norm / (norm + 1e-6)

One factor for all gradients keeps the update's direction and only shortens it.
"""
from __future__ import annotations

import math

import numpy as np


def global_norm(grads: dict[str, np.ndarray]) -> float:
    """sqrt of the sum of squares of every entry of every gradient (summed in float64)."""
    total = 0.0
    for g in grads.values():
        total += float(np.sum(np.square(g, dtype=np.float64)))
    return math.sqrt(total)


def clip_by_global_norm(grads: dict[str, np.ndarray], max_norm: float) -> float:
    """Scale ``grads`` in place so their global norm is at most ``max_norm``.
    Returns the norm before clipping (inf or nan when a gradient is not finite; then nothing is scaled)."""
    if not max_norm > 0:
        raise ValueError(f"max_norm must be > 0, got {max_norm}")
    norm = global_norm(grads)
    if math.isfinite(norm) and norm > max_norm:
        coef = max_norm / (norm + 1e-6)
        for g in grads.values():
            g *= g.dtype.type(coef)
    return norm
