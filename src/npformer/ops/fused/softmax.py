"""Softmax's twin, with the attention's scale and boolean mask fused in, forward and backward:
one pass to read a row's scores, one to write its weights.

Mirrors ``ops/softmax.py`` ``softmax_forward``/``softmax_backward`` (with their ``scale`` and
``mask``); pinned by tests/ops/test_twins.py (test_softmax_twin). Masked positions and rows with
every key masked give exact zeros, as the reference. Row sums run in float64.
Dimension legend: R rows (all leading positions), N the softmax axis.
"""
from __future__ import annotations

import math

import numpy as np
from numba import prange

from ..kernels import Kernel


def _forward(x: np.ndarray, scale: float, mask: np.ndarray, y: np.ndarray) -> None:
    # x, y (R, N), y may be x; mask (R, N) bool (True: may attend) or (0, 0) for none
    r, n = x.shape
    masked = mask.size > 0
    for i in prange(r):
        m = -np.inf
        for j in range(n):
            if not masked or mask[i, j]:
                v = x[i, j] * scale
                if v > m:
                    m = v
        if not math.isfinite(m):       # every key masked (or -inf): 0, as the reference
            m = 0.0
        s = 0.0
        for j in range(n):
            if not masked or mask[i, j]:
                e = math.exp(x[i, j] * scale - m)
                y[i, j] = e
                s += e
            else:
                y[i, j] = 0.0
        inv = 1.0 / s if s > 0.0 else 0.0
        for j in range(n):
            y[i, j] = y[i, j] * inv


def _backward(dy: np.ndarray, y: np.ndarray, scale: float, dx: np.ndarray) -> None:
    # dx = scale * y * (dy - sum(dy * y)), per row; dx may be dy
    r, n = dy.shape
    for i in prange(r):
        s = 0.0
        for j in range(n):
            s += dy[i, j] * np.float64(y[i, j])
        for j in range(n):
            dx[i, j] = scale * (y[i, j] * (dy[i, j] - s))


forward_kernel = Kernel(_forward)
backward_kernel = Kernel(_backward)


def softmax_forward(x: np.ndarray, out: np.ndarray | None, scale: float, mask: np.ndarray | None
                    ) -> tuple[np.ndarray, np.ndarray]:
    """y = softmax(scale * x, masked) over the last axis; ``out`` may be x. Returns (y, y)."""
    n = x.shape[-1]
    y = np.empty(x.shape, x.dtype) if out is None else out            # (..., N)
    x2, y2 = x.reshape(-1, n), y.reshape(-1, n)                       # (R, N) views (checked contiguous)
    m2 = np.zeros((0, 0), bool) if mask is None else \
        np.ascontiguousarray(np.broadcast_to(mask, x.shape), dtype=bool).reshape(-1, n)   # (R, N)
    forward_kernel(x2, float(scale), m2, y2)
    return y, y


def softmax_backward(dy: np.ndarray, y: np.ndarray, out: np.ndarray | None, scale: float) -> np.ndarray:
    n = y.shape[-1]
    dx = np.empty(y.shape, y.dtype) if out is None else out           # (..., N)
    backward_kernel(np.ascontiguousarray(dy, y.dtype).reshape(-1, n), y.reshape(-1, n), float(scale),
                    dx.reshape(-1, n))
    return dx
