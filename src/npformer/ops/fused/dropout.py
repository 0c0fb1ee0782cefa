"""Dropout's twin, alone or fused with the residual add: out = y * mask (+ x) in one pass, mask kept.

Mirrors ``ops/dropout.py`` ``dropout_forward`` and ``dropout_add_forward`` (dropout, then the residual
sum); pinned by tests/ops/test_twins.py (test_dropout_twins). The masks are the reference's, bit for bit:

- large arrays (the reference's row blocks): block i's draws come from its own SFC64 stream, seeded
  by ``SeedSequence(root, spawn_key=(i,))``. NumPy seeds each stream (``ops/dropout.py block_states``
  reads the state it starts from) and the twin runs the generator itself, a chunk of raw 64-bit
  outputs at a time into a small buffer (the loop the dependency chain allows), then one vectorized
  pass that reads the buffer as 32-bit draws, in the order ``random_raw(...).view(np.uint32)`` gives
  them, keeps where a draw is >= cut, and writes the mask and the output. SFC64's step, as NumPy's
  C code takes it: tmp = a + b + counter; counter += 1; a = b ^ (b >> 11); b = c + (c << 3);
  c = rotl(c, 24) + tmp; the output is tmp.
- small arrays (one stream of ``rng``, float32 uniforms): the draws are NumPy's (``rng.random``, as the
  reference draws them) and only the mask and the sum are fused.

Dimension legend: N elements (flat), K blocks.
"""
from __future__ import annotations

import numpy as np
from numba import prange
from numba.core.extending import register_jitable

from ..kernels import Kernel

CHUNK = 1 << 16
RAW = 1024                 # raw 64-bit outputs per buffer: 8 KiB, two draws each
_1 = np.uint64(1)
_3 = np.uint64(3)
_11 = np.uint64(11)
_24 = np.uint64(24)
_40 = np.uint64(40)


@register_jitable
def _apply(yc, xc, has_x, mc, oc):  # type: ignore[no-untyped-def]
    """oc = yc * mc (+ xc): one chunk's output from its mask; xc is empty without a residual. oc may be yc."""
    if has_x:
        for i in range(yc.size):
            oc[i] = yc[i] * mc[i] + xc[i]
    else:
        for i in range(yc.size):
            oc[i] = yc[i] * mc[i]


def _streams(y: np.ndarray, x: np.ndarray, states: np.ndarray, per: int, cut: np.uint32, scale: np.ndarray,
             out: np.ndarray, mask: np.ndarray) -> None:
    # y, out, mask (N,); x (N,) or (0,) for no residual; states (K, 4) uint64, each block's SFC64 state
    # (a, b, c, counter); per: elements per block; scale (1,) in the dtype. out may be y.
    n = y.size
    has_x = x.size > 0
    s = scale[0]
    zero = s - s
    for k in prange(states.shape[0]):
        a, b, c, count = states[k, 0], states[k, 1], states[k, 2], states[k, 3]
        raw = np.empty(RAW, np.uint64)
        draws = raw.view(np.uint32)                                   # (2 RAW,) low half first
        lo = k * per
        hi = min(n, lo + per)
        while lo < hi:
            m = min(2 * RAW, hi - lo)
            for j in range((m + 1) // 2):
                tmp = a + b + count
                count += _1
                a = b ^ (b >> _11)
                b = c + (c << _3)
                c = ((c << _24) | (c >> _40)) + tmp
                raw[j] = tmp
            mc = mask[lo:lo + m]                                         # indexed from 0: LLVM vectorizes
            for i in range(m):
                mc[i] = s if draws[i] >= cut else zero
            _apply(y[lo:lo + m], x[lo:lo + m], has_x, mc, out[lo:lo + m])
            lo += m


def _keep(y: np.ndarray, x: np.ndarray, keep: np.ndarray, scale: np.ndarray, out: np.ndarray,
          mask: np.ndarray) -> None:
    # y, out, mask (N,); x (N,) or (0,); keep (N,) bool; scale (1,) in the dtype. out may be y.
    n = y.size
    has_x = x.size > 0
    s = scale[0]
    zero = s - s
    for c in prange((n + CHUNK - 1) // CHUNK):
        lo, hi = c * CHUNK, min(n, (c + 1) * CHUNK)
        kc, mc = keep[lo:hi], mask[lo:hi]                              # indexed from 0: LLVM vectorizes
        for i in range(hi - lo):
            mc[i] = s if kc[i] else zero
        _apply(y[lo:hi], x[lo:hi], has_x, mc, out[lo:hi])


streams_kernel = Kernel(_streams)
keep_kernel = Kernel(_keep)


def _flat(y: np.ndarray, x: np.ndarray | None, out: np.ndarray | None
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    res = np.empty_like(y) if out is None else out                     # (...)
    mask = np.empty_like(y)                                            # (...)
    xf = np.empty(0, y.dtype) if x is None else x.reshape(-1)          # (N,) or (0,)
    return res, mask, xf


def dropout_streams(y: np.ndarray, x: np.ndarray | None, states: np.ndarray, per: int, cut: np.uint32,
                    scale: np.floating, out: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """(y * mask (+ x), mask) with block k's draws from SFC64 state ``states[k]`` over ``per`` elements;
    all C-contiguous of one shape and dtype; ``out`` may be y."""
    res, mask, xf = _flat(y, x, out)
    streams_kernel(y.reshape(-1), xf, states, per, cut, np.array([scale], y.dtype), res.reshape(-1),
                   mask.reshape(-1))
    return res, mask


def dropout_keep(y: np.ndarray, x: np.ndarray | None, keep: np.ndarray, scale: np.floating,
                 out: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """(y * mask (+ x), mask), mask = keep * scale; all C-contiguous of one shape and dtype."""
    res, mask, xf = _flat(y, x, out)
    keep_kernel(y.reshape(-1), xf, keep.reshape(-1), np.array([scale], y.dtype), res.reshape(-1), mask.reshape(-1))
    return res, mask
