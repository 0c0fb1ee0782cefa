"""The residual sub-layer around attention and the feed-forward network (paper 3.1, 5.4), written once:

    post-LN (the paper, ``norm_first=False``):  out = LayerNorm(x + Dropout(F(x)))
    pre-LN  (``norm_first=True``):              out = x + Dropout(F(LayerNorm(x)))

Every path runs its block through ``sublayer_forward``: training (``EncoderLayer``/``DecoderLayer``),
packed inference (``fast=True``) and KV-cache decoding. Only F differs between them. The residual
sums of large arrays run on row blocks (``ops/parallel.py add``, the same bits).
Dimension legend: ``...`` leading dims, E model width.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ..ops import layernorm_inference, parallel
from ..ops.dropout import dropout_add_forward
from .module import add_grads

if TYPE_CHECKING:
    from .basic import Dropout, LayerNorm


class SublayerCache(NamedTuple):
    norm: object        # LayerNorm's cache (None on the fast path)
    fn: object          # F's own cache (attention keeps its weights here)
    drop: object        # the dropout mask, or None


def _norm(norm: LayerNorm, v: np.ndarray, fast: bool, in_place: bool,
          residual: np.ndarray | None = None) -> tuple[np.ndarray, Any]:
    """LN(v), or on the fast path LN(v + residual) with the sum made in the norm's own pass."""
    if fast:
        p = norm.params
        return layernorm_inference(v, p["weight"], p["bias"], norm.eps, out=v if in_place else None,
                                   residual=residual), None
    return norm.forward(v)


def sublayer_forward(x: np.ndarray, fn: Callable[..., tuple], norm: LayerNorm, dropout: Dropout, norm_first: bool,
                     rng: np.random.Generator | None = None, fast: bool = False) -> tuple[np.ndarray, SublayerCache]:
    """x (..., E) -> (out (..., E), SublayerCache).

    fn(h) -> (y, cache): the sub-layer F on what it reads; y must be a fresh array (the residual
    is added into it in place). fast: inference on the fast path, no dropout, LayerNorm in place
    on the fresh residual sum, no norm cache."""
    if norm_first:
        h, cn = _norm(norm, x, fast, in_place=False)               # (..., E); x stays for the residual
        y, cf = fn(h)                                              # (..., E)
        y, cd = _dropout_add(y, x, dropout, rng, fast)             # x + Dropout(F(LN(x))), in place
        return y, SublayerCache(cn, cf, cd)
    y, cf = fn(x)                                                  # (..., E)
    if fast:                                                       # LN(x + F(x)): the sum in the norm's pass
        out, cn = _norm(norm, y, fast, in_place=True, residual=x)
        return out, SublayerCache(cn, cf, None)
    y, cd = _dropout_add(y, x, dropout, rng, fast)                 # x + Dropout(F(x)), in place
    out, cn = _norm(norm, y, fast, in_place=True)                  # LN(x + Dropout(F(x)))
    return out, SublayerCache(cn, cf, cd)


def _dropout_add(y: np.ndarray, x: np.ndarray, dropout: Dropout, rng: np.random.Generator | None,
                 fast: bool) -> tuple[np.ndarray, Any]:
    """x + Dropout(y), into y (F's fresh output); the dropout's cache. One pass with the compiled twin."""
    if fast:
        return parallel.add(y, x, out=y), None
    return dropout_add_forward(y, x, dropout.p, rng, training=dropout.training and dropout.p > 0, out=y)


def sublayer_backward(dout: np.ndarray, cache: SublayerCache, fn_backward: Callable[..., tuple], norm: LayerNorm,
                      dropout: Dropout, norm_first: bool, names: tuple[str, str]) -> tuple[Any, dict[str, np.ndarray]]:
    """fn_backward(dy, cache.fn) -> (dinputs, grads), dinputs dh or a tuple (dh, *more).
    Returns (dx, or (dx, *more), grads keyed ``names[0].*`` (the norm) and ``names[1].*`` (F))."""
    if norm_first:
        dy, _ = dropout.backward(dout, cache.drop)
        d, g_fn = fn_backward(dy, cache.fn)
        dh, more = (d[0], d[1:]) if isinstance(d, tuple) else (d, None)
        dx_norm, g_norm = norm.backward(dh, cache.norm)
        dx = parallel.add(dout, dx_norm)                           # the residual path adds dout
    else:
        ds, g_norm = norm.backward(dout, cache.norm)               # through LN to the residual sum
        dy, _ = dropout.backward(ds, cache.drop)
        d, g_fn = fn_backward(dy, cache.fn)
        dh, more = (d[0], d[1:]) if isinstance(d, tuple) else (d, None)
        dx = parallel.add(ds, dh)
    grads: dict = {}
    add_grads(grads, g_norm, names[0])
    add_grads(grads, g_fn, names[1])
    return (dx if more is None else (dx, *more)), grads
