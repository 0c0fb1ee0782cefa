"""Layer normalisation over the last axis, as the paper and ``torch.nn.LayerNorm``:

    y = (x - mean) / sqrt(var + eps) * weight + bias,   var biased (divide by C).

Dimension legend: ``...`` leading dims, ``C`` normalised features.
"""
from __future__ import annotations

import numpy as np


def layernorm_forward(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float = 1e-5):
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


def layernorm_backward(dy: np.ndarray, cache):
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


# rows per block of the inference LayerNorm: a block (256 rows of 384 float32 = 384 KiB)
# stays in the L2 cache through its five passes
_ROWS_PER_BLOCK = 1 << 16


def layernorm_inference(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float = 1e-5,
                        out: np.ndarray | None = None) -> np.ndarray:
    """LayerNorm forward only, no cache: x (..., C) -> (..., C). ``out`` may be ``x`` (in place).

    Same formula as ``layernorm_forward``, done in blocks of rows that stay in the cache.
    """
    c = x.shape[-1]
    x2 = x.reshape(-1, c)                                          # (N, C)
    out = np.empty_like(x) if out is None else out
    y2 = out.reshape(-1, c)                                        # (N, C), shares out's memory
    if not np.shares_memory(y2, out):
        raise ValueError("out must be reshapeable to (N, C) without a copy")
    inv_c, eps = x.dtype.type(1.0 / c), x.dtype.type(eps)
    step = max(1, _ROWS_PER_BLOCK // c)
    for i in range(0, x2.shape[0], step):
        xb, yb = x2[i:i + step], y2[i:i + step]                    # (n, C)
        mean = np.add.reduce(xb, axis=1, keepdims=True)            # (n, 1)
        mean *= inv_c
        np.subtract(xb, mean, out=yb)                              # (n, C) centred
        var = np.einsum("ij,ij->i", yb, yb)[:, None]               # (n, 1) sum of squares
        var *= inv_c
        var += eps
        rstd = np.sqrt(var, out=var)
        np.divide(1.0, rstd, out=rstd)                             # (n, 1)
        yb *= rstd
        yb *= weight
        yb += bias
    return out
