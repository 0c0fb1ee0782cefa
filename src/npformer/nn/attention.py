"""Multi-head attention (paper section 3.2.2):

    MultiHead(Q, K, V) = Concat(head_1..head_H) W_o,  head_h = Attention(Q W_q^h, K W_k^h, V W_v^h)

Parameter names follow ``torch.nn.MultiheadAttention``: W_q, W_k, W_v are stacked
in ``in_proj_weight`` (3E, E) and ``in_proj_bias`` (3E,); W_o is ``out_proj``.

Dimension legend: B batch, Tq query positions, Tk key positions, E model width,
H heads, D = E / H head size.

Two kernels compute the same attention: the exact op (``ops/attention.py``), which builds and keeps
the (B, H, Tq, Tk) weights, and the tiled op (``ops/flash_attention.py``), which keeps only O(T)
row statistics and recomputes the weights in its backward. ``forward``'s ``need_weights`` chooses:
True keeps the weights (exact); False does not need them (tiled once Tq * Tk reaches
``TILED_MIN_SCORES``, where it is no slower, else exact); None, the default, is True in eval mode
(figures, ``npformer attention``, the studies read ``attention_weights``) and False in training.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from ..ops import attention_backward, attention_forward, attention_weights_grad, linear_backward, linear_forward
from ..ops.flash_attention import FlashAttentionCache, flash_attention_backward, flash_attention_forward
from .basic import Linear
from .module import Module

# Per head, the number of scores Tq * Tk from which the tiled kernel is no slower than the exact one,
# forward and backward in float32 on one BLAS thread (benchmarks/bench_long_attention.py --crossover:
# tiled/exact about 1.2-1.4 at T = 64..128, 0.85-1.15 at T = 256..512, 0.5-0.6 at T = 1,024).
# Below it, training keeps the exact kernel, so the demos' short sequences run as before. The one
# home of the threshold: ``use_tiled`` reads it at each call, for training and for the KV cache's
# prefill (decode/kvcache.py) alike, so setting it here moves both.
TILED_MIN_SCORES = 512 * 512


def use_tiled(need_weights: bool | None, training: bool, t_q: int, t_k: int) -> bool:
    """Which kernel ``MultiHeadAttention.forward`` runs: the tiled one only when the weights are not
    needed (``need_weights`` False, or None in training mode) and Tq * Tk >= TILED_MIN_SCORES."""
    if need_weights is None:
        need_weights = not training
    return not need_weights and t_q * t_k >= TILED_MIN_SCORES


def split_heads(x: np.ndarray, n_heads: int) -> np.ndarray:
    """(B, T, E) -> (B, H, T, D), the lesson's reshape-and-transpose."""
    b, t, e = x.shape
    return x.reshape(b, t, n_heads, e // n_heads).transpose(0, 2, 1, 3)


def merge_heads(x: np.ndarray) -> np.ndarray:
    """(B, H, T, D) -> (B, T, E): concatenate the heads again."""
    b, h, t, d = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, t, h * d)


