"""Embedding lookup, and its backward that sums over repeated ids.

Dimension legend: ``...`` index dims, ``V`` vocabulary, ``C`` embedding size.
"""
from __future__ import annotations

import numpy as np


def embedding_forward(ids: np.ndarray, weight: np.ndarray):
    """ids (...) int, weight (V, C) -> out (..., C). Returns (out, cache)."""
    return weight[ids], (ids, weight.shape)                       # (..., C)


def embedding_backward(dout: np.ndarray, cache) -> np.ndarray:
    """Returns dweight (V, C); rows of ids that repeat get the sum of their gradients."""
    ids, shape = cache
    dweight = np.zeros(shape, dtype=dout.dtype)                   # (V, C)
    np.add.at(dweight, ids.reshape(-1), dout.reshape(-1, shape[1]))
    return dweight
