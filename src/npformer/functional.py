"""The public attention entry point, with its input checks."""
from __future__ import annotations

import numpy as np

from .ops._checks import broadcast_shape, check_float, check_rank
from .ops.attention import attention_forward


def attention(q, k, v, mask=None, causal: bool = False):
    """Scaled dot-product attention softmax(q k^T / sqrt(D)) v.

    q (..., Tq, D), k (..., Tk, D), v (..., Tk, Dv); leading dims broadcast.
    mask: optional boolean, broadcastable to (..., Tq, Tk); True means "may attend"
    (the convention of ``torch.nn.functional.scaled_dot_product_attention``).
    causal: query i reads keys j <= i.
    Returns (out (..., Tq, Dv), weights (..., Tq, Tk)). A query whose keys are all
    masked gets zero weights and a zero output.
    """
    q, k, v = check_float(q, "q"), check_float(k, "k"), check_float(v, "v")
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_rank(x, name, 2)
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same last dimension, got q {q.shape} and k {k.shape}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same number of positions, got k {k.shape} and v {v.shape}")
    lead = broadcast_shape(q.shape[:-2], k.shape[:-2], "q's leading dims", "k's leading dims")
    lead = broadcast_shape(lead, v.shape[:-2], "v's leading dims", "q/k's leading dims")
    scores_shape = lead + (q.shape[-2], k.shape[-2])
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype != np.bool_:
            raise TypeError(f"mask must be boolean (True = may attend), got dtype {mask.dtype} with shape {mask.shape}")
        try:
            np.broadcast_shapes(mask.shape, scores_shape)
            if np.broadcast_shapes(mask.shape, scores_shape) != scores_shape:
                raise ValueError
        except ValueError:
            raise ValueError(f"mask of shape {mask.shape} does not broadcast to the scores' shape {scores_shape}") from None
    out, weights, _ = attention_forward(q, k, v, mask=mask, causal=bool(causal))
    return out, weights
