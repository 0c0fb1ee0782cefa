"""Layer norm's twin, forward and backward: one pass over a row for each.

Mirrors ``ops/layernorm.py`` (``_forward``, ``_backward`` and the weight and bias sums); pinned by
tests/ops/test_twins.py (test_layernorm_twin). Sums run in float64 along each row, vectorized
(``_simd``'s row sums: reassociated, one order for any thread count); the weight and bias gradients add
fixed blocks of ROWS rows each, then the blocks in order, so any thread count gives the same bits.
Dimension legend: R rows, C features.
"""
from __future__ import annotations

import numpy as np
from numba import prange

from ..kernels import Kernel
from ._simd import as_dtype_of, row_dots_weighted, row_sq_dev, row_sum

ROWS = 64                     # rows per block of the weight and bias sums (by shape alone)


def _forward(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float,
             y: np.ndarray, xhat: np.ndarray, rstd: np.ndarray) -> None:
    r, c = x.shape
    for i in prange(r):
        xi, yi, hi = x[i], y[i], xhat[i]
        mean = row_sum(xi, 0, c) / c
        rs = 1.0 / np.sqrt(row_sq_dev(xi, mean) / c + eps)
        rstd[i] = rs
        m, s = as_dtype_of(mean, xi), as_dtype_of(rs, xi)  # in x's dtype, as the reference: float32 runs 2x wide
        for j in range(c):
            h = (xi[j] - m) * s
            hi[j] = h
            yi[j] = h * weight[j] + bias[j]


def _backward(dy: np.ndarray, xhat: np.ndarray, rstd: np.ndarray, weight: np.ndarray, dx: np.ndarray,
              parts: np.ndarray) -> None:
    # dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)),  dxhat = dy * weight
    r, c = dy.shape
    for b in prange(parts.shape[0]):
        dw, db = parts[b, 0], parts[b, 1]
        for i in range(b * ROWS, min(r, (b + 1) * ROWS)):
            dyi, hi, dxi = dy[i], xhat[i], dx[i]
            s1, s2 = row_dots_weighted(dyi, weight, hi)
            m1, m2 = as_dtype_of(s1 / c, hi), as_dtype_of(s2 / c, hi)   # in the row's dtype, as the reference
            rs = rstd[i]
            for j in range(c):
                dw[j] += dyi[j] * hi[j]
                db[j] += dyi[j]
                dxi[j] = (dyi[j] * weight[j] - m1 - hi[j] * m2) * rs


forward_kernel = Kernel(_forward)
backward_kernel = Kernel(_backward)


def layernorm_forward(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float
                      ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """As the reference: x (..., C) -> y (..., C), cache (xhat, rstd (..., 1), weight)."""
    c = x.shape[-1]
    x2 = np.ascontiguousarray(x).reshape(-1, c)                       # (R, C)
    y, xhat = np.empty_like(x2), np.empty_like(x2)                    # (R, C)
    rstd = np.empty(x2.shape[0], dtype=x.dtype)                       # (R,)
    forward_kernel(x2, np.ascontiguousarray(weight, x.dtype), np.ascontiguousarray(bias, x.dtype), float(eps),
                   y, xhat, rstd)
    lead = x.shape[:-1]
    return y.reshape(x.shape), (xhat.reshape(x.shape), rstd.reshape(*lead, 1), weight)


def layernorm_backward(dy: np.ndarray, cache: tuple[np.ndarray, np.ndarray, np.ndarray]
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    xhat, rstd, weight = cache
    c = xhat.shape[-1]
    dy2 = np.ascontiguousarray(dy, xhat.dtype).reshape(-1, c)         # (R, C)
    xhat2 = np.ascontiguousarray(xhat).reshape(-1, c)                 # (R, C)
    dx = np.empty_like(xhat2)                                         # (R, C)
    r = dy2.shape[0]
    parts = np.zeros(((r + ROWS - 1) // ROWS, 2, c))                  # (blocks, 2, C) float64 partial sums
    backward_kernel(dy2, xhat2, np.ascontiguousarray(rstd).reshape(-1), np.ascontiguousarray(weight, xhat.dtype),
                    dx, parts)
    sums = np.add.reduce(parts, axis=0) if r else np.zeros((2, c))    # (2, C) the blocks in order
    return dx.reshape(xhat.shape), sums[0].astype(xhat.dtype), sums[1].astype(xhat.dtype)
