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

from ..kernels import Kernel, TwinCache


def _forward(logits: np.ndarray, targets: np.ndarray, valid: np.ndarray, eps: float,
             shift: np.ndarray, per_row: np.ndarray) -> None:
    # shift (N, 2): the row's max and log sum exp(logits - max); per_row (N,): its loss, 0 if ignored
    n, c = logits.shape
    for i in prange(n):
        m = -np.inf
        for j in range(c):
            if logits[i, j] > m:
                m = np.float64(logits[i, j])
        s = 0.0
        zs = 0.0
        for j in range(c):
            z = logits[i, j] - m
            zs += z
            s += math.exp(z)
        log_s = math.log(s)
        shift[i, 0] = m
        shift[i, 1] = log_s
        if valid[i]:
            nll = log_s - (logits[i, targets[i]] - m)
            per_row[i] = (1.0 - eps) * nll + eps * (log_s - zs / c) if eps > 0.0 else nll
        else:
            per_row[i] = 0.0


def _backward(logits: np.ndarray, targets: np.ndarray, shift: np.ndarray, w: np.ndarray, eps: float,
              dlogits: np.ndarray) -> None:
    # dlogits = w_n (softmax - smoothed one-hot); w_n = dloss / count, 0 on ignored rows
    n, c = logits.shape
    for i in prange(n):
        m, log_s, r = shift[i, 0], shift[i, 1], w[i]
        off = eps / c * r
        for j in range(c):
            dlogits[i, j] = math.exp(logits[i, j] - m - log_s) * r - off
        if r != 0.0:
            dlogits[i, targets[i]] = (math.exp(logits[i, targets[i]] - m - log_s) * r - off) - (1.0 - eps) * r


forward_kernel = Kernel(_forward)
backward_kernel = Kernel(_backward)


def cross_entropy_forward(logits: np.ndarray, safe_t: np.ndarray, valid: np.ndarray, label_smoothing: float
                          ) -> tuple[np.ndarray, TwinCache]:
    """logits (N, C) C-contiguous float, safe_t (N,) intp in [0, C), valid (N,) bool -> (loss, cache)."""
    n = logits.shape[0]
    shift = np.empty((n, 2))                                          # (N, 2) float64
    per_row = np.empty(n)                                             # (N,) float64
    forward_kernel(logits, safe_t, valid, float(label_smoothing), shift, per_row)
    count = int(valid.sum())
    total = 0.0
    for v in per_row.tolist():                                        # row order: any thread count, one sum
        total += v
    with np.errstate(invalid="ignore", divide="ignore"):
        loss = np.asarray(np.float64(total) / np.float64(count), dtype=logits.dtype)
    return loss, TwinCache((logits, safe_t, valid, count, float(label_smoothing), shift))


def cross_entropy_backward(dloss: float, cache: TwinCache) -> np.ndarray:
    logits, safe_t, valid, count, eps, shift = cache
    w = valid * (float(dloss) / max(count, 1))                        # (N,) float64 row weights
    dlogits = np.empty_like(logits)                                   # (N, C)
    backward_kernel(logits, safe_t, shift, w, eps, dlogits)
    return dlogits
