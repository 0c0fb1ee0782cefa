"""Encoder and decoder stacks: N identical layers, then an optional final LayerNorm
(pre-LN stacks need it; torch calls it ``norm``).

Dimension legend: B batch, S source positions, T target positions, E model width.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from .basic import LayerNorm
from .layers import DecoderLayer, EncoderLayer
from .module import Module, ModuleList, add_grads


class _Stack(Module):
    """N layers of one type (``layer_type``), then an optional final LayerNorm ``norm``."""

    # children made by add_module in __init__, declared for readers and the type checker
    layers: ModuleList

    layer_type: type[EncoderLayer] | type[DecoderLayer]

    def __init__(self, n_layers: int, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1,
                 activation: str = "relu", norm_first: bool = False, final_norm: bool = False,
                 eps: float = 1e-5, rng: np.random.Generator | None = None, dtype: DTypeLike = np.float32) -> None:
        super().__init__()
        rng = rng if rng is not None else np.random.default_rng(0)
        self.add_module("layers", ModuleList(
            self.layer_type(d_model, n_heads, d_ff, dropout, activation, norm_first, eps, rng, dtype)
            for _ in range(n_layers)))
        self.norm = self.add_module("norm", LayerNorm(d_model, eps, dtype)) if final_norm else None

    def _forward(self, x: np.ndarray, *args: Any) -> tuple[np.ndarray, Any]:
        """Every layer in turn, ``layer.forward(x, *args)``, then the final norm."""
        caches = []
        for layer in self.layers:
            x, c = layer.forward(x, *args)
            caches.append(c)
        cn = None
        if self.norm is not None:
            x, cn = self.norm.forward(x)
        return x, (caches, cn)

    def backward(self, dy: np.ndarray, cache: Any) -> tuple[Any, dict[str, np.ndarray]]:
        """Encoder: (dx, grads). Decoder: ((dx, dmemory), grads); every layer reads the same
        memory, so dmemory sums the gradients of all the cross-attentions."""
        caches, cn = cache
        grads: dict = {}
        if self.norm is not None:
            dy, g = self.norm.backward(dy, cn)
            add_grads(grads, g, "norm")
        dmemory = None
        for i in reversed(range(len(self.layers))):
            d, g = self.layers[i].backward(dy, caches[i])
            add_grads(grads, g, f"layers.{i}")
            if self.layer_type.cross:                              # d = (dx, dmemory)
                dy, dm = d
                dmemory = dm if dmemory is None else dmemory + dm
            else:
                dy = d
        return ((dy, dmemory) if self.layer_type.cross else dy), grads

    @classmethod
    def attention_weights(cls, cache: Any) -> list[dict]:
        """One dict per layer: {'self': (B, H, S, S)} (Encoder), {'self', 'cross': (B, H, T, S)} (Decoder)."""
        return [cls.layer_type.attention_weights(c) for c in cache[0]]


class Encoder(_Stack):
    layer_type = EncoderLayer
    layers: ModuleList[EncoderLayer]

    def forward(self, x: np.ndarray, mask: np.ndarray | None = None, bias: np.ndarray | None = None,
                causal: bool = False, rng: np.random.Generator | None = None) -> tuple[np.ndarray, Any]:
        """x (B, S, E) -> (y (B, S, E), cache)."""
        return self._forward(x, mask, bias, causal, rng)


class Decoder(_Stack):
    layer_type = DecoderLayer
    layers: ModuleList[DecoderLayer]

    def forward(self, x: np.ndarray, memory: np.ndarray, tgt_mask: np.ndarray | None = None,
                memory_mask: np.ndarray | None = None, tgt_bias: np.ndarray | None = None,
                memory_bias: np.ndarray | None = None, causal: bool = True,
                rng: np.random.Generator | None = None) -> tuple[np.ndarray, Any]:
        """x (B, T, E), memory (B, S, E) -> (y (B, T, E), cache)."""
        return self._forward(x, memory, tgt_mask, memory_mask, tgt_bias, memory_bias, causal, rng)
