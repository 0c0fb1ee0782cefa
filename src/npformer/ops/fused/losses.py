"""Cross-entropy's twin, with label smoothing and ignored rows, forward and backward.

Mirrors ``ops/losses.py`` ``cross_entropy_forward``/``cross_entropy_backward``; pinned by
tests/ops/test_twins.py (test_cross_entropy_twin). The forward reads the logits once and keeps only
each row's max and log-sum-exp (no (N, C) array); the backward reads them again and writes dlogits
in one pass. Row sums run in float64; the loss adds the rows' losses in row order.
Dimension legend: N rows (tokens), C classes.
"""
from __future__ import annotations

import math

import numpy as np
from numba import prange

from .. import workspace
from ..kernels import Kernel, TwinCache
from ._simd import exp, row_max, row_sum

ROWS = 16                     # rows per parallel chunk of the forward (by shape alone)


def _forward(logits: np.ndarray, targets: np.ndarray, valid: np.ndarray, eps: float,
             mx: np.ndarray, s_out: np.ndarray, per_row: np.ndarray) -> None:
    # mx (N,) in the logits' dtype: each row's max; s_out (N,) float64: sum exp(logits - max);
    # per_row (N,): the row's loss, 0 if ignored. Rows in chunks of ROWS, one scratch row per chunk.
    n, c = logits.shape
    for b in prange((n + ROWS - 1) // ROWS):
        z = np.empty(c, logits.dtype)                  # (C,) this chunk's scratch row
        for i in range(b * ROWS, min(n, (b + 1) * ROWS)):
            li = logits[i]
            m = row_max(li, 0, c)
            for j in range(c):
                z[j] = li[j] - m                       # z = logits - max, in the dtype, as the reference
            zs = row_sum(z, 0, c)
            z_t = z[targets[i]]
            for j in range(c):
                z[j] = exp(z[j])
            s = row_sum(z, 0, c)
            log_s = math.log(s)
            mx[i] = m
            s_out[i] = s
            if valid[i]:
                nll = log_s - z_t
                per_row[i] = (1.0 - eps) * nll + eps * (log_s - zs / c) if eps > 0.0 else nll
            else:
                per_row[i] = 0.0


def _backward(logits: np.ndarray, targets: np.ndarray, mx: np.ndarray, w: np.ndarray, eps: float,
              dlogits: np.ndarray) -> None:
    # w (N, 3): r / s, eps r / C, (1 - eps) r, with r = dloss / count (0 on ignored rows): dlogits =
    # exp(logits - max) r / s - eps r / C, and (1 - eps) r less at the target (the reference's
    # e (r / s) - shift, then the target's term)
    n, c = logits.shape
    for i in prange(n):
        li, di, m, r = logits[i], dlogits[i], mx[i], w[i, 0]
        off = w[i, 1]
        for j in range(c):
            di[j] = exp(li[j] - m) * r - off
        if w[i, 2] != 0.0:                   # through dlogits itself: a store through the row view here
            t = targets[i]                   # was lost in the parallel compilation (numba 0.68.1)
            dlogits[i, t] = dlogits[i, t] - w[i, 2]


forward_kernel = Kernel(_forward)
backward_kernel = Kernel(_backward)


def cross_entropy_forward(logits: np.ndarray, safe_t: np.ndarray, valid: np.ndarray, label_smoothing: float
                          ) -> tuple[np.ndarray, TwinCache]:
    """logits (N, C) C-contiguous float, safe_t (N,) intp in [0, C), valid (N,) bool -> (loss, cache)."""
    n = logits.shape[0]
    mx = np.empty(n, logits.dtype)                                    # (N,) each row's max
    s = np.empty(n)                                                   # (N,) float64 sum exp(logits - max)
    per_row = np.empty(n)                                             # (N,) float64
    forward_kernel(logits, safe_t, valid, float(label_smoothing), mx, s, per_row)
    count = int(valid.sum())
    total = 0.0
    for v in per_row.tolist():                                        # row order: any thread count, one sum
        total += v
    with np.errstate(invalid="ignore", divide="ignore"):
        loss = np.asarray(np.float64(total) / np.float64(count), dtype=logits.dtype)
    return loss, TwinCache((logits, safe_t, valid, count, float(label_smoothing), mx, s))


def cross_entropy_backward(dloss: float, cache: TwinCache) -> np.ndarray:
    logits, safe_t, valid, count, eps, mx, s = cache
    r = valid * (float(dloss) / max(count, 1))                        # (N,) float64 row weights
    w = np.stack([r / s, eps / logits.shape[1] * r, (1.0 - eps) * r], axis=1)   # (N, 3)
    dlogits = workspace.empty(logits.shape, logits.dtype)             # (N, C) reused, as the reference's
    backward_kernel(logits, safe_t, mx, w, eps, dlogits)
    return dlogits
