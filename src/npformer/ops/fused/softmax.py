"""Softmax's twin, with the attention's scale and boolean mask fused in, forward and backward:
one pass to read a row's scores, one to write its weights.

Mirrors ``ops/softmax.py`` ``softmax_forward``/``softmax_backward`` (with their ``scale`` and
``mask``); pinned by tests/ops/test_twins.py (test_softmax_twin). Masked positions and rows with
every key masked give exact zeros, as the reference. Row sums run in float64. A block whose scores
all lie within +-EXP_SAFE skips the rows' maxima (the reference subtracts them; the same softmax, to
float32's rounding): bench_twins.py --only softmax --rows 512 (32 keys a row) took the twin from 0.62 to
0.49 of the reference's time (docs/DESIGN.md).
Dimension legend: R rows (all leading positions), N the softmax axis.
"""
from __future__ import annotations

import math

import numpy as np
from numba import prange

from ..inference import EXP_SAFE
from ..kernels import Kernel
from ._simd import abs_max_finite, exp, row_dot, row_max, row_sum

RB = 32                       # rows per task: their exp runs as one long loop over the rows' memory


def _forward(x: np.ndarray, scale: np.ndarray, mask: np.ndarray, y: np.ndarray) -> None:
    # x, y (R, N), y may be x; scale (1,) in x's dtype; mask (R, N) bool (True: may attend) or (0, 0)
    # for none. A block of RB rows at a time, each pass one loop over the block's memory (a short row's
    # vector loop would spend much of its time in its scalar remainder): y = scale x (-inf where
    # masked); the largest |y| over the unmasked entries; only when it exceeds EXP_SAFE, each row minus
    # its max (softmax(s) = softmax(s - c); within +-EXP_SAFE exp neither overflows nor loses precision,
    # as attention_inference's bound); exp; then per row its sum and y / sum. The block stays in cache.
    r, n = x.shape
    masked = mask.size > 0
    s = scale[0]
    zero = s - s
    for b in prange((r + RB - 1) // RB):
        lo = b * RB
        hi = min(r, lo + RB)
        xb, yb = x[lo:hi].reshape(-1), y[lo:hi].reshape(-1)        # (rows x N,) contiguous: x, y are C-ordered
        if masked:
            mb = mask[lo:hi].reshape(-1)
            for j in range(yb.size):
                yb[j] = xb[j] * s if mb[j] else -np.inf
        else:
            for j in range(yb.size):
                yb[j] = xb[j] * s
        if not abs_max_finite(yb) <= EXP_SAFE:             # NaN too: then the row maxima, as before
            for i in range(lo, hi):
                yi = y[i]
                m = row_max(yi, 0, n)
                if not math.isfinite(m):   # every key masked (or -inf): 0, as the reference
                    m = zero
                for j in range(n):
                    yi[j] = yi[j] - m
        for j in range(yb.size):
            yb[j] = exp(yb[j])         # in x's dtype; masked: exp(-inf) = 0 exactly
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
