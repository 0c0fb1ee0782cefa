"""The public attention entry point, with its input checks.

Every check runs before any arithmetic, and each error names the argument and the shapes.
"""
from __future__ import annotations

import numpy as np

from .ops._checks import check_float, check_rank
from .ops.attention import attention_forward


def _check_mask(mask, scores_shape: tuple) -> np.ndarray:
    if isinstance(mask, (list, tuple)):
        mask = np.asarray(mask)
    if not isinstance(mask, (np.ndarray, np.bool_)):
        raise TypeError(f"mask must be a boolean numpy array (True = may attend), got {type(mask).__name__}")
    mask = np.asarray(mask)
    if mask.dtype != np.bool_:
        raise TypeError(f"mask must be boolean (True = may attend), got dtype {mask.dtype} with shape {mask.shape}; "
                        "pass an additive float mask to the attention op's bias= instead")
    try:
        ok = np.broadcast_shapes(mask.shape, scores_shape) == scores_shape
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"mask of shape {mask.shape} does not broadcast to the scores' shape "
                         f"{scores_shape} (..., Tq, Tk)")
    return mask


def attention(q, k, v, mask=None, causal: bool = False):
    """Scaled dot-product attention softmax(q k^T / sqrt(D)) v.

    q (..., Tq, D), k (..., Tk, D), v (..., Tk, Dv); leading dims broadcast.
    mask: optional boolean, broadcastable to (..., Tq, Tk); True means "may attend"
    (the convention of ``torch.nn.functional.scaled_dot_product_attention``).
    causal: query i reads keys j <= i (top-left aligned, as torch's ``is_causal``).
    Returns (out (..., Tq, Dv), weights (..., Tq, Tk)). A query whose keys are all
    masked, or that has no keys at all (Tk = 0), gets zero weights and a zero output.
    """
    q, k, v = check_float(q, "q"), check_float(k, "k"), check_float(v, "v")
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_rank(x, name, 2)
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share one dtype, got q {q.dtype} {q.shape}, k {k.dtype} {k.shape}, "
                        f"v {v.dtype} {v.shape}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same last dimension D, got q {q.shape} and k {k.shape}")
    if q.shape[-1] == 0:
        raise ValueError(f"q and k need a last dimension D >= 1, got q {q.shape} and k {k.shape}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same number of positions Tk, got k {k.shape} and v {v.shape}")
    try:
        lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except ValueError:
        raise ValueError(f"the leading (batch/head) dimensions of q {q.shape}, k {k.shape} and v {v.shape} "
                         "do not broadcast together") from None
    scores_shape = lead + (q.shape[-2], k.shape[-2])
    if mask is not None:
        mask = _check_mask(mask, scores_shape)
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal must be True or False, got {causal!r}")
    if k.shape[-2] == 0:                                              # no keys: nothing to attend to
        return (np.zeros(lead + (q.shape[-2], v.shape[-1]), dtype=q.dtype),   # (..., Tq, Dv)
                np.zeros(scores_shape, dtype=q.dtype))                        # (..., Tq, 0)
    out, weights, _ = attention_forward(q, k, v, mask=mask, causal=bool(causal))
    return out, weights
