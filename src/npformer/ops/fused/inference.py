"""The inference twins: exact GELU in place with its bias, and LayerNorm of a residual sum, forward only.

Mirror ``ops/inference.py`` ``gelu_inference_`` (with its ``bias``) and ``layernorm_inference`` (with its
``residual``); pinned by tests/ops/test_twins.py (test_gelu_inference_twin, test_layernorm_inference_twin).

- ``gelu_inplace``: x <- gelu(x + bias), float32 (the reference takes float32 only), one pass over x.
  Phi is the GELU twin's (``fused/activations.py``): the reference's own fitted erf, operation for
  operation, and its erfc tail below x = -2 sqrt(2). Written in place, each 64-element sub-block is
  first counted for tail elements (before they are overwritten), then goes through the branch-free
  loop, or, when it holds one, element by element.
- ``layernorm``: y = LN(x + residual), or LN(x), in x's dtype; ``y`` may be ``x``. The residual sum,
  the row's mean and variance and the output in one kernel: the sum is written first (into y), then
  its float64 sums (``_simd``'s, one order), then y over it.
Work is split by the array's shape alone: the same bits on any number of threads.
Dimension legend: R rows, C features.
"""
from __future__ import annotations

import numpy as np
from numba import prange

from ..kernels import Kernel
from ._simd import as_dtype_of, row_sq_dev, row_sum
from .activations import SEG, SUB, _consts, _phi, _rows, _span, _tail


def _gelu(x: np.ndarray, bias: np.ndarray, k: np.ndarray) -> None:
    # x (R, C) in place; bias (C,) or (0,) for none; k: activations.CONSTS in x's dtype
    r, c = x.shape
    has_bias = bias.size > 0
    nseg = (c + SEG - 1) // SEG
    for task in prange(r * nseg):
        i, lo, m = _span(task, nseg, c)
        xi = x[i, lo:lo + m]                               # a view indexed from 0: LLVM vectorizes
        if has_bias:
            bi = bias[lo:lo + m]
            for j in range(m):
                xi[j] = xi[j] + bi[j]
        cut = _tail(xi[0])[0]                              # the reference's tail, below x = -2 sqrt(2)
        for s0 in range(0, m, SUB):
            xs = xi[s0:s0 + SUB]
            below = 0
            for j in range(xs.size):                       # a count alone: vectorized
                below += xs[j] < cut
            if below:                                      # few sub-blocks: element by element
                for j in range(xs.size):
                    v = xs[j]
                    xs[j] = v * _tail(v)[1] if v < cut else _phi(v, k)[0]
            else:
                for j in range(xs.size):                   # no branch: vectorized
                    xs[j] = _phi(xs[j], k)[0]


def _layernorm(x: np.ndarray, res: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float,
               y: np.ndarray) -> None:
    # x, y (R, C), y may be x; res (R, C) or (0, C) for none; weight, bias (C,)
    r, c = x.shape
    has_res = res.shape[0] > 0
    for i in prange(r):
        xi, yi = x[i], y[i]
        if has_res:
            ri = res[i]
            for j in range(c):
                yi[j] = xi[j] + ri[j]
            xi = yi
        mean = row_sum(xi, 0, c) / c
        rs = 1.0 / np.sqrt(row_sq_dev(xi, mean) / c + eps)
        m, s = as_dtype_of(mean, xi), as_dtype_of(rs, xi)  # in x's dtype, as the reference: float32 runs 2x wide
        for j in range(c):
            yi[j] = ((xi[j] - m) * s) * weight[j] + bias[j]


gelu_kernel = Kernel(_gelu)
layernorm_kernel = Kernel(_layernorm)


def gelu_inplace(x: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """x (..., C) float32, C-contiguous, <- gelu(x + bias); returns x."""
    b = np.empty(0, x.dtype) if bias is None else np.ascontiguousarray(bias, x.dtype)   # (C,) or (0,)
    gelu_kernel(_rows(x), b, _consts(x.dtype))                         # (R, C), a view of x: in place
    return x


def layernorm(x: np.ndarray, residual: np.ndarray | None, weight: np.ndarray, bias: np.ndarray, eps: float,
              out: np.ndarray) -> np.ndarray:
    """out (..., C) <- LN(x + residual) (or LN(x)); x, residual and out C-contiguous, of one dtype."""
    c = x.shape[-1]
    x2, y2 = x.reshape(-1, c), out.reshape(-1, c)                        # (R, C) views
    res2 = np.empty((0, c), x.dtype) if residual is None else residual.reshape(-1, c)   # (R, C) or (0, C)
    layernorm_kernel(x2, res2, np.ascontiguousarray(weight, x.dtype), np.ascontiguousarray(bias, x.dtype),
                     float(eps), y2)
    return out
