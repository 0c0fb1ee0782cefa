"""Linear map y = x W^T + b, with W stored (out, in) as in ``torch.nn.Linear``.

Dimension legend: ``...`` leading dims, ``I`` input features, ``O`` output features.
"""
from __future__ import annotations

import numpy as np


def linear_forward(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None):
    """x (..., I), w (O, I), b (O,) -> y (..., O). Returns (y, cache)."""
    y = x @ w.T                                                   # (..., O)
    if b is not None:
        y += b
    return y, (x, w, b is not None)


def linear_backward(dy: np.ndarray, cache):
    """Returns (dx, dw, db); db is None when the forward had no bias."""
    x, w, has_bias = cache
    x2 = x.reshape(-1, x.shape[-1])                               # (N, I)
    dy2 = dy.reshape(-1, dy.shape[-1])                            # (N, O)
    dx = dy @ w                                                   # (..., I)
    dw = dy2.T @ x2                                               # (O, I)
    db = dy2.sum(axis=0) if has_bias else None                    # (O,)
    return dx, dw, db
