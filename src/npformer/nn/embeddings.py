"""Token embeddings plus position information, then dropout (paper sections 3.4, 3.5, 5.4).

    x = dropout(E[ids] * sqrt(d_model) + PE[pos])

Positions are the paper's sinusoids (no parameters) or a learned table
(``pos.weight``, with a hard maximum length).
Dimension legend: B batch, T positions, V vocabulary, E model width.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from ..ops import sinusoidal_positions
from .basic import Dropout, Embedding
from .module import Module


class Embeddings(Module):
    # children made by add_module in __init__, declared for readers and the type checker
    tok: Embedding
    pos: Embedding                                # learned positions only
    dropout: Dropout

    def __init__(self, vocab_size: int, d_model: int, max_len: int = 512, positional: str = "sinusoidal",
                 scale: bool = True, dropout: float = 0.1, rng: np.random.Generator | None = None,
                 dtype: DTypeLike = np.float32) -> None:
        super().__init__()
        if positional not in ("sinusoidal", "learned", "none"):
            raise ValueError(f"positional must be 'sinusoidal', 'learned' or 'none', got {positional!r}")
        rng = rng if rng is not None else np.random.default_rng(0)
        self.d_model, self.max_len, self.positional = d_model, max_len, positional
        self.scale = math.sqrt(d_model) if scale else 1.0
        # N(0, d^-1/2) so that E * sqrt(d) has unit scale
        self.add_module("tok", Embedding(vocab_size, d_model, rng=rng, dtype=dtype, std=d_model ** -0.5))
        if positional == "learned":
            self.add_module("pos", Embedding(max_len, d_model, rng=rng, dtype=dtype, std=0.02))
        self.add_module("dropout", Dropout(dropout))
        self._pe: np.ndarray | None = None

    @property
    def vocab_size(self) -> int:
        return self.tok.num_embeddings

    def positions(self, t: int, offset: int = 0, dtype: DTypeLike = np.float32) -> np.ndarray:
        """(T, E) position vectors for positions offset .. offset + T - 1."""
        if offset + t > self.max_len:
            raise ValueError(f"sequence of length {offset + t} is longer than max_len {self.max_len}")
        if self.positional == "learned":
            return self.pos.params["weight"][offset:offset + t]
        if self.positional == "none":
            return np.zeros((t, self.d_model), dtype=dtype)
        if self._pe is None or self._pe.dtype != dtype:
            self._pe = sinusoidal_positions(self.max_len, self.d_model, dtype)
        return self._pe[offset:offset + t]

    def forward(self, ids: np.ndarray, rng: np.random.Generator | None = None,
                offset: int = 0) -> tuple[np.ndarray, Any]:
        """ids (B, T) int -> (x (B, T, E), cache). ``offset`` shifts positions (KV-cache decoding)."""
        b, t = ids.shape
        e, ce = self.tok.forward(ids)                               # (B, T, E)
        x = e * e.dtype.type(self.scale)                            # (B, T, E)
        x += self.positions(t, offset, x.dtype)
        x, cd = self.dropout.forward(x, rng)
        return x, (ce, cd, t, offset)

    def backward(self, dx: np.ndarray, cache: Any, dtok: np.ndarray | None = None) -> tuple[Any, dict[str, np.ndarray]]:
        """Returns (None, grads): ids have no gradient.

        dtok: the token table's gradient so far, (V, E), e.g. a tied output projection's; the
        lookups' rows are added into it in place and it is returned as ``tok.weight``."""
        ce, cd, t, offset = cache
        dx, _ = self.dropout.backward(dx, cd)
        _, g = self.tok.backward(dx * dx.dtype.type(self.scale), ce, dtok)
        grads = {"tok.weight": g["weight"]}
        if self.positional == "learned":
            dpos = np.zeros_like(self.pos.params["weight"])          # (max_len, E)
            dpos[offset:offset + t] = dx.reshape(-1, t, dx.shape[-1]).sum(axis=0)
            grads["pos.weight"] = dpos
        return None, grads
