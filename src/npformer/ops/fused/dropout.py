"""Dropout's twin fused with the residual add: out = y * mask + x in one pass, mask kept.

Mirrors ``ops/dropout.py dropout_add_forward`` (``dropout_forward`` then the residual sum); pinned
by tests/ops/test_twins.py (test_dropout_add_twin). The random draws are the reference's own,
made with NumPy by ``ops/dropout.py keep_draws`` from the same ``rng``: the masks are the same.
Dimension legend: N elements (flat).
"""
from __future__ import annotations

import numpy as np
from numba import prange

from ..kernels import Kernel

CHUNK = 1 << 16


def _dropout_add(y: np.ndarray, x: np.ndarray, keep: np.ndarray, scale: np.ndarray, out: np.ndarray,
                 mask: np.ndarray) -> None:
    # y, x, out, mask (N,); keep (N,) bool; scale (1,) in the dtype. out may be y.
    n = y.size
    s = scale[0]
    zero = scale[0] - scale[0]
    for c in prange((n + CHUNK - 1) // CHUNK):
        lo, hi = c * CHUNK, min(n, (c + 1) * CHUNK)
        yc, xc, kc, oc, mc = y[lo:hi], x[lo:hi], keep[lo:hi], out[lo:hi], mask[lo:hi]   # indexed from 0:
        for i in range(hi - lo):                                                          # LLVM vectorizes
            m = s if kc[i] else zero
            mc[i] = m
            oc[i] = yc[i] * m + xc[i]


kernel = Kernel(_dropout_add)


def dropout_add_forward(y: np.ndarray, x: np.ndarray, keep: np.ndarray, scale: np.floating,
                        out: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """(y * mask + x, mask), mask = keep * scale; all C-contiguous of one shape and dtype."""
    res = np.empty_like(y) if out is None else out                     # (...)
    mask = np.empty_like(y)                                            # (...)
    kernel(y.reshape(-1), x.reshape(-1), keep.reshape(-1), np.array([scale], y.dtype), res.reshape(-1),
           mask.reshape(-1))
    return res, mask
