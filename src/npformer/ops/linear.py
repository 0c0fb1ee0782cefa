"""Linear map y = x W^T + b, with W stored (out, in) as in ``torch.nn.Linear``.

Dimension legend: ``...`` leading dims, ``N`` all leading positions together, ``I`` input
features, ``O`` output features.

Every product is taken on 2-D (N, I) views: numpy's matmul makes one BLAS call per leading
index of a 3-D operand (B calls of T rows, each streaming all of W), where one (N, I) call is
several times faster. W^T and dy^T are transposed views; BLAS reads them without a copy.
The products are written into ``workspace`` arrays: large ones are reused across training steps
once nobody holds them, instead of being faulted in afresh from the operating system each step.
"""
from __future__ import annotations

import numpy as np

from . import workspace


def _product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a (N, K) @ b (K, M) -> (N, M), into a workspace array."""
    out = workspace.empty((a.shape[0], b.shape[1]), np.result_type(a, b))   # (N, M)
    return np.matmul(a, b, out=out)


def linear_forward(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, bias_later: bool = False
                   ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, bool]]:
    """x (..., I), w (O, I), b (O,) -> y (..., O). Returns (y, cache).
    bias_later: y is x W^T alone, the caller adds b itself (the FFN's fused bias + GELU twin); the
    cache is the same, so the backward still gives db."""
    x2 = x.reshape(-1, x.shape[-1])                               # (N, I), a view when x is contiguous
    y = _product(x2, w.T)                                         # (N, O)
    if b is not None and not bias_later:
        y += b
    return y.reshape(*x.shape[:-1], w.shape[0]), (x, w, b is not None)


def linear_backward(dy: np.ndarray, cache: tuple[np.ndarray, np.ndarray, bool]
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Returns (dx, dw, db); db is None when the forward had no bias."""
    x, w, has_bias = cache
    x2 = x.reshape(-1, x.shape[-1])                               # (N, I)
    dy2 = dy.reshape(-1, dy.shape[-1])                            # (N, O)
    dx = _product(dy2, w).reshape(x.shape)                        # (..., I)
    dw = _product(dy2.T, x2)                                      # (O, I)
    db = dy2.sum(axis=0) if has_bias else None                    # (O,)
    return dx, dw, db
