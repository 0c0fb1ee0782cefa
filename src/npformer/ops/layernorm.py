"""Layer normalisation over the last axis, as the paper and ``torch.nn.LayerNorm``:

    y = (x - mean) / sqrt(var + eps) * weight + bias,   var biased (divide by C).

Dimension legend: ``...`` leading dims, ``C`` normalised features.
The reference op; its forward-only fast twin for inference is ``ops/inference.py layernorm_inference``.
"""
from __future__ import annotations

import numpy as np


def layernorm_forward(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float = 1e-5
                      ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """x (..., C), weight (C,), bias (C,) -> y (..., C). Returns (y, cache)."""
    mean = x.mean(axis=-1, keepdims=True)                         # (..., 1)
    xc = x - mean                                                 # (..., C)
    var = np.einsum("...i,...i->...", xc, xc)[..., None] / x.dtype.type(x.shape[-1])  # (..., 1)
    rstd = 1.0 / np.sqrt(var + x.dtype.type(eps))                 # (..., 1)
    xhat = xc
    xhat *= rstd                                                  # (..., C), reuses xc
    y = xhat * weight                                             # (..., C)
    y += bias
    return y, (xhat, rstd, weight)


def layernorm_backward(dy: np.ndarray, cache: tuple[np.ndarray, np.ndarray, np.ndarray]
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Returns (dx, dweight, dbias)."""
    xhat, rstd, weight = cache
    c = xhat.shape[-1]
    lead = tuple(range(dy.ndim - 1))
    dweight = (dy * xhat).sum(axis=lead)                          # (C,)
    dbias = dy.sum(axis=lead)                                     # (C,)
    dxhat = dy * weight                                           # (..., C)
    # dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
    m1 = dxhat.mean(axis=-1, keepdims=True)                       # (..., 1)
    m2 = np.einsum("...i,...i->...", dxhat, xhat)[..., None] / xhat.dtype.type(c)  # (..., 1)
    dx = dxhat
    dx -= m1
    dx -= xhat * m2
    dx *= rstd
    return dx, dweight, dbias
