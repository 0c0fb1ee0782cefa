"""Embedding lookup, and its backward that sums over repeated ids.

Dimension legend: ``...`` index dims, ``V`` vocabulary, ``C`` embedding size.
With numba (``ops/kernels.py``) the backward's scatter-add runs the compiled twin ``ops/fused/embedding.py``
(the same order of additions; tests/ops/test_twins.py).
"""
from __future__ import annotations

import numpy as np

from . import kernels


def embedding_forward(ids: np.ndarray, weight: np.ndarray) -> tuple[np.ndarray, tuple[np.ndarray, tuple[int, ...]]]:
    """ids (...) int, weight (V, C) -> out (..., C). Returns (out, cache)."""
    return weight[ids], (ids, weight.shape)                       # (..., C)


def embedding_backward(dout: np.ndarray, cache: tuple[np.ndarray, tuple[int, ...]],
                       dweight: np.ndarray | None = None) -> np.ndarray:
    """Returns dweight (V, C); rows of ids that repeat get the sum of their gradients.

    dweight: a (V, C) gradient to add the rows into, in place, and return: a tied table's, which
    already holds the output projection's (paper 3.4). Only the looked-up rows are touched, so a
    large vocabulary costs no second (V, C) table. None: start from zeros."""
    ids, shape = cache
    if dweight is None:
        dweight = np.zeros(shape, dtype=dout.dtype)               # (V, C)
    elif dweight.shape != shape or dweight.dtype != dout.dtype:
        raise ValueError(f"dweight must be {shape} {dout.dtype} to add into, got {dweight.shape} {dweight.dtype}")
    if (dweight.dtype in kernels.FLOATS and dweight.flags.c_contiguous
            and kernels.twins("embedding_backward", dout.size)):
        from .fused import embedding as twin  # the compiled twin (numba, on first use)
        kernels.record("embedding_backward", "numba")
        return twin.embedding_backward(ids, dout, dweight)
    kernels.record("embedding_backward", "numpy")
    np.add.at(dweight, ids.reshape(-1), dout.reshape(-1, shape[1]))
    return dweight