class MultiHeadAttention(Module):
    # children made by add_module in __init__, declared for readers and the type checker
    out_proj: Linear

    # When True, backward also returns d loss / d weights (B, H, Tq, Tk) in grads under "attention_weights"
    # (not a parameter): npformer.explore sets it for one backward to compute Chefer et al.'s relevance.
    report_weights_grad = False
    # None, or 0/1 per head, (H,) or (B, H): each head's output is multiplied by it before the heads are merged
    # and projected, in forward and backward alike. npformer.explore.knockout sets it on an instance for the
    # forwards that knock one head out; training never sets it.
    head_mask: np.ndarray | None = None

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0,
                 rng: np.random.Generator | None = None, dtype: DTypeLike = np.float32) -> None:
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
    def project_kv(self, x_kv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Keys and values of x_kv, split into heads: (k, v), each (B, H, Tk, D).
        Decoding caches these (the encoder memory's never change)."""
        e = self.d_model
        w, b = self.params["in_proj_weight"], self.params["in_proj_bias"]
        kv, _ = linear_forward(x_kv, w[e:], b[e:])                 # (B, Tk, 2E)
        return split_heads(kv[..., :e], self.n_heads), split_heads(kv[..., e:], self.n_heads)

    def project_qkv(self, x: np.ndarray) -> tuple[np.ndarray, ...]:
        """Self-attention's q, k, v from one matrix product: each (B, H, T, D)."""
        e = self.d_model
        qkv, _ = linear_forward(x, self.params["in_proj_weight"], self.params["in_proj_bias"])  # (B, T, 3E)
        return tuple(split_heads(qkv[..., i * e:(i + 1) * e], self.n_heads) for i in range(3))

    # -- op pair ----------------------------------------------------------------------------
    def forward(self, x_q: np.ndarray, x_kv: np.ndarray | None = None, mask: np.ndarray | None = None,
                bias: np.ndarray | None = None, causal: bool = False, rng: np.random.Generator | None = None,
                kv: tuple[np.ndarray, np.ndarray] | None = None,
                need_weights: bool | None = None) -> tuple[np.ndarray, Any]:
        """x_q (B, Tq, E); x_kv (B, Tk, E) for cross-attention, None for self-attention.

        mask: bool, broadcastable to (B, H, Tq, Tk), True = may attend.
        bias: float, broadcastable to (B, H, Tq, Tk), added to the scores.
        kv: precomputed (k, v) from ``project_kv`` (inference only: no backward through it).
        need_weights: True keeps the weights (the exact kernel); False lets long sequences run the
        tiled O(T)-memory kernel; None (default): True in eval mode, False in training mode.
        Returns (out (B, Tq, E), cache); ``attention_weights(cache)`` gives weights (B, H, Tq, Tk)
        when they were kept.
        """
        e, h = self.d_model, self.n_heads
        w, b = self.params["in_proj_weight"], self.params["in_proj_bias"]
        if kv is not None:
            q_all, _ = linear_forward(x_q, w[:e], b[:e])           # (B, Tq, E)
            q = split_heads(q_all, h)                              # (B, H, Tq, D)
            k, v = kv
            proj_cache: tuple | None = None
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
        if use_tiled(need_weights, self.training, q.shape[-2], k.shape[-2]):
            att_cache: FlashAttentionCache | tuple
            heads, att_cache = flash_attention_forward(q, k, v, mask=mask, causal=causal, bias=bias,
                                                       dropout_p=p, rng=rng)  # (B, H, Tq, D)
            merged = merge_heads(heads)                            # (B, Tq, E)
        else:
            # the heads are written straight into their merged layout: (B, Tq, E) seen as (B, H, Tq, D)
            b = np.broadcast_shapes(q.shape[:-2], v.shape[:-2])[0]          # keys may be shared over the batch
            merged = np.empty((b, q.shape[2], e), np.result_type(q, v))     # (B, Tq, E)
            heads, _, att_cache = attention_forward(q, k, v, mask=mask, causal=causal, bias=bias,
                                                    dropout_p=p, rng=rng,
                                                    out=split_heads(merged, h))  # (B, H, Tq, D), a view of merged
        head_mask = None
        if self.head_mask is not None:
            head_mask = np.asarray(self.head_mask, dtype=heads.dtype)[..., None, None]   # (H, 1, 1) or (B, H, 1, 1)
            merged = merge_heads(heads * head_mask)                # (B, Tq, E)
        out, out_cache = self.out_proj.forward(merged)             # (B, Tq, E)
        cache = (x_kv is None, proj_cache, att_cache, out_cache, head_mask)
        return out, cache

    @staticmethod
    def attention_weights(cache: Any) -> np.ndarray:
        """The attention weights (B, H, Tq, Tk) of a forward cache (before attention dropout)."""
        _check_weights_kept(cache[2])
        return cache[2][3]

    @staticmethod
    def attention_parts(cache: Any) -> tuple:
        """(q, k, v, weights, scale) of a forward cache, as the attention op used them: q (B, H, Tq, D),
        k and v (B, H, Tk, D), weights (B, H, Tq, Tk) before attention dropout, scale (1/sqrt(D))."""
        _check_weights_kept(cache[2])
        q, k, v, weights, _, scale = cache[2]
        return q, k, v, weights, scale

    def backward(self, dout: np.ndarray, cache: Any) -> tuple[Any, dict[str, np.ndarray]]:
        """Returns ((dx_q, dx_kv), grads); dx_kv is None for self-attention (it is all in dx_q)."""
        is_self, proj_cache, att_cache, out_cache, head_mask = cache
        if proj_cache is None:
            raise RuntimeError("no backward through precomputed keys/values (inference-only path)")
        h = self.n_heads
        dmerged, g_out = self.out_proj.backward(dout, out_cache)   # (B, Tq, E)
        dheads = split_heads(dmerged, h)                           # (B, H, Tq, D)
        if head_mask is not None:
            dheads = dheads * head_mask                            # a knocked-out head passes no gradient
        grads = {f"out_proj.{k}": g for k, g in g_out.items()}
        dweights = None
        if self.report_weights_grad:
            _check_weights_kept(att_cache)
            grads["attention_weights"] = dweights = attention_weights_grad(dheads, att_cache)  # (B, H, Tq, Tk)
        if is_self:
            (dqkv,) = self._projection_grads(dheads, att_cache, True, dweights)   # (B, T, 3E)
            dx, dw, db = linear_backward(dqkv, proj_cache)
            assert db is not None                                  # in_proj has a bias
            grads["in_proj_weight"], grads["in_proj_bias"] = dw, db
            return (dx, None), grads
        dq, dkv = self._projection_grads(dheads, att_cache, False, dweights)     # (B, Tq, E), (B, Tk, 2E)
        cq, ckv = proj_cache
        dx_q, dwq, dbq = linear_backward(dq, cq)
        dx_kv, dwkv, dbkv = linear_backward(dkv, ckv)
        grads["in_proj_weight"] = np.concatenate([dwq, dwkv], axis=0)
        grads["in_proj_bias"] = np.concatenate([dbq, dbkv], axis=0)
        return (dx_q, dx_kv), grads

    def _projection_grads(self, dheads: np.ndarray, att_cache: Any, is_self: bool,
                          dweights: np.ndarray | None) -> list[np.ndarray]:
        """d loss / d the in-projection's outputs: [dqkv (B, T, 3E)] for self-attention, [dq (B, Tq, E),
        dkv (B, Tk, 2E)] for cross-attention. The exact kernel writes dq, dk, dv straight into them, seen
        as heads (``split_heads``), with no merge and no concatenation; the tiled kernel's, and those of
        keys broadcast over the queries' batch, are merged and concatenated."""
        h, e = self.n_heads, self.d_model
        if isinstance(att_cache, FlashAttentionCache):
            heads3 = flash_attention_backward(dheads, att_cache)            # (B, H, T*, D) each
        elif att_cache[0].shape[:-2] == att_cache[1].shape[:-2] == att_cache[2].shape[:-2]:
            q, k, v = att_cache[:3]                                         # (B, H, T*, D) each
            dtype = np.result_type(dheads, q, k, v)
            b, t_q, t_k = q.shape[0], q.shape[2], k.shape[2]
            if is_self:
                outs = [np.empty((b, t_q, 3 * e), dtype)]                   # [(B, T, 3E)]
                dq, dkv = outs[0][..., :e], outs[0][..., e:]
            else:
                outs = [np.empty((b, t_q, e), dtype), np.empty((b, t_k, 2 * e), dtype)]   # [(B, Tq, E), (B, Tk, 2E)]
                dq, dkv = outs
            attention_backward(dheads, att_cache, dweights=dweights,
                               out=(split_heads(dq, h), split_heads(dkv[..., :e], h), split_heads(dkv[..., e:], h)))
            return outs
        else:
            heads3 = attention_backward(dheads, att_cache, dweights=dweights)   # (B, H, T*, D) each
        dq, dk, dv = (merge_heads(a) for a in heads3)                       # (B, T*, E) each
        if is_self:
            return [np.concatenate([dq, dk, dv], axis=-1)]
        return [dq, np.concatenate([dk, dv], axis=-1)]


def _check_weights_kept(att_cache: Any) -> None:
    """ValueError when a forward ran the tiled kernel, which keeps no (B, H, Tq, Tk) weights."""
    if isinstance(att_cache, FlashAttentionCache):
        raise ValueError("the attention weights were not kept: this forward ran the tiled O(T)-memory "
                         "kernel (training mode on a long sequence); ask for them with "
                         "forward(..., need_weights=True) or run the model in eval mode (model.eval())")
