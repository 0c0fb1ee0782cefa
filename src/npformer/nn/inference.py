"""Inference on packed sequences: the fast twin of the teaching modules' forwards, as functions
over their parameters (the modules themselves stay as the paper writes them).

    linear_packed          mirrors  Linear.forward                 (W^T from transposed_weights, if given)
    layernorm_packed       mirrors  LayerNorm.forward              (kernel: ops/inference.py)
    self_attention_packed  mirrors  MultiHeadAttention.forward     (self-attention, eval, key-padding mask)
    feedforward_packed     mirrors  FeedForward.forward            (eval: no dropout)
    encoder_layer_packed   is       EncoderLayer.block(..., fast=True) with the two F's above
    encoder_packed         mirrors  Encoder.forward                (eval, key-padding mask)

The block itself (norm, residual; post-LN or pre-LN) is not twinned: ``encoder_layer_packed``
calls the layer's own ``block`` (nn/sublayer.py), with ``fast=True`` for the in-place LayerNorm.

Packed: S sequences stand one after another in the rows of one (N, E) array, sequence i in rows
offsets[i]:offsets[i + 1] (offsets (S + 1,) from 0 to N; None: all N rows are one sequence).
Each sequence attends to its own rows only, so nothing is padded and nothing is masked, and the
result equals the padded batch's forward with a key padding mask, to float rounding. Consecutive
sequences of one length share their attention's batched products (``equal_length_runs``), and the
products with the weights read W^T stored contiguous when ``transposed_weights`` is passed.
Pinned by tests/nn/test_inference.py (float64, random weights, 1e-12) and end to end by
tests/pretrained/test_parity.py (all-MiniLM-L6-v2 against transformers' BertModel).

The functions that stand in for a module's forward return (out, None): the (out, cache)
convention with no cache, so the sub-layer F's plug into ``EncoderLayer.block`` as the forwards
do. ``linear_packed`` and ``layernorm_packed`` are kernels like ops/inference.py: they return the
array, written into ``out`` if given. None of them writes into its input x.

Dimension legend: N packed rows, S sequences, E model width, F inner width (d_ff),
H heads, D = E / H head size, L one sequence's length.
"""
from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from ..ops.inference import attention_inference, gelu_inference_, layernorm_inference, matmul_inference
from .feedforward import ACTIVATIONS

if TYPE_CHECKING:
    from .attention import MultiHeadAttention
    from .basic import LayerNorm, Linear
    from .feedforward import FeedForward
    from .layers import EncoderLayer
    from .module import Module
    from .stacks import Encoder


def linear_packed(linear: Linear, x: np.ndarray, out: np.ndarray | None = None,
                  weights: dict | None = None, add_bias: bool = True) -> np.ndarray:
    """x W^T + b, no cache: x (..., I) -> (..., O), written into ``out`` if given.

    weights: ``transposed_weights``' dict; W^T is then read from it, contiguous (I, O).
    add_bias=False leaves b out (x W^T), for a caller that adds it in its own pass."""
    w_t = weights.get(linear) if weights else None
    w_t = linear.params["weight"].T if w_t is None else w_t         # (I, O)
    y = matmul_inference(x, w_t, out=out)                           # (..., O)
    if add_bias and "bias" in linear.params:
        y += linear.params["bias"]
    return y


def transposed_weights(module: Module) -> dict:
    """{Linear or MultiHeadAttention inside ``module``: its weight transposed, (I, O) C-contiguous}.

    Why: ``x @ W.T`` hands the BLAS a transposed operand, and OpenBLAS's float32 products on few
    rows (a query, a short batch) run at about half speed that way; ``x @ W^T`` with W^T stored
    contiguous does not (benchmarks/bench_minilm.py). Same numbers either way, to float rounding.
    The copies are made now: edit the weights afterwards and the dict is stale (make it again).
    """
    from .attention import MultiHeadAttention
    from .basic import Linear

    out: dict[Module, np.ndarray] = {}
    for _, m in module.modules():
        if isinstance(m, Linear):
            out[m] = np.ascontiguousarray(m.params["weight"].T)      # (I, O)
        elif isinstance(m, MultiHeadAttention):
            out[m] = np.ascontiguousarray(m.params["in_proj_weight"].T)  # (E, 3E)
    return out


