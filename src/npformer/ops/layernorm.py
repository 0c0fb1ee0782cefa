"""Layer normalisation over the last axis, as the paper and ``torch.nn.LayerNorm``:

    y = (x - mean) / sqrt(var + eps) * weight + bias,   var biased (divide by C).

Dimension legend: ``...`` leading dims, ``R`` rows (all leading positions), ``C`` normalised features.
The reference op; its forward-only fast twin for inference is ``ops/inference.py layernorm_inference``.
Large arrays run the same code on row blocks (``ops/parallel.py``: one thread unless asked, pinned by
tests/ops/test_parallel.py): every row's values are the same bits; the weight and bias gradients
add the blocks' partial sums in block order, the same for any thread count.
With numba (``ops/kernels.py``) both run the compiled twin ``ops/fused/layernorm.py`` (one pass per row;
tests/ops/test_twins.py).
"""
from __future__ import annotations

import numpy as np

from . import kernels, parallel


def layernorm_forward(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float = 1e-5
                      ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """x (..., C), weight (C,), bias (C,) -> y (..., C). Returns (y, cache)."""
    if kernels.twins("layernorm_forward", x.size) and x.dtype in kernels.FLOATS and x.ndim > 0:
        from .fused import layernorm as twin  # the compiled twin (numba, on first use)
        kernels.record("layernorm_forward", "numba")
        return twin.layernorm_forward(x, weight, bias, eps)
    kernels.record("layernorm_forward", "numpy")
    y, xhat = np.empty_like(x), np.empty_like(x)                   # (..., C)
    rstd = np.empty((*x.shape[:-1], 1), dtype=x.dtype)             # (..., 1)
    if parallel.blocked(x, one_thread_from=parallel.ONE_THREAD_MIN):
        c = x.shape[-1]
        x2, y2, xhat2 = (a.reshape(-1, c) for a in (x, y, xhat))   # (R, C) views
        parallel.map_rows(_forward_block, x2.shape[0], c, x2, weight, bias, eps, y2, xhat2, rstd.reshape(-1, 1))
    else:
        _forward(x, weight, bias, eps, y, xhat, rstd)
    return y, (xhat, rstd, weight)


def _forward_block(rows: slice, x2: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float,
                   y2: np.ndarray, xhat2: np.ndarray, rstd2: np.ndarray) -> None:
    _forward(x2[rows], weight, bias, eps, y2[rows], xhat2[rows], rstd2[rows])


def _forward(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float,
             y: np.ndarray, xhat: np.ndarray, rstd: np.ndarray) -> None:
    """The reference forward into y, xhat (..., C) and rstd (..., 1), on all rows or one block."""
    mean = x.mean(axis=-1, keepdims=True)                         # (..., 1)
    xc = np.subtract(x, mean, out=xhat)                           # (..., C)
    var = np.einsum("...i,...i->...", xc, xc)[..., None] / x.dtype.type(x.shape[-1])  # (..., 1)
    np.divide(1.0, np.sqrt(var + x.dtype.type(eps)), out=rstd)    # (..., 1)
    xhat *= rstd                                                  # (..., C), x - mean normalised in place
    np.multiply(xhat, weight, out=y)                              # (..., C)
    y += bias


def layernorm_backward(dy: np.ndarray, cache: tuple[np.ndarray, np.ndarray, np.ndarray]
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Returns (dx, dweight, dbias)."""
    xhat, rstd, weight = cache
    if kernels.twins("layernorm_backward", xhat.size) and xhat.dtype in kernels.FLOATS and xhat.ndim > 0:
        from .fused import layernorm as twin
        kernels.record("layernorm_backward", "numba")
        return twin.layernorm_backward(dy, cache)
    kernels.record("layernorm_backward", "numpy")
    dx = np.empty_like(xhat)                                      # (..., C)
    if parallel.blocked(dy, xhat, one_thread_from=0):        # the sums depend on the blocks: any thread count
        c = xhat.shape[-1]
        dy2, xhat2, dx2 = (a.reshape(-1, c) for a in (dy, xhat, dx))   # (R, C) views
        parts = parallel.map_rows(_backward_block, dy2.shape[0], c, dy2, xhat2, rstd.reshape(-1, 1), weight, dx2)
        dweight = np.add.reduce(np.stack([p[0] for p in parts]), axis=0)   # (C,) blocks' sums, in block order
        dbias = np.add.reduce(np.stack([p[1] for p in parts]), axis=0)     # (C,)
        return dx, dweight, dbias
    lead = tuple(range(dy.ndim - 1))
    dweight = (dy * xhat).sum(axis=lead)                          # (C,)
    dbias = dy.sum(axis=lead)                                     # (C,)
    _backward(dy, xhat, rstd, weight, dx)
    return dx, dweight, dbias


def _backward_block(rows: slice, dy2: np.ndarray, xhat2: np.ndarray, rstd2: np.ndarray, weight: np.ndarray,
                    dx2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """dx on one block of rows; returns the block's sums of dy * xhat and dy over its rows, (C,) each."""
    dy, xhat = dy2[rows], xhat2[rows]
    _backward(dy, xhat, rstd2[rows], weight, dx2[rows])
    return (dy * xhat).sum(axis=0), dy.sum(axis=0)


def _backward(dy: np.ndarray, xhat: np.ndarray, rstd: np.ndarray, weight: np.ndarray, dx: np.ndarray) -> None:
    """The reference input gradient into dx (..., C), on all rows or one block."""
    c = xhat.shape[-1]
    dxhat = np.multiply(dy, weight, out=dx)                       # (..., C), in dx's memory
    # dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
    m1 = dxhat.mean(axis=-1, keepdims=True)                       # (..., 1)
    m2 = np.einsum("...i,...i->...", dxhat, xhat)[..., None] / xhat.dtype.type(c)  # (..., 1)
    dxhat -= m1
    dxhat -= xhat * m2
    dxhat *= rstd
