"""Encoder and decoder layers (paper section 3.1), named as torch's
``TransformerEncoderLayer``/``TransformerDecoderLayer``.

Each sub-layer is wrapped in a residual connection and a layer norm:
    post-LN (the paper, default):  x = norm(x + dropout(sublayer(x)))
    pre-LN (``norm_first=True``):   x = x + dropout(sublayer(norm(x)))

Dimension legend: B batch, S source positions, T target positions, E model width.
Masks are boolean, True = may attend, broadcastable to (B, H, Tq, Tk); see
``npformer.nn.masks`` for building them from padding.
"""
from __future__ import annotations

import numpy as np

from .attention import MultiHeadAttention
from .basic import Dropout, LayerNorm
from .feedforward import FeedForward
from .module import Module, add_grads


class _Residual:
    """One residual sub-layer around ``fn``, post- or pre-LN. Not a module: it owns no
    parameters, it only says in what order norm, sub-layer, dropout and the sum run."""

    @staticmethod
    def forward(x, norm: LayerNorm, drop: Dropout, norm_first: bool, fn, rng):
        if norm_first:
            h, cn = norm.forward(x)                                # (B, T, E)
            y, cf = fn(h)
            y, cd = drop.forward(y, rng)
            return x + y, (cn, cf, cd)
        y, cf = fn(x)
        y, cd = drop.forward(y, rng)
        out, cn = norm.forward(x + y)                              # (B, T, E)
        return out, (cn, cf, cd)

    @staticmethod
    def backward(dout, cache, norm: LayerNorm, drop: Dropout, norm_first: bool, fn_back):
        """fn_back(dy, cf) -> (dx_from_fn, grads). Returns (dx, norm_grads, fn_grads)."""
        cn, cf, cd = cache
        if norm_first:
            dy, _ = drop.backward(dout, cd)
            dh, g_fn = fn_back(dy, cf)
            dx_n, g_norm = norm.backward(dh, cn)
            return dout + dx_n, g_norm, g_fn
        ds, g_norm = norm.backward(dout, cn)                      # grad of the residual sum
        dy, _ = drop.backward(ds, cd)
        dx_f, g_fn = fn_back(dy, cf)
        return ds + dx_f, g_norm, g_fn


