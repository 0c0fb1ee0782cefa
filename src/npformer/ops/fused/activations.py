"""The GELU twins, exact (erf) and tanh, forward and backward, each fused with the bias add:
one pass over x (and dy).

Mirrors ``ops/activations.py`` ``gelu_forward``/``gelu_backward`` and
``gelu_tanh_forward``/``gelu_tanh_backward`` (with their ``bias``); pinned by tests/ops/test_twins.py
(test_gelu_twin). The exact GELU does not evaluate the reference's own erf: it takes
Phi(x) = erfc(-x / sqrt(2)) / 2 from the C library's erfc (numba's ``math.erfc``), in float64 for
float32 inputs too, then rounds Phi and y to x's dtype; the reference's fitted erf (``_erf_fit.py``)
stays the specification it is held to. The tanh form computes in float64 the same way.
Dimension legend: R rows, C features (the bias's length); everything else is elementwise.
"""
from __future__ import annotations

import math

import numpy as np
from numba import prange

from ..kernels import Kernel

RSQRT2 = 1.0 / math.sqrt(2.0)
RSQRT2PI = 1.0 / math.sqrt(2.0 * math.pi)
TANH_C = math.sqrt(2.0 / math.pi)
TANH_A = 0.044715


def _forward(x: np.ndarray, bias: np.ndarray, tanh_form: bool, y: np.ndarray, h: np.ndarray,
             aux: np.ndarray) -> None:
    # x, y, h, aux (R, C); bias (C,) or (0,) for none. h = x + bias (kept for the backward; not
    # written without a bias, when it is x itself);
    # aux = Phi(h) (exact) or tanh(u) (tanh form)
    r, c = x.shape
    has_bias = bias.size > 0
    for i in prange(r):
        for j in range(c):
            v = x[i, j]
            if has_bias:
                v = v + bias[j]
                h[i, j] = v
            w = np.float64(v)
            if tanh_form:
                t = math.tanh(TANH_C * (w + TANH_A * w * w * w))
                aux[i, j] = t
                y[i, j] = 0.5 * w * (1.0 + t)
            else:
                cdf = 0.5 * math.erfc(-w * RSQRT2)
                aux[i, j] = cdf
                y[i, j] = w * cdf


def _backward(dy: np.ndarray, h: np.ndarray, aux: np.ndarray, tanh_form: bool, dx: np.ndarray) -> None:
    r, c = dy.shape
    for i in prange(r):
        for j in range(c):
            w = np.float64(h[i, j])
            a = np.float64(aux[i, j])
            if tanh_form:
                du = TANH_C * (1.0 + 3.0 * TANH_A * w * w)
                g = 0.5 * (1.0 + a) + 0.5 * w * (1.0 - a * a) * du
            else:
                g = a + w * math.exp(-0.5 * (w * w)) * RSQRT2PI
            dx[i, j] = dy[i, j] * g


forward_kernel = Kernel(_forward)
backward_kernel = Kernel(_backward)


def _rows(a: np.ndarray) -> np.ndarray:
    c = a.shape[-1] if a.ndim else 1
    return np.ascontiguousarray(a).reshape(-1, max(c, 1))              # (R, C)


def gelu_forward(x: np.ndarray, bias: np.ndarray | None, tanh_form: bool
                 ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """y = gelu(x + bias), cache (x + bias, Phi or tanh(u)), all in x's dtype and shape."""
    x2 = _rows(x)                                                       # (R, C)
    b = np.empty(0, x.dtype) if bias is None else np.ascontiguousarray(bias, x.dtype)   # (C,) or (0,)
    y, aux = np.empty_like(x2), np.empty_like(x2)                      # (R, C)
    h = x2 if bias is None else np.empty_like(x2)                       # (R, C) x + bias; x itself without one
    forward_kernel(x2, b, tanh_form, y, h, aux)
    return y.reshape(x.shape), (h.reshape(x.shape), aux.reshape(x.shape))


def gelu_backward(dy: np.ndarray, cache: tuple[np.ndarray, np.ndarray], tanh_form: bool) -> np.ndarray:
    h, aux = cache
    dx = np.empty(h.shape, h.dtype)                                     # (...)
    forward_shape = _rows(h).shape
    dy2 = np.ascontiguousarray(dy, h.dtype).reshape(forward_shape)      # (R, C)
    backward_kernel(dy2, _rows(h), _rows(aux), tanh_form, dx.reshape(forward_shape))
    return dx
