"""Multi-head attention (paper section 3.2.2):

    MultiHead(Q, K, V) = Concat(head_1..head_H) W_o,  head_h = Attention(Q W_q^h, K W_k^h, V W_v^h)

Parameter names follow ``torch.nn.MultiheadAttention``: W_q, W_k, W_v are stacked
in ``in_proj_weight`` (3E, E) and ``in_proj_bias`` (3E,); W_o is ``out_proj``.

Dimension legend: B batch, Tq query positions, Tk key positions, E model width,
H heads, D = E / H head size.
"""
from __future__ import annotations

import math

import numpy as np

from ..ops import attention_backward, attention_forward, attention_weights_grad, linear_backward, linear_forward
from .basic import Linear
from .module import Module


def split_heads(x: np.ndarray, n_heads: int) -> np.ndarray:
    """(B, T, E) -> (B, H, T, D), the lesson's reshape-and-transpose."""
    b, t, e = x.shape
    return x.reshape(b, t, n_heads, e // n_heads).transpose(0, 2, 1, 3)


def merge_heads(x: np.ndarray) -> np.ndarray:
    """(B, H, T, D) -> (B, T, E): concatenate the heads again."""
    b, h, t, d = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, t, h * d)


class MultiHeadAttention(Module):
    # When True, backward also returns d loss / d weights (B, H, Tq, Tk) in grads under "attention_weights"
    # (not a parameter): npformer.explore sets it for one backward to compute Chefer et al.'s relevance.
    report_weights_grad = False

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0,
                 rng: np.random.Generator | None = None, dtype=np.float32) -> None:
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        rng = rng if rng is not None else np.random.default_rng(0)
        self.d_model, self.n_heads, self.dropout = d_model, n_heads, dropout
        bound = math.sqrt(6.0 / (d_model + 3 * d_model))           # xavier_uniform on (3E, E), as torch
        self.params["in_proj_weight"] = rng.uniform(-bound, bound, (3 * d_model, d_model)).astype(dtype)
        self.params["in_proj_bias"] = np.zeros(3 * d_model, dtype=dtype)
        self.add_module("out_proj", Linear(d_model, d_model, rng=rng, dtype=dtype))
        self.out_proj.params["bias"][...] = 0

    # -- projections ----------------------------------------------------------------------
    def project_kv(self, x_kv: np.ndarray):
        """Keys and values of x_kv, split into heads: (k, v), each (B, H, Tk, D).
        Decoding caches these (the encoder memory's never change)."""
        e = self.d_model
        w, b = self.params["in_proj_weight"], self.params["in_proj_bias"]
        kv, _ = linear_forward(x_kv, w[e:], b[e:])                 # (B, Tk, 2E)
        return split_heads(kv[..., :e], self.n_heads), split_heads(kv[..., e:], self.n_heads)

    def project_qkv(self, x: np.ndarray):
        """Self-attention's q, k, v from one matrix product: each (B, H, T, D)."""
        e = self.d_model
        qkv, _ = linear_forward(x, self.params["in_proj_weight"], self.params["in_proj_bias"])  # (B, T, 3E)
        return tuple(split_heads(qkv[..., i * e:(i + 1) * e], self.n_heads) for i in range(3))

    # -- op pair ----------------------------------------------------------------------------
    def forward(self, x_q, x_kv=None, mask=None, bias=None, causal=False, rng=None, kv=None):
        """x_q (B, Tq, E); x_kv (B, Tk, E) for cross-attention, None for self-attention.

        mask: bool, broadcastable to (B, H, Tq, Tk), True = may attend.
        bias: float, broadcastable to (B, H, Tq, Tk), added to the scores.
        kv: precomputed (k, v) from ``project_kv`` (inference only: no backward through it).
        Returns (out (B, Tq, E), cache); ``attention_weights(cache)`` gives weights (B, H, Tq, Tk).
        """
        e, h = self.d_model, self.n_heads
        w, b = self.params["in_proj_weight"], self.params["in_proj_bias"]
        if kv is not None:
            q_all, _ = linear_forward(x_q, w[:e], b[:e])           # (B, Tq, E)
            q = split_heads(q_all, h)                              # (B, H, Tq, D)
            k, v = kv
            proj_cache = None
        elif x_kv is None:
            qkv, proj_cache = linear_forward(x_q, w, b)            # (B, T, 3E)
            q, k, v = (split_heads(qkv[..., i * e:(i + 1) * e], h) for i in range(3))
        else:
            q_all, cq = linear_forward(x_q, w[:e], b[:e])          # (B, Tq, E)
            kv_all, ckv = linear_forward(x_kv, w[e:], b[e:])       # (B, Tk, 2E)
            q = split_heads(q_all, h)                              # (B, H, Tq, D)
            k = split_heads(kv_all[..., :e], h)                    # (B, H, Tk, D)
            v = split_heads(kv_all[..., e:], h)                    # (B, H, Tk, D)
            proj_cache = (cq, ckv)
        p = self.dropout if self.training else 0.0
        heads, weights, att_cache = attention_forward(q, k, v, mask=mask, causal=causal, bias=bias,
                                                      dropout_p=p, rng=rng)  # (B, H, Tq, D)
        merged = merge_heads(heads)                                # (B, Tq, E)
        out, out_cache = self.out_proj.forward(merged)             # (B, Tq, E)
        cache = (x_kv is None, proj_cache, att_cache, out_cache)
        return out, cache

    @staticmethod
    def attention_weights(cache) -> np.ndarray:
        """The attention weights (B, H, Tq, Tk) of a forward cache (before attention dropout)."""
        return cache[2][3]

    @staticmethod
    def attention_parts(cache) -> tuple:
        """(q, k, v, weights, scale) of a forward cache, as the attention op used them: q (B, H, Tq, D),
        k and v (B, H, Tk, D), weights (B, H, Tq, Tk) before attention dropout, scale (1/sqrt(D))."""
        q, k, v, weights, _, scale = cache[2]
        return q, k, v, weights, scale

    def backward(self, dout, cache):
        """Returns ((dx_q, dx_kv), grads); dx_kv is None for self-attention (it is all in dx_q)."""
        is_self, proj_cache, att_cache, out_cache = cache
        if proj_cache is None:
            raise RuntimeError("no backward through precomputed keys/values (inference-only path)")
        h = self.n_heads
        dmerged, g_out = self.out_proj.backward(dout, out_cache)   # (B, Tq, E)
        dheads = split_heads(dmerged, h)                           # (B, H, Tq, D)
        dq, dk, dv = attention_backward(dheads, att_cache)         # (B, H, T*, D)
        dq, dk, dv = merge_heads(dq), merge_heads(dk), merge_heads(dv)  # (B, T*, E)
        grads = {f"out_proj.{k}": g for k, g in g_out.items()}
        if self.report_weights_grad:
            grads["attention_weights"] = attention_weights_grad(dheads, att_cache)  # (B, H, Tq, Tk)
        if is_self:
            dqkv = np.concatenate([dq, dk, dv], axis=-1)           # (B, T, 3E)
            dx, dw, db = linear_backward(dqkv, proj_cache)
            grads["in_proj_weight"], grads["in_proj_bias"] = dw, db
            return (dx, None), grads
        cq, ckv = proj_cache
        dx_q, dwq, dbq = linear_backward(dq, cq)
        dx_kv, dwkv, dbkv = linear_backward(np.concatenate([dk, dv], axis=-1), ckv)
        grads["in_proj_weight"] = np.concatenate([dwq, dwkv], axis=0)
        grads["in_proj_bias"] = np.concatenate([dbq, dbkv], axis=0)
        return (dx_q, dx_kv), grads
