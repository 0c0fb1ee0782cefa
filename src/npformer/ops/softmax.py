"""Softmax over the last axis, and its backward.

Shapes: any leading dimensions ``...``, softmax over the last one.
Inference attention (``ops/inference.py attention_inference``) exponentiates its scores in place instead.
Large arrays run the same code on row blocks (``ops/parallel.py``; the twin is
pinned by tests/ops/test_parallel.py): each row's result is the same bits either way.
With numba (``ops/kernels.py``) both directions run the compiled twin ``ops/fused/softmax.py``, with
attention's scale and mask fused in (tests/ops/test_twins.py).
"""
from __future__ import annotations

import numpy as np

from . import kernels, parallel


def softmax_forward(x: np.ndarray, out: np.ndarray | None = None, scale: float | None = None,
                    mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """y = exp(x - max) / sum(exp(x - max)) over the last axis. Returns (y, cache).

    A row that is all -inf (every key masked) gives a row of zeros, not NaN.
    ``out`` may be ``x`` itself to work in place. scale: the softmax of ``scale * x``; mask: boolean,
    broadcastable to x, False where a position gets weight 0 (attention's; the twin fuses both in).
    """
    if _twin_ok("softmax_forward", x, out):
        from .fused import softmax as twin  # the compiled twin (numba, on first use)
        kernels.record("softmax_forward", "numba")
        return twin.softmax_forward(x, out, 1.0 if scale is None else scale, mask)
    kernels.record("softmax_forward", "numpy")
    if scale is not None:
        x = np.multiply(x, x.dtype.type(scale), out=out)            # (..., N)
        out = x
    if mask is not None:
        if out is None:
            x = out = x.copy()                                      # (..., N)
        x += np.where(mask, x.dtype.type(0), x.dtype.type(-np.inf))  # (mask's own broadcast shape)
    if parallel.blocked(x, out, one_thread_from=parallel.ONE_THREAD_MIN):
        y = np.empty_like(x) if out is None else out                # (..., N)
        n = x.shape[-1]
        x2, y2 = x.reshape(-1, n), y.reshape(-1, n)                 # (R, N) views
        parallel.map_rows(_softmax_block, x2.shape[0], n, x2, y2)
        return y, y
    return _softmax(x, out)


def _softmax_block(rows: slice, x2: np.ndarray, y2: np.ndarray) -> None:
    _softmax(x2[rows], y2[rows])


def _softmax(x: np.ndarray, out: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """The reference forward (on the whole array, or on one block of rows)."""
    m = x.max(axis=-1, keepdims=True)                       # (..., 1)
    # an all -inf row has max -inf; subtracting it would give NaN, so use 0
    np.copyto(m, 0, where=~np.isfinite(m))
    y = np.subtract(x, m, out=out)                          # (..., N)
    np.exp(y, out=y)
    s = y.sum(axis=-1, keepdims=True)                       # (..., 1)
    # rows with s == 0 are fully masked: leave their zeros. One reciprocal per row and a
    # plain multiply: a divide with ``where=`` takes numpy's slow masked loop over all of y.
    r = np.zeros_like(s)                                    # (..., 1)
    np.divide(1.0, s, out=r, where=s > 0)
    y *= r
    return y, y


def softmax_backward(dy: np.ndarray, cache: np.ndarray, out: np.ndarray | None = None,
                     scale: float | None = None) -> np.ndarray:
    """dx = y * (dy - sum(dy * y)) over the last axis, never the full Jacobian.
    ``out`` may be ``dy`` itself to work in place. scale: the forward's, multiplied into dx."""
    y = cache
    if _twin_ok("softmax_backward", y, out) and dy.shape == y.shape:
        from .fused import softmax as twin
        kernels.record("softmax_backward", "numba")
        return twin.softmax_backward(dy, y, out, 1.0 if scale is None else scale)
    kernels.record("softmax_backward", "numpy")
    dx = _softmax_backward_numpy(dy, y, out)
    if scale is not None:
        dx *= dx.dtype.type(scale)
    return dx


def _twin_ok(op: str, x: np.ndarray, out: np.ndarray | None) -> bool:
    """Whether the twin takes this call: a float array of whole C-contiguous rows (and ``out`` alike)."""
    return (x.dtype in kernels.FLOATS and x.ndim > 0 and x.shape[-1] > 0 and x.flags.c_contiguous
            and (out is None or (out.flags.c_contiguous and out.shape == x.shape and out.dtype == x.dtype))
            and kernels.twins(op, x.size, x.dtype))


def _softmax_backward_numpy(dy: np.ndarray, y: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    if parallel.blocked(dy, y, out, one_thread_from=parallel.ONE_THREAD_MIN):
        dx = np.empty_like(dy) if out is None else out              # (..., N)
        n = dy.shape[-1]
        dy2, y2, dx2 = (a.reshape(-1, n) for a in (dy, y, dx))      # (R, N) views
        parallel.map_rows(_softmax_backward_block, dy2.shape[0], n, dy2, y2, dx2)
        return dx
    return _softmax_backward(dy, y, out)


def _softmax_backward_block(rows: slice, dy2: np.ndarray, y2: np.ndarray, dx2: np.ndarray) -> None:
    _softmax_backward(dy2[rows], y2[rows], dx2[rows])


def _softmax_backward(dy: np.ndarray, y: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """The reference backward (on the whole array, or on one block of rows)."""
    inner = np.einsum("...i,...i->...", dy, y)[..., None]   # (..., 1)
    dx = np.subtract(dy, inner, out=out)                    # (..., N)
    dx *= y
    return dx


def log_softmax(x: np.ndarray) -> np.ndarray:
    """log softmax over the last axis, stable."""
    m = x.max(axis=-1, keepdims=True)                       # (..., 1)
    z = x - m                                               # (..., N)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
