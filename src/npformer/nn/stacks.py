"""Encoder and decoder stacks: N identical layers, then an optional final LayerNorm
(pre-LN stacks need it; torch calls it ``norm``).

Dimension legend: B batch, S source positions, T target positions, E model width.
"""
from __future__ import annotations

import numpy as np

from .basic import LayerNorm
from .layers import DecoderLayer, EncoderLayer, _decoder_masks
from .module import Module, ModuleList, add_grads


class Encoder(Module):
    def __init__(self, n_layers: int, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1,
                 activation: str = "relu", norm_first: bool = False, final_norm: bool = False,
                 eps: float = 1e-5, rng: np.random.Generator | None = None, dtype=np.float32) -> None:
        super().__init__()
        rng = rng if rng is not None else np.random.default_rng(0)
        self.add_module("layers", ModuleList(
            EncoderLayer(d_model, n_heads, d_ff, dropout, activation, norm_first, eps, rng, dtype)
            for _ in range(n_layers)))
        self.norm = self.add_module("norm", LayerNorm(d_model, eps, dtype)) if final_norm else None

    def forward(self, x, mask=None, bias=None, causal=False, rng=None):
        """x (B, S, E) -> (y (B, S, E), cache)."""
        caches = []
        for layer in self.layers:
            x, c = layer.forward(x, mask=mask, bias=bias, causal=causal, rng=rng)
            caches.append(c)
        cn = None
        if self.norm is not None:
            x, cn = self.norm.forward(x)
        return x, (caches, cn)

    def backward(self, dy, cache):
        caches, cn = cache
        grads: dict = {}
        if self.norm is not None:
            dy, g = self.norm.backward(dy, cn)
            add_grads(grads, g, "norm")
        for i in reversed(range(len(self.layers))):
            dy, g = self.layers[i].backward(dy, caches[i])
            add_grads(grads, g, f"layers.{i}")
        return dy, grads

    @staticmethod
    def attention_weights(cache) -> list[dict]:
        """One {'self': (B, H, S, S)} per layer."""
        return [EncoderLayer.attention_weights(c) for c in cache[0]]

    def infer(self, x, offsets=None):
        """Inference on packed sequences x (N, E) -> (N, E): no cache, no dropout, no padding.
        Sequence i is rows offsets[i]:offsets[i + 1]; None: all rows are one sequence."""
        for layer in self.layers:
            x = layer.infer(x, offsets)
        return x if self.norm is None else self.norm.infer(x)

    def __call__(self, src, mask=None, src_key_padding_mask=None, is_causal=None, *, rng=None):
        """Called as ``torch.nn.TransformerEncoder`` (batch-first layers), on NumPy arrays.

        src (B, S, E) or unbatched (S, E) -> same shape. Masks in torch's conventions
        (bool True = NOT allowed, float = added): mask (S, S) or (B*H, S, S),
        src_key_padding_mask (B, S). ``is_causal=True`` applies the causal mask.
        Padded positions get their full value (torch's nested-tensor fast path zeroes them).
        """
        from ..interop.conventions import attention_masks, check_input

        e, h = _width_heads(self)
        x = check_input(src, "src", self.dtype, e)
        batched = x.ndim == 3
        x = x if batched else x[None]                              # (B, S, E)
        b, s, _ = x.shape
        m, bias = attention_masks(mask, src_key_padding_mask, batch=b, n_heads=h, t_q=s, t_k=s,
                                  dtype=x.dtype, batched=batched, is_causal=bool(is_causal),
                                  names=("mask", "src_key_padding_mask"))
        y, _ = self.forward(x, mask=m, bias=bias, causal=False, rng=rng)
        return y if batched else y[0]


class Decoder(Module):
    def __init__(self, n_layers: int, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1,
                 activation: str = "relu", norm_first: bool = False, final_norm: bool = False,
                 eps: float = 1e-5, rng: np.random.Generator | None = None, dtype=np.float32) -> None:
        super().__init__()
        rng = rng if rng is not None else np.random.default_rng(0)
        self.add_module("layers", ModuleList(
            DecoderLayer(d_model, n_heads, d_ff, dropout, activation, norm_first, eps, rng, dtype)
            for _ in range(n_layers)))
        self.norm = self.add_module("norm", LayerNorm(d_model, eps, dtype)) if final_norm else None

    def forward(self, x, memory, tgt_mask=None, memory_mask=None, tgt_bias=None, memory_bias=None,
                causal=True, rng=None):
        """x (B, T, E), memory (B, S, E) -> (y (B, T, E), cache)."""
        caches = []
        for layer in self.layers:
            x, c = layer.forward(x, memory, tgt_mask, memory_mask, tgt_bias, memory_bias, causal, rng)
            caches.append(c)
        cn = None
        if self.norm is not None:
            x, cn = self.norm.forward(x)
        return x, (caches, cn)

    def backward(self, dy, cache):
        """Returns (dx, dmemory, grads); dmemory sums every layer's cross-attention gradient."""
        caches, cn = cache
        grads: dict = {}
        if self.norm is not None:
            dy, g = self.norm.backward(dy, cn)
            add_grads(grads, g, "norm")
        dmem = None
        for i in reversed(range(len(self.layers))):
            dy, dm, g = self.layers[i].backward(dy, caches[i])
            dmem = dm if dmem is None else dmem + dm
            add_grads(grads, g, f"layers.{i}")
        return dy, dmem, grads

    @staticmethod
    def attention_weights(cache) -> list[dict]:
        """One {'self': (B, H, T, T), 'cross': (B, H, T, S)} per layer."""
        return [DecoderLayer.attention_weights(c) for c in cache[0]]

    def __call__(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                 memory_key_padding_mask=None, tgt_is_causal=None, memory_is_causal=False, *, rng=None):
        """Called as ``torch.nn.TransformerDecoder`` (batch-first layers), on NumPy arrays.

        tgt (B, T, E), memory (B, S, E), or both unbatched -> (B, T, E) or (T, E). Masks as in
        ``DecoderLayer.__call__``; self-attention is causal only when asked, as in torch.
        """
        from ..interop.conventions import check_input, check_same_batching

        e, h = _width_heads(self)
        x = check_input(tgt, "tgt", self.dtype, e)
        mem = check_input(memory, "memory", self.dtype, e)
        check_same_batching(mem, "memory", x, "tgt")
        batched = x.ndim == 3
        x, mem = (x, mem) if batched else (x[None], mem[None])     # (B, T, E), (B, S, E)
        kw = _decoder_masks(h, x, mem, batched, tgt_mask, memory_mask, tgt_key_padding_mask,
                            memory_key_padding_mask, tgt_is_causal, memory_is_causal)
        y, _ = self.forward(x, mem, causal=False, rng=rng, **kw)
        return y if batched else y[0]


def _width_heads(stack) -> tuple[int, int]:
    """(d_model, n_heads) of a stack, read from its first layer."""
    if len(stack.layers) == 0:
        raise ValueError(f"{type(stack).__name__} has no layers to call")
    attn = stack.layers[0].self_attn
    return attn.d_model, attn.n_heads
