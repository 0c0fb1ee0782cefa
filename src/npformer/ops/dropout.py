"""Inverted dropout: keep each element with probability 1 - p and scale it by 1 / (1 - p),
so the expected value is unchanged and inference needs no rescaling."""
from __future__ import annotations

import numpy as np


def dropout_forward(x: np.ndarray, p: float, rng: np.random.Generator | None, training: bool = True,
                    out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """Returns (y, cache). Identity when not training or p == 0.
    ``out`` may be ``x`` itself, to drop in place when the caller owns x and needs it no more."""
    if not training or p == 0.0:
        return x, None
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout p must be in [0, 1), got {p}")
    if rng is None:
        raise ValueError("dropout in training needs an explicit rng (np.random.Generator)")
    scale = x.dtype.type(1.0 / (1.0 - p))
    # float32 draws (half the generator's work of float64) for any x; keep * scale makes the
    # (0 or scale) mask in x's dtype in one pass
    mask = (rng.random(x.shape, dtype=np.float32) >= np.float32(p)) * scale  # (...)
    return np.multiply(x, mask, out=out), mask


def dropout_backward(dy: np.ndarray, cache: np.ndarray | None, out: np.ndarray | None = None) -> np.ndarray:
    """dx = dy * mask; ``out`` may be ``dy`` itself (in place)."""
    mask = cache
    return dy if mask is None else np.multiply(dy, mask, out=out)
