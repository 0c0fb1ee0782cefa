"""ReLU and exact GELU, x * Phi(x) = 0.5 x (1 + erf(x / sqrt(2))).

Dimension legend: any shape; everything is elementwise.
"""
from __future__ import annotations

import math

import numpy as np

_erf_py = np.frompyfunc(math.erf, 1, 1)


def erf(x: np.ndarray) -> np.ndarray:
    """erf elementwise, in x's dtype. (Reference version; see ops helper notes.)"""
    return _erf_py(x).astype(x.dtype)


def relu_forward(x: np.ndarray):
    """Returns (y, cache)."""
    return np.maximum(x, x.dtype.type(0)), x


def relu_backward(dy: np.ndarray, cache) -> np.ndarray:
    x = cache
    return np.where(x > 0, dy, dy.dtype.type(0))


def gelu_forward(x: np.ndarray):
    """Exact (erf) GELU. Returns (y, cache)."""
    cdf = erf(x * x.dtype.type(1.0 / math.sqrt(2.0)))             # (...)
    cdf += x.dtype.type(1.0)
    cdf *= x.dtype.type(0.5)                                       # Phi(x)
    return x * cdf, (x, cdf)


def gelu_backward(dy: np.ndarray, cache) -> np.ndarray:
    """d/dx [x Phi(x)] = Phi(x) + x phi(x), phi the standard normal density."""
    x, cdf = cache
    pdf = np.exp(x * x * x.dtype.type(-0.5)) * x.dtype.type(1.0 / math.sqrt(2.0 * math.pi))
    return dy * (cdf + x * pdf)