class EncoderLayer(Module):
    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1,
                 activation: str = "relu", norm_first: bool = False, eps: float = 1e-5,
                 rng: np.random.Generator | None = None, dtype=np.float32) -> None:
        super().__init__()
        rng = rng if rng is not None else np.random.default_rng(0)
        self.norm_first = norm_first
        self.add_module("self_attn", MultiHeadAttention(d_model, n_heads, dropout, rng=rng, dtype=dtype))
        self.add_module("ffn", FeedForward(d_model, d_ff, activation, dropout, rng=rng, dtype=dtype))
        self.add_module("norm1", LayerNorm(d_model, eps, dtype))
        self.add_module("norm2", LayerNorm(d_model, eps, dtype))
        self.add_module("dropout1", Dropout(dropout))
        self.add_module("dropout2", Dropout(dropout))

    def forward(self, x, mask=None, bias=None, causal=False, rng=None):
        """x (B, S, E) -> (y (B, S, E), cache); ``attention_weights(cache)`` reads the weights."""
        weights = {}

        def sa(h):
            out, w, c = self.self_attn.forward(h, mask=mask, bias=bias, causal=causal, rng=rng)
            weights["self"] = w
            return out, c

        x, c1 = _Residual.forward(x, self.norm1, self.dropout1, self.norm_first, sa, rng)
        x, c2 = _Residual.forward(x, self.norm2, self.dropout2, self.norm_first,
                                  lambda h: self.ffn.forward(h, rng), rng)
        return x, (c1, c2, weights)

    def backward(self, dy, cache):
        c1, c2, _ = cache
        grads: dict = {}
        dx, gn, gf = _Residual.backward(dy, c2, self.norm2, self.dropout2, self.norm_first, self.ffn.backward)
        add_grads(grads, gn, "norm2"), add_grads(grads, gf, "ffn")

        def sa_back(d, c):
            dxq, _, g = self.self_attn.backward(d, c)
            return dxq, g

        dx, gn, ga = _Residual.backward(dx, c1, self.norm1, self.dropout1, self.norm_first, sa_back)
        add_grads(grads, gn, "norm1"), add_grads(grads, ga, "self_attn")
        return dx, grads

    @staticmethod
    def attention_weights(cache) -> dict:
        """{'self': (B, H, S, S)} from a forward cache."""
        return cache[2]

    def infer(self, x, offsets=None):
        """Inference on packed sequences, x (N, E) -> (N, E): no cache, no dropout, no mask.
        Sequence i is rows offsets[i]:offsets[i + 1] (see ``MultiHeadAttention.infer``)."""
        if self.norm_first:
            x = x + self.self_attn.infer(self.norm1.infer(x), offsets)
            return x + self.ffn.infer(self.norm2.infer(x))
        a = self.self_attn.infer(x, offsets)                       # (N, E)
        a += x
        x = self.norm1.infer(a, out=a)                             # post-LN: norm(x + attention(x))
        f = self.ffn.infer(x)                                      # (N, E)
        f += x
        return self.norm2.infer(f, out=f)

    def __call__(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False, *, rng=None):
        """Called as ``torch.nn.TransformerEncoderLayer(batch_first=True)``, on NumPy arrays.

        src (B, S, E) or unbatched (S, E) -> (B, S, E) or (S, E). Masks in torch's conventions
        (bool True = NOT allowed, float = added): src_mask (S, S) or (B*H, S, S),
        src_key_padding_mask (B, S). ``is_causal`` applies the causal mask.
        """
        from ..interop.conventions import attention_masks, check_input

        x = check_input(src, "src", self.dtype, self.self_attn.d_model)
        batched = x.ndim == 3
        x = x if batched else x[None]                              # (B, S, E)
        b, s, _ = x.shape
        mask, bias = attention_masks(src_mask, src_key_padding_mask, batch=b, n_heads=self.self_attn.n_heads,
                                     t_q=s, t_k=s, dtype=x.dtype, batched=batched, is_causal=bool(is_causal),
                                     names=("src_mask", "src_key_padding_mask"))
        y, _ = self.forward(x, mask=mask, bias=bias, causal=False, rng=rng)
        return y if batched else y[0]


