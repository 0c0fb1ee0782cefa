"""Softmax over the last axis, and its backward.

Shapes: any leading dimensions ``...``, softmax over the last one.
Inference attention (``ops/inference.py attention_inference``) exponentiates its scores in place instead.
"""
from __future__ import annotations

import numpy as np


def softmax_forward(x: np.ndarray, out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """y = exp(x - max) / sum(exp(x - max)) over the last axis. Returns (y, cache).

    A row that is all -inf (every key masked) gives a row of zeros, not NaN.
    ``out`` may be ``x`` itself to work in place.
    """
    m = x.max(axis=-1, keepdims=True)                       # (..., 1)
    # an all -inf row has max -inf; subtracting it would give NaN, so use 0
    np.copyto(m, 0, where=~np.isfinite(m))
    y = np.subtract(x, m, out=out)                          # (..., N)
    np.exp(y, out=y)
    s = y.sum(axis=-1, keepdims=True)                       # (..., 1)
    # rows with s == 0 are fully masked: leave their zeros. One reciprocal per row and a
    # plain multiply: a divide with ``where=`` takes numpy's slow masked loop over all of y.
    r = np.zeros_like(s)                                    # (..., 1)
    np.divide(1.0, s, out=r, where=s > 0)
    y *= r
    return y, y


def softmax_backward(dy: np.ndarray, cache: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """dx = y * (dy - sum(dy * y)) over the last axis, never the full Jacobian.
    ``out`` may be ``dy`` itself to work in place."""
    y = cache
    inner = np.einsum("...i,...i->...", dy, y)[..., None]   # (..., 1)
    dx = np.subtract(dy, inner, out=out)                    # (..., N)
    dx *= y
    return dx


def log_softmax(x: np.ndarray) -> np.ndarray:
    """log softmax over the last axis, stable."""
    m = x.max(axis=-1, keepdims=True)                       # (..., 1)
    z = x - m                                               # (..., N)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
