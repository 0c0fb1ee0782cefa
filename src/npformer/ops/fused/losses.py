"""Cross-entropy's twin, with label smoothing and ignored rows, forward and backward.

Mirrors ``ops/losses.py`` ``cross_entropy_forward``/``cross_entropy_backward``; pinned by
tests/ops/test_twins.py (test_cross_entropy_twin). The forward reads each row of the logits once and
writes e = exp(logits - max) once (the reference's (N, C) array; the row's max, its shifted values'
sum and exp's sum are taken while the row is in cache), with exp from ``_simd``; the backward is one
pass, e r / s - eps r / C, in the reference's float32 steps. Row sums run in float64 (``_simd``);
the loss adds the rows' losses in row order.
Dimension legend: N rows (tokens), C classes.
"""
from __future__ import annotations

import math

import numpy as np
from numba import prange

from .. import workspace
from ..kernels import Kernel, TwinCache
from ._simd import exp, row_max, row_sum


def _forward(logits: np.ndarray, targets: np.ndarray, valid: np.ndarray, eps: float,
             mx: np.ndarray, s_out: np.ndarray, per_row: np.ndarray, e: np.ndarray) -> None:
    # mx (N,) in the logits' dtype: each row's max; s_out (N,) float64: sum exp(logits - max);
    # per_row (N,): the row's loss, 0 if ignored; e (N, C): exp(logits - max).
    n, c = logits.shape
    for i in prange(n):
        li, z = logits[i], e[i]                    # z: the row of e, z = logits - max then exp(z)
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


def _backward(e: np.ndarray, targets: np.ndarray, w: np.ndarray, dlogits: np.ndarray) -> None:
    # w (N, 3) in the dtype: r / s, eps r / C, (1 - eps) r, with r = dloss / count (0 on ignored rows), formed
    # as the reference forms them: dlogits = e r / s - eps r / C, and (1 - eps) r less at the target (the
    # reference's e (r / s) - shift, then the target's term); e = exp(logits - max), the forward's
    n, c = e.shape
    for i in prange(n):
        ei, di, r, off = e[i], dlogits[i], w[i, 0], w[i, 1]
        for j in range(c):
            di[j] = ei[j] * r - off
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
    e = workspace.empty(logits.shape, logits.dtype)                   # (N, C) exp(logits - max), as the reference's
    forward_kernel(logits, safe_t, valid, float(label_smoothing), mx, s, per_row, e)
    count = int(valid.sum())
    total = 0.0
    for v in per_row.tolist():                                        # row order: any thread count, one sum
        total += v
    with np.errstate(invalid="ignore", divide="ignore"):
        loss = np.asarray(np.float64(total) / np.float64(count), dtype=logits.dtype)
    return loss, TwinCache((e, safe_t, valid, count, float(label_smoothing), mx, s))


def cross_entropy_backward(dloss: float, cache: TwinCache) -> np.ndarray:
    e, safe_t, valid, count, eps, mx, s = cache
    f = e.dtype.type                                                  # the reference's dtype arithmetic:
    r = (valid * (f(dloss) / f(max(count, 1)))).astype(e.dtype)       # (N,) each row's weight, 0 if ignored
    k = f(eps)
    w = np.stack([r / s.astype(e.dtype), k / f(e.shape[1]) * r, (1 - k) * r], axis=1)   # (N, 3)
    dlogits = workspace.empty(e.shape, e.dtype)                       # (N, C) reused, as the reference's
    backward_kernel(e, safe_t, np.ascontiguousarray(w, e.dtype), dlogits)
    return dlogits