def layernorm_packed(norm: LayerNorm, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """LayerNorm, no cache: x (..., E) -> (..., E); ``out`` may be ``x`` (in place)."""
    return layernorm_inference(x, norm.params["weight"], norm.params["bias"], norm.eps, out=out)


def _check_packed(x: np.ndarray, e: int, offsets: Sequence[int] | np.ndarray | None) -> Sequence[int] | np.ndarray:
    """The offsets of x (N, E), checked; (0, N) when None."""
    if x.ndim != 2 or x.shape[1] != e:
        raise ValueError(f"x must be packed as (N, {e}), got shape {x.shape}")
    n = x.shape[0]
    offsets = (0, n) if offsets is None else offsets
    if offsets[0] != 0 or offsets[-1] != n:
        raise ValueError(f"offsets must run from 0 to N={n}, got {offsets[0]} to {offsets[-1]}")
    return offsets


def equal_length_runs(offsets: Sequence[int] | np.ndarray) -> list[tuple[int, int, int]]:
    """Runs of consecutive packed sequences of one length: [(first row, rows, length L)], in order.

    A run of c sequences of length L is c * L contiguous rows that reshape, without a copy, to a
    (c, L, ...) batch: its attention is one batched product instead of c small ones. Sequences
    sorted by length (as SentenceEncoder sorts a batch) make few, long runs.
    """
    offsets = np.asarray(offsets)
    lengths = np.diff(offsets)                                     # (S,)
    if lengths.size == 0:
        return []
    cut = np.flatnonzero(lengths[1:] != lengths[:-1]) + 1          # where the length changes
    first = np.concatenate([[0], cut])                             # (R,) first sequence of each run
    end = np.concatenate([cut, [lengths.size]])                    # (R,)
    return [(int(offsets[a]), int(offsets[b] - offsets[a]), int(lengths[a])) for a, b in zip(first, end, strict=True)]


def self_attention_packed(mha: MultiHeadAttention, x: np.ndarray, offsets: Sequence[int] | np.ndarray | None = None,
                          weights: dict | None = None) -> tuple[np.ndarray, None]:
    """Self-attention of packed sequences: x (N, E) -> (out (N, E), None); no weights, no dropout.

    Consecutive sequences of equal length run as one batch (``equal_length_runs``): the heads of a
    run of c sequences are (c, H, L, D) views of the projection, with no padding and no mask."""
    e, h = mha.d_model, mha.n_heads
    d = e // h
    offsets = _check_packed(x, e, offsets)
    w_t = weights.get(mha) if weights else None
    w_t = mha.params["in_proj_weight"].T if w_t is None else w_t    # (E, 3E)
    qkv = matmul_inference(x, w_t)                                 # (N, 3E): q, k, v side by side
    qkv += mha.params["in_proj_bias"]
    ctx = np.empty((x.shape[0], e), dtype=x.dtype)                 # (N, E): the heads, merged
    for s, n, length in equal_length_runs(offsets):               # rows s:s+n, n // length sequences
        if length > 0:
            c = n // length
            heads = qkv[s:s + n].reshape(c, length, 3, h, d).transpose(2, 0, 3, 1, 4)  # (3, c, H, L, D) view
            out = ctx[s:s + n].reshape(c, length, h, d).transpose(0, 2, 1, 3)           # (c, H, L, D) view
            attention_inference(heads[0], heads[1], heads[2], out=out)
    return linear_packed(mha.out_proj, ctx, weights=weights), None  # (N, E)


def feedforward_packed(ffn: FeedForward, x: np.ndarray, rows: int = 512,
                       weights: dict | None = None) -> tuple[np.ndarray, None]:
    """act(x W1^T + b1) W2^T + b2, no dropout: x (..., E) -> (out (..., E), None).

    Positions go through in blocks of ``rows``, so that a block's (rows, F) hidden
    activations stay in the cache from the first product through the activation to the second.
    float32 GELU runs in place on the block with the first bias (``gelu_inference_``); other
    activations as in forward.
    """
    act_f, _ = ACTIVATIONS[ffn.activation]
    in_place = ffn.activation == "gelu" and x.dtype == np.float32
    e = x.shape[-1]
    x2 = x.reshape(-1, e)                                          # (N, E)
    out = np.empty(x2.shape[:-1] + (ffn.linear2.params["weight"].shape[0],), dtype=x.dtype)  # (N, E)
    for i in range(0, x2.shape[0], rows):
        h = linear_packed(ffn.linear1, x2[i:i + rows], weights=weights, add_bias=not in_place)  # (rows, F)
        a = gelu_inference_(h, ffn.linear1.params.get("bias")) if in_place else act_f(h)[0]  # (rows, F)
        linear_packed(ffn.linear2, a, out=out[i:i + rows], weights=weights)
    return out.reshape(x.shape[:-1] + out.shape[-1:]), None        # (..., E)


def encoder_layer_packed(layer: EncoderLayer, x: np.ndarray, offsets: Sequence[int] | np.ndarray | None = None,
                         weights: dict | None = None) -> tuple[np.ndarray, None]:
    """One encoder layer on packed sequences: x (N, E) -> (y (N, E), None). The layer's own block,
    on the fast path, around the packed self-attention and feed-forward."""
    y, _ = layer.block(x, partial(self_attention_packed, layer.self_attn, offsets=offsets, weights=weights),
                       partial(feedforward_packed, layer.ffn, weights=weights), fast=True)
    return y, None


def encoder_packed(encoder: Encoder, x: np.ndarray, offsets: Sequence[int] | np.ndarray | None = None,
                   weights: dict | None = None) -> tuple[np.ndarray, None]:
    """The encoder stack on packed sequences: x (N, E) -> (y (N, E), None); then the final norm, if any.
    weights: ``transposed_weights(encoder)``, made once and passed to every call (optional)."""
    for layer in encoder.layers:
        x, _ = encoder_layer_packed(layer, x, offsets, weights)    # (N, E)
    return (x if encoder.norm is None else layernorm_packed(encoder.norm, x)), None