class DecoderLayer(Module):
    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1,
                 activation: str = "relu", norm_first: bool = False, eps: float = 1e-5,
                 rng: np.random.Generator | None = None, dtype=np.float32) -> None:
        super().__init__()
        rng = rng if rng is not None else np.random.default_rng(0)
        self.norm_first = norm_first
        self.add_module("self_attn", MultiHeadAttention(d_model, n_heads, dropout, rng=rng, dtype=dtype))
        self.add_module("multihead_attn", MultiHeadAttention(d_model, n_heads, dropout, rng=rng, dtype=dtype))
        self.add_module("ffn", FeedForward(d_model, d_ff, activation, dropout, rng=rng, dtype=dtype))
        for i in (1, 2, 3):
            self.add_module(f"norm{i}", LayerNorm(d_model, eps, dtype))
            self.add_module(f"dropout{i}", Dropout(dropout))

    def forward(self, x, memory, tgt_mask=None, memory_mask=None, tgt_bias=None, memory_bias=None,
                causal=True, rng=None):
        """x (B, T, E), memory (B, S, E) -> (y (B, T, E), cache).

        Self-attention is causal by default (the decoder must not read the future).
        """
        weights = {}

        def sa(h):
            out, w, c = self.self_attn.forward(h, mask=tgt_mask, bias=tgt_bias, causal=causal, rng=rng)
            weights["self"] = w
            return out, c

        def ca(h):
            out, w, c = self.multihead_attn.forward(h, memory, mask=memory_mask, bias=memory_bias, rng=rng)
            weights["cross"] = w
            return out, c

        x, c1 = _Residual.forward(x, self.norm1, self.dropout1, self.norm_first, sa, rng)
        x, c2 = _Residual.forward(x, self.norm2, self.dropout2, self.norm_first, ca, rng)
        x, c3 = _Residual.forward(x, self.norm3, self.dropout3, self.norm_first,
                                  lambda h: self.ffn.forward(h, rng), rng)
        return x, (c1, c2, c3, weights)

    def backward(self, dy, cache):
        """Returns (dx, dmemory, grads)."""
        c1, c2, c3, _ = cache
        grads: dict = {}
        dmem = []
        dx, gn, gf = _Residual.backward(dy, c3, self.norm3, self.dropout3, self.norm_first, self.ffn.backward)
        add_grads(grads, gn, "norm3"), add_grads(grads, gf, "ffn")

        def ca_back(d, c):
            dxq, dkv, g = self.multihead_attn.backward(d, c)
            dmem.append(dkv)
            return dxq, g

        dx, gn, ga = _Residual.backward(dx, c2, self.norm2, self.dropout2, self.norm_first, ca_back)
        add_grads(grads, gn, "norm2"), add_grads(grads, ga, "multihead_attn")

        def sa_back(d, c):
            dxq, _, g = self.self_attn.backward(d, c)
            return dxq, g

        dx, gn, ga = _Residual.backward(dx, c1, self.norm1, self.dropout1, self.norm_first, sa_back)
        add_grads(grads, gn, "norm1"), add_grads(grads, ga, "self_attn")
        return dx, dmem[0], grads

    @staticmethod
    def attention_weights(cache) -> dict:
        """{'self': (B, H, T, T), 'cross': (B, H, T, S)} from a forward cache."""
        return cache[3]

    def __call__(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                 memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False, *, rng=None):
        """Called as ``torch.nn.TransformerDecoderLayer(batch_first=True)``, on NumPy arrays.

        tgt (B, T, E), memory (B, S, E), or both unbatched -> (B, T, E) or (T, E).
        Masks in torch's conventions (bool True = NOT allowed, float = added): tgt_mask (T, T) or
        (B*H, T, T), memory_mask (T, S) or (B*H, T, S), key padding masks (B, T) and (B, S).
        As in torch, self-attention is causal only when asked (``tgt_is_causal`` or ``tgt_mask``).
        """
        from ..interop.conventions import check_input, check_same_batching

        e = self.self_attn.d_model
        x = check_input(tgt, "tgt", self.dtype, e)
        mem = check_input(memory, "memory", self.dtype, e)
        check_same_batching(mem, "memory", x, "tgt")
        batched = x.ndim == 3
        x, mem = (x, mem) if batched else (x[None], mem[None])     # (B, T, E), (B, S, E)
        kw = _decoder_masks(self.self_attn.n_heads, x, mem, batched, tgt_mask, memory_mask,
                            tgt_key_padding_mask, memory_key_padding_mask, tgt_is_causal, memory_is_causal)
        y, _ = self.forward(x, mem, causal=False, rng=rng, **kw)
        return y if batched else y[0]


def _decoder_masks(n_heads, x, mem, batched, tgt_mask, memory_mask, tgt_key_padding_mask,
                   memory_key_padding_mask, tgt_is_causal, memory_is_causal) -> dict:
    """torch's decoder masks -> DecoderLayer.forward's tgt_mask/tgt_bias/memory_mask/memory_bias."""
    from ..interop.conventions import attention_masks

    (b, t, _), s = x.shape, mem.shape[1]
    tm, tb = attention_masks(tgt_mask, tgt_key_padding_mask, batch=b, n_heads=n_heads, t_q=t, t_k=t,
                             dtype=x.dtype, batched=batched, is_causal=bool(tgt_is_causal),
                             names=("tgt_mask", "tgt_key_padding_mask"))
    mm, mb = attention_masks(memory_mask, memory_key_padding_mask, batch=b, n_heads=n_heads, t_q=t, t_k=s,
                             dtype=x.dtype, batched=batched, is_causal=bool(memory_is_causal),
                             names=("memory_mask", "memory_key_padding_mask"))
    return {"tgt_mask": tm, "tgt_bias": tb, "memory_mask": mm, "memory_bias": mb}
