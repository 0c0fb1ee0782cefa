"""Position-wise feed-forward network (paper section 3.3):

    FFN(x) = act(x W1^T + b1) W2^T + b2,  applied to each position alone.

Children are named ``linear1``/``linear2`` as in torch's Transformer layers; dropout
sits after the activation, where torch puts it. Where the GELU's compiled twin runs (``ops/kernels.py``),
linear1's bias is added by the twin in its one pass over the activations, not by the linear.
Dimension legend: ``...`` leading dims, E model width, F inner width (d_ff).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from ..ops import (
    gelu_backward,
    gelu_forward,
    gelu_tanh_backward,
    gelu_tanh_forward,
    kernels,
    relu_backward,
    relu_forward,
)
from ..ops.linear import linear_forward
from .basic import Dropout, Linear
from .module import Module, add_grads

# name -> (forward(x) -> (y, cache), backward(dy, cache) -> dx)
ACTIVATIONS: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
    "relu": (relu_forward, relu_backward), "gelu": (gelu_forward, gelu_backward),
    "gelu_tanh": (gelu_tanh_forward, gelu_tanh_backward)}       # GPT-2's "gelu_new"
# activations whose compiled twin adds linear1's bias itself, in its one pass (ops/fused/activations.py)
BIAS_FUSED = ("gelu", "gelu_tanh")


class FeedForward(Module):
    # children made by add_module in __init__, declared for readers and the type checker
    linear1: Linear
    dropout: Dropout
    linear2: Linear

    def __init__(self, d_model: int, d_ff: int, activation: str = "relu", dropout: float = 0.0,
                 rng: np.random.Generator | None = None, dtype: DTypeLike = np.float32) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        rng = rng if rng is not None else np.random.default_rng(0)
        self.activation = activation
        self.add_module("linear1", Linear(d_model, d_ff, rng=rng, dtype=dtype))
        self.add_module("dropout", Dropout(dropout))
        self.add_module("linear2", Linear(d_ff, d_model, rng=rng, dtype=dtype))

    def forward(self, x: np.ndarray, rng: np.random.Generator | None = None) -> tuple[np.ndarray, Any]:
        act_f, _ = ACTIVATIONS[self.activation]
        w1, b1 = self.linear1.params["weight"], self.linear1.params.get("bias")
        if (b1 is not None and self.activation in BIAS_FUSED
                and kernels.twins(f"{self.activation}_forward", x.size // max(x.shape[-1], 1) * w1.shape[0], x.dtype)):
            h, c1 = linear_forward(x, w1, b1, bias_later=True)     # (..., F) x W1^T: the twin adds b1
            a, ca = act_f(h, b1)                                   # (..., F) act(x W1^T + b1), one pass
        else:
            h, c1 = self.linear1.forward(x)                        # (..., F)
            a, ca = act_f(h)                                       # (..., F)
        a, cd = self.dropout.forward(a, rng, out=a)                # (..., F) in place: act's cache keeps no a
        y, c2 = self.linear2.forward(a)                            # (..., E)
        return y, (c1, ca, cd, c2)

    def backward(self, dy: np.ndarray, cache: Any) -> tuple[Any, dict[str, np.ndarray]]:
        c1, ca, cd, c2 = cache
        _, act_b = ACTIVATIONS[self.activation]
        grads: dict = {}
        da, g2 = self.linear2.backward(dy, c2)
        da, _ = self.dropout.backward(da, cd, out=da)              # in place: da is linear2's fresh dx
        dh = act_b(da, ca)
        dx, g1 = self.linear1.backward(dh, c1)
        add_grads(grads, g1, "linear1")
        add_grads(grads, g2, "linear2")
        return dx, grads
