"""The grader's float64 references, from npformer's own verified ops, and the knobs that turn each into a
known-wrong variant (one mistake put in: another scale, another axis, a term left out), for
``specs_attention.py`` and ``specs_block.py``. Dimension legend: B batch, H heads, T / Tq / Tk positions,
E model width, D = E / H head size, Dv value size, F feed-forward width.
"""
from __future__ import annotations

import math

import numpy as np

from ..nn import merge_heads, split_heads
from ..ops import attention_backward, attention_forward, layernorm_forward, softmax_forward
from ..ops.attention import additive_mask


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _normal(rng, shape, scale=1.0):
    return rng.normal(size=shape) * scale


# -- references (float64, npformer's ops) and their known-wrong variants ----------------------------------

def _softmax(x, axis=-1):
    if axis is None:
        y, _ = softmax_forward(x.reshape(-1))                         # (N,) one softmax over everything
        return y.reshape(x.shape)
    y, _ = softmax_forward(np.moveaxis(x, axis, -1))
    return np.moveaxis(y, -1, axis)


def _attention(q, k, v, mask=None, scale=None, scores=None):
    """npformer's attention, or with one mistake: another ``scale``, or the given raw ``scores`` (q k^T
    computed wrongly) in place of q k^T."""
    if scores is None:
        out, w, _ = attention_forward(q, k, v, mask=mask, scale=scale)
        return {"out": out, "weights": w}
    s = scores * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))   # (..., Tq, Tk)
    if mask is not None:
        s = s + additive_mask(mask, s.dtype)
    w = _softmax(s)                                                    # (..., Tq, Tk)
    return {"out": np.matmul(w, v), "weights": w}


def _nothing(q, v) -> dict:
    """What a variant gives where the mistake cannot produce this case's shapes (the learner's code raised
    already): NaN, which matches nothing."""
    return {"out": np.full(q.shape[:-1] + v.shape[-1:], np.nan)}


def _masked(q, k, v, mask, how: str):
    """Attention with the mask used wrongly: ``how`` is "add" (scores + mask, 0/1 numbers), "after" (the
    weights times the mask after the softmax, not renormalised), "transposed" (the mask's last two axes
    swapped) or "queries" (the softmax over the queries, axis -2, blocked weights 0)."""
    s = np.matmul(q, np.swapaxes(k, -1, -2)) / math.sqrt(q.shape[-1])   # (..., Tq, Tk)
    if how == "transposed":
        if mask is None or mask.ndim < 2 or mask.shape[-1] != mask.shape[-2]:
            return _nothing(q, v)
        return _attention(q, k, v, np.swapaxes(mask, -1, -2))
    if how == "queries":
        if mask is not None:
            s = np.where(mask, s, -np.inf)
        with np.errstate(invalid="ignore"):
            w = np.nan_to_num(_softmax(s, -2))                         # (..., Tq, Tk) a column may be empty
    elif how == "add":
        w = _softmax(s + (0 if mask is None else mask))
    else:
        w = _softmax(s) * (1 if mask is None else mask)
    return {"out": np.matmul(w, v), "weights": w}


def _layer_norm(x, gamma, beta, eps=1e-5, axis=-1):
    """npformer's layer norm, or with the mean and variance taken over ``axis`` (None: the whole array)."""
    if axis == -1:
        return {"y": layernorm_forward(x, gamma, beta, eps)[0]}
    xc = x - x.mean(axis=axis, keepdims=True)
    return {"y": xc / np.sqrt(x.var(axis=axis, keepdims=True) + eps) * gamma + beta}


def _interleaved_split(x, n_heads):
    b, t, e = x.shape
    return np.moveaxis(x.reshape(b, t, e // n_heads, n_heads), -1, 1)   # (B, H, T, D) head h: every H-th


def _interleaved_merge(x):
    b, h, t, d = x.shape
    return np.moveaxis(x, 1, -1).reshape(b, t, d * h)                   # (B, T, E)


def _mha(x, params, n_heads, mask=None, scale=None, project_out=True, transposed=False, value="v",
         interleaved=False):
    """Multi-head self-attention from npformer's split_heads, attention and merge_heads; the knobs put one
    mistake in: another scale, no output projection, PyTorch's weight layout, k in place of v, heads
    interleaved."""
    p = {k: (v.T if transposed and v.ndim == 2 else v) for k, v in params.items()}
    split, merge = (_interleaved_split, _interleaved_merge) if interleaved else (split_heads, merge_heads)
    q, k, v = (split(x @ p[f"w_{n}"] + p[f"b_{n}"], n_heads) for n in "qkv")   # (B, H, T, D) each
    d = x.shape[-1] // n_heads
    out, _, _ = attention_forward(q, k, k if value == "k" else v, mask=mask,
                                  scale=scale if scale is not None else 1 / math.sqrt(d))
    merged = merge(out)                                                # (B, T, E)
    return merged @ p["w_o"] + p["b_o"] if project_out else merged


def _ffn(x, params, relu_1=True, relu_2=False, bias_1=True, bias_2=True):
    h = x @ params["w_1"] + (params["b_1"] if bias_1 else 0)           # (..., F)
    h = np.maximum(h, 0) if relu_1 else h
    y = h @ params["w_2"] + (params["b_2"] if bias_2 else 0)           # (..., E)
    return np.maximum(y, 0) if relu_2 else y


def _ln(x, p):
    return layernorm_forward(x, p["gamma"], p["beta"], 1e-5)[0]


def _block(x, params, n_heads, mask=None, pre_ln=False, residual=True, ffn_keeps_x=False, swap_norms=False):
    """The post-LN encoder block; the knobs put one mistake in: pre-LN, no residuals, the feed-forward's
    residual taken from the block's input x, ln_1 and ln_2 swapped."""
    ln_1, ln_2 = (params["ln_2"], params["ln_1"]) if swap_norms else (params["ln_1"], params["ln_2"])
    keep = x if residual else 0
    if pre_ln:
        h = x + _mha(_ln(x, ln_1), params["attn"], n_heads, mask)
        return h + _ffn(_ln(h, ln_2), params["ffn"])
    h = _ln(keep + _mha(x, params["attn"], n_heads, mask), ln_1)        # (B, T, E)
    keep = (x if ffn_keeps_x else h) if residual else 0
    return _ln(keep + _ffn(h, params["ffn"]), ln_2)


def _attention_grads(dout, q, k, v, weights, *, scale_dq=True, scale_dk=True):
    scale = 1 / math.sqrt(q.shape[-1])
    dq, dk, dv = attention_backward(dout, (q, k, v, weights, None, scale))
    return {"dq": dq if scale_dq else dq / scale, "dk": dk if scale_dk else dk / scale, "dv": dv}

