"""Linear, LayerNorm, Embedding and Dropout as modules over the core ops.

Initialisation follows PyTorch's defaults so that a freshly made npformer model
trains like a freshly made torch one; every rng is explicit.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from ..ops.dropout import dropout_backward, dropout_forward
from ..ops.embedding import embedding_backward, embedding_forward
from ..ops.layernorm import layernorm_backward, layernorm_forward
from ..ops.linear import linear_backward, linear_forward
from .module import Module


class Linear(Module):
    """y = x W^T + b; W (out_features, in_features), init U(-1/sqrt(in), 1/sqrt(in)) like torch."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 rng: np.random.Generator | None = None, dtype: DTypeLike = np.float32) -> None:
        super().__init__()
        rng = rng if rng is not None else np.random.default_rng(0)
        bound = 1.0 / math.sqrt(in_features)
        self.params["weight"] = rng.uniform(-bound, bound, (out_features, in_features)).astype(dtype)
        if bias:
            self.params["bias"] = rng.uniform(-bound, bound, (out_features,)).astype(dtype)

    def forward(self, x: np.ndarray) -> tuple[np.ndarray, Any]:
        return linear_forward(x, self.params["weight"], self.params.get("bias"))

    def backward(self, dy: np.ndarray, cache: Any) -> tuple[Any, dict[str, np.ndarray]]:
        dx, dw, db = linear_backward(dy, cache)
        grads = {"weight": dw}
        if db is not None:
            grads["bias"] = db
        return dx, grads


class LayerNorm(Module):
    def __init__(self, d: int, eps: float = 1e-5, dtype: DTypeLike = np.float32) -> None:
        super().__init__()
        self.eps = eps
        self.params["weight"] = np.ones(d, dtype=dtype)
        self.params["bias"] = np.zeros(d, dtype=dtype)

    def forward(self, x: np.ndarray) -> tuple[np.ndarray, Any]:
        return layernorm_forward(x, self.params["weight"], self.params["bias"], self.eps)

    def backward(self, dy: np.ndarray, cache: Any) -> tuple[Any, dict[str, np.ndarray]]:
        dx, dw, db = layernorm_backward(dy, cache)
        return dx, {"weight": dw, "bias": db}


class Embedding(Module):
    """A (num_embeddings, dim) table, init N(0, 1) like torch."""

    def __init__(self, num_embeddings: int, dim: int, rng: np.random.Generator | None = None,
                 dtype: DTypeLike = np.float32, std: float = 1.0) -> None:
        super().__init__()
        rng = rng if rng is not None else np.random.default_rng(0)
        self.params["weight"] = (rng.standard_normal((num_embeddings, dim)) * std).astype(dtype)

    @property
    def num_embeddings(self) -> int:
        return self.params["weight"].shape[0]

    def forward(self, ids: np.ndarray) -> tuple[np.ndarray, Any]:
        return embedding_forward(ids, self.params["weight"])

    def backward(self, dout: np.ndarray, cache: Any,
                 dweight: np.ndarray | None = None) -> tuple[Any, dict[str, np.ndarray]]:
        """dweight: a gradient of the table to add into in place (a tied projection's); None: zeros."""
        return None, {"weight": embedding_backward(dout, cache, dweight)}


class Dropout(Module):
    """Inverted dropout; active only in training mode and only with an rng."""

    def __init__(self, p: float) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {p}")
        self.p = p

    def forward(self, x: np.ndarray, rng: np.random.Generator | None = None,
                out: np.ndarray | None = None) -> tuple[np.ndarray, Any]:
        """out: may be x itself, to drop in place (x fresh and needed no more by the caller)."""
        return dropout_forward(x, self.p, rng, training=self.training and self.p > 0, out=out)

    def backward(self, dy: np.ndarray, cache: Any, out: np.ndarray | None = None) -> tuple[Any, dict[str, np.ndarray]]:
        return dropout_backward(dy, cache, out), {}
