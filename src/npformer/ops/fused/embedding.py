"""The embedding backward's twin: the scatter-add of dout's rows into the table's gradient.

Mirrors ``ops/embedding.py embedding_backward`` (``np.add.at``); pinned by tests/ops/test_twins.py
(test_embedding_twin). Threads split the columns, never the ids: each element adds its rows in the
ids' order, as ``np.add.at`` does, so the bits are the reference's on any thread count.
Dimension legend: N looked-up positions, V vocabulary, C embedding size.
"""
from __future__ import annotations

import numpy as np
from numba import prange

from ..kernels import Kernel

COLS = 16                     # columns per parallel chunk


def _scatter_add(ids: np.ndarray, dout: np.ndarray, dweight: np.ndarray) -> None:
    # dweight[ids[i], :] += dout[i, :] for i in order; ids (N,) in [0, V), dout (N, C), dweight (V, C)
    n, c = dout.shape
    for b in prange((c + COLS - 1) // COLS):
        lo, hi = b * COLS, min(c, (b + 1) * COLS)
        for i in range(n):
            row = ids[i]
            for j in range(lo, hi):
                dweight[row, j] += dout[i, j]


kernel = Kernel(_scatter_add)


def embedding_backward(ids: np.ndarray, dout: np.ndarray, dweight: np.ndarray) -> np.ndarray:
    """Adds dout (..., C) into dweight (V, C) C-contiguous at ids (...); returns dweight."""
    v, c = dweight.shape
    flat = np.asarray(ids, dtype=np.intp).reshape(-1)                 # (N,)
    if flat.size:
        lo, hi = int(flat.min()), int(flat.max())
        if lo < -v or hi >= v:
            bad = lo if lo < -v else hi
            raise IndexError(f"index {bad} is out of bounds for axis 0 with size {v}")
        if lo < 0:
            flat = np.where(flat < 0, flat + v, flat)                 # (N,) numpy's negative indices
    kernel(flat, np.ascontiguousarray(dout).reshape(-1, c), dweight)
    return dweight
