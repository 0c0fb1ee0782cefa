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
from ._simd import exp, row_dot, row_max, row_sum

RB = 32                       # rows per task: their exp runs as one long loop over the rows' memory


def _forward(x: np.ndarray, scale: np.ndarray, mask: np.ndarray, y: np.ndarray) -> None:
    # x, y (R, N), y may be x; scale (1,) in x's dtype; mask (R, N) bool (True: may attend) or (0, 0)
    # for none. Per row: y = scale x (-inf where masked), minus its max; then exp over a block of RB
    # rows at once (a short row's vector loop would spend much of its time in its scalar remainder);
    # then per row their sum and y / sum. Each a loop that LLVM vectorizes; the block stays in cache
    r, n = x.shape
    masked = mask.size > 0
    s = scale[0]
    zero = s - s
    for b in prange((r + RB - 1) // RB):
        lo = b * RB
        hi = min(r, lo + RB)
        for i in range(lo, hi):
            xi, yi = x[i], y[i]
            if masked:
                mi = mask[i]
                for j in range(n):
                    yi[j] = xi[j] * s if mi[j] else -np.inf
            else:
                for j in range(n):
                    yi[j] = xi[j] * s
            m = row_max(yi, 0, n)
            if not math.isfinite(m):   # every key masked (or -inf): 0, as the reference
                m = zero
            for j in range(n):
                yi[j] = yi[j] - m
        block = y[lo:hi].reshape(-1)   # (rows x N,) contiguous: y is C-contiguous
        for j in range(block.size):
            block[j] = exp(block[j])   # in x's dtype; masked: exp(-inf) = 0 exactly
        for i in range(lo, hi):
            yi = y[i]
            t = row_sum(yi, 0, n)
            inv = 1.0 / t if t > 0.0 else 0.0
            for j in range(n):
                yi[j] = yi[j] * inv


def _backward(dy: np.ndarray, y: np.ndarray, scale: np.ndarray, dx: np.ndarray) -> None:
    # dx = scale * y * (dy - sum(dy * y)), per row; dx may be dy; scale (1,) in the dtype
    r, n = dy.shape
    sc = scale[0]
    for i in prange(r):
        dyi, yi, dxi = dy[i], y[i], dx[i]
        t = row_dot(dyi, yi, 0, n)
        for j in range(n):
            dxi[j] = (yi[j] * (dyi[j] - t)) * sc


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
    forward_kernel(x2, np.array([scale], x.dtype), m2, y2)
    return y, y


def softmax_backward(dy: np.ndarray, y: np.ndarray, out: np.ndarray | None, scale: float) -> np.ndarray:
    n = y.shape[-1]
    dx = np.empty(y.shape, y.dtype) if out is None else out           # (..., N)
    backward_kernel(np.ascontiguousarray(dy, y.dtype).reshape(-1, n), y.reshape(-1, n), np.array([scale], y.dtype),
                    dx.reshape(-1, n))
    return dx
