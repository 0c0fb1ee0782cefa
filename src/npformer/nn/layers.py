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

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from .attention import MultiHeadAttention
from .basic import Dropout, LayerNorm
from .feedforward import FeedForward
from .module import Module
from .sublayer import sublayer_backward, sublayer_forward


class _Block(Module):
    """What both layers own: self-attention, [cross-attention,] the FFN, and a LayerNorm and a
    Dropout per sub-layer (``norm{i}``/``dropout{i}``, i = 1 .. number of sub-layers).
    The rng draws self_attn, [multihead_attn,] ffn in that order: the order fixes what a seed gives."""

    # children made by add_module in __init__, declared for readers and the type checker
    self_attn: MultiHeadAttention
    multihead_attn: MultiHeadAttention               # cross only
    ffn: FeedForward
    norm1: LayerNorm
    norm2: LayerNorm
    norm3: LayerNorm                                 # cross only
    dropout1: Dropout
    dropout2: Dropout
    dropout3: Dropout                                # cross only

    cross = False                                                  # DecoderLayer: attends to a memory too

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1,
                 activation: str = "relu", norm_first: bool = False, eps: float = 1e-5,
                 rng: np.random.Generator | None = None, dtype: DTypeLike = np.float32) -> None:
        super().__init__()
        rng = rng if rng is not None else np.random.default_rng(0)
        self.norm_first = norm_first
        self.add_module("self_attn", MultiHeadAttention(d_model, n_heads, dropout, rng=rng, dtype=dtype))
        if self.cross:
            self.add_module("multihead_attn", MultiHeadAttention(d_model, n_heads, dropout, rng=rng, dtype=dtype))
        self.add_module("ffn", FeedForward(d_model, d_ff, activation, dropout, rng=rng, dtype=dtype))
        for i in range(1, 4 if self.cross else 3):
            self.add_module(f"norm{i}", LayerNorm(d_model, eps, dtype))
            self.add_module(f"dropout{i}", Dropout(dropout))


class EncoderLayer(_Block):
    """Self-attention, then the FFN, each a residual sub-layer (``torch.nn.TransformerEncoderLayer``)."""

    def block(self, x: np.ndarray, self_attn: Callable[..., tuple], ffn: Callable[..., tuple],
              rng: np.random.Generator | None = None, fast: bool = False) -> tuple[np.ndarray, tuple]:
        """The layer's two residual sub-layers around F's given as self_attn(h), ffn(h) -> (y, cache).
        forward, packed inference and KV-cache decoding differ only in those F's."""
        x, c1 = sublayer_forward(x, self_attn, self.norm1, self.dropout1, self.norm_first, rng, fast)
        x, c2 = sublayer_forward(x, ffn, self.norm2, self.dropout2, self.norm_first, rng, fast)
        return x, (c1, c2)

    def forward(self, x: np.ndarray, mask: np.ndarray | None = None, bias: np.ndarray | None = None,
                causal: bool = False, rng: np.random.Generator | None = None) -> tuple[np.ndarray, Any]:
        """x (B, S, E) -> (y (B, S, E), cache); ``attention_weights(cache)`` reads the weights."""
        return self.block(x, partial(self.self_attn.forward, mask=mask, bias=bias, causal=causal, rng=rng),
                          partial(self.ffn.forward, rng=rng), rng)

    def backward(self, dy: np.ndarray, cache: Any) -> tuple[Any, dict[str, np.ndarray]]:
        """Returns (dx, grads)."""
        c1, c2 = cache
        nf = self.norm_first
        dx, g_ffn = sublayer_backward(dy, c2, self.ffn.backward, self.norm2, self.dropout2, nf, ("norm2", "ffn"))
        (dx, _), g_sa = sublayer_backward(dx, c1, self.self_attn.backward, self.norm1, self.dropout1, nf,
                                          ("norm1", "self_attn"))
        return dx, {**g_ffn, **g_sa}

    @staticmethod
    def attention_weights(cache: Any) -> dict:
        """{'self': (B, H, S, S)} from a forward cache."""
        return {"self": MultiHeadAttention.attention_weights(cache[0].fn)}


class DecoderLayer(_Block):
    """Causal self-attention, cross-attention to the encoder's memory, then the FFN
    (``torch.nn.TransformerDecoderLayer``)."""

    cross = True

    def block(self, x: np.ndarray, self_attn: Callable[..., tuple], cross_attn: Callable[..., tuple],
              ffn: Callable[..., tuple], rng: np.random.Generator | None = None,
              fast: bool = False) -> tuple[np.ndarray, tuple]:
        """The layer's three residual sub-layers around self_attn(h), cross_attn(h), ffn(h) -> (y, cache)."""
        nf = self.norm_first
        x, c1 = sublayer_forward(x, self_attn, self.norm1, self.dropout1, nf, rng, fast)
        x, c2 = sublayer_forward(x, cross_attn, self.norm2, self.dropout2, nf, rng, fast)
        x, c3 = sublayer_forward(x, ffn, self.norm3, self.dropout3, nf, rng, fast)
        return x, (c1, c2, c3)

    def forward(self, x: np.ndarray, memory: np.ndarray, tgt_mask: np.ndarray | None = None,
                memory_mask: np.ndarray | None = None, tgt_bias: np.ndarray | None = None,
                memory_bias: np.ndarray | None = None, causal: bool = True,
                rng: np.random.Generator | None = None) -> tuple[np.ndarray, Any]:
        """x (B, T, E), memory (B, S, E) -> (y (B, T, E), cache).

        Self-attention is causal by default (the decoder must not read the future).
        """
        return self.block(x, partial(self.self_attn.forward, mask=tgt_mask, bias=tgt_bias, causal=causal, rng=rng),
                          partial(self.multihead_attn.forward, x_kv=memory, mask=memory_mask, bias=memory_bias,
                                  rng=rng),
                          partial(self.ffn.forward, rng=rng), rng)

    def backward(self, dy: np.ndarray, cache: Any) -> tuple[Any, dict[str, np.ndarray]]:
        """Returns ((dx, dmemory), grads)."""
        c1, c2, c3 = cache
        nf = self.norm_first
        dx, g3 = sublayer_backward(dy, c3, self.ffn.backward, self.norm3, self.dropout3, nf, ("norm3", "ffn"))
        (dx, dmemory), g2 = sublayer_backward(dx, c2, self.multihead_attn.backward, self.norm2, self.dropout2, nf,
                                              ("norm2", "multihead_attn"))
        (dx, _), g1 = sublayer_backward(dx, c1, self.self_attn.backward, self.norm1, self.dropout1, nf,
                                        ("norm1", "self_attn"))
        return (dx, dmemory), {**g3, **g2, **g1}

    @staticmethod
    def attention_weights(cache: Any) -> dict:
        """{'self': (B, H, T, T), 'cross': (B, H, T, S)} from a forward cache."""
        return {"self": MultiHeadAttention.attention_weights(cache[0].fn),
                "cross": MultiHeadAttention.attention_weights(cache[1].fn)}
