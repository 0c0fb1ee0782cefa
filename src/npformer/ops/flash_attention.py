"""Tiled attention in O(n) memory: the FlashAttention algorithm (Dao et al. 2022, algorithms 1-2;
the backward as FlashAttention-2, Dao 2023), in NumPy.

    out = softmax(Q K^T / sqrt(D) + bias, masked) V        the same function as ``ops/attention.py``

The (..., Tq, Tk) score matrix is never built. Queries go in blocks of ``block_q`` rows and keys in
blocks of ``block_k``; each row keeps a running maximum m and a running sum l of exp(s - m) (the
online softmax, Milakov & Gimelshein 2018), and the output block is rescaled by exp(m_old - m_new)
whenever the maximum grows. The forward saves only q, k, v, out and each row's log-sum-exp
lse = m + log(l); the backward recomputes every score tile from them, P = exp(S - lse), and uses
D_i = rowsum(dO_i * O_i) in place of rowsum(dP_i * P_i) (the two are equal, with dropout too).
Memory: O(T (D + Dv)) plus one (..., block_q, block_k) tile, instead of (..., Tq, Tk).

Dropout is applied to the normalised weights as in the exact op. Its keep mask is never stored:
each tile's mask is drawn from a Philox generator keyed by (a seed drawn once per call from the
caller's rng, the tile's index), so the backward draws the very same mask again.

Dimension legend:
    ...  any leading batch / head dimensions (broadcast between q, k, v as matmul does)
    Tq   query positions,  Tk  key positions
    D    query/key size,   Dv  value size
    bq   a block of query rows (<= block_q),  bk  a block of keys (<= block_k)

Mirrors ``ops/attention.py attention_forward/attention_backward`` (the reference, which keeps the
weights); tests/ops/test_flash_attention.py ties the two together and both to torch autograd.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .attention import _sum_to_shape, additive_mask

BLOCK_Q = 128      # query rows per tile  } chosen by benchmarks/bench_long_attention.py --tune
BLOCK_K = 256      # keys per tile        } (T = 2,048, float32, 4 heads of 32)


class FlashAttentionCache(NamedTuple):
    """What the backward needs: O(T) arrays only, no (Tq, Tk) array."""
    q: np.ndarray               # (..., Tq, D), already multiplied by ``scale``
    k: np.ndarray               # (..., Tk, D)
    v: np.ndarray               # (..., Tk, Dv)
    out: np.ndarray             # (..., Tq, Dv)
    lse: np.ndarray             # (..., Tq) log-sum-exp of each row's scores; +inf for a row with no key
    mask: np.ndarray | None     # bool, (..., Tq or 1, Tk or 1), True = may attend
    bias: np.ndarray | None     # float, (..., Tq or 1, Tk or 1)
    causal: bool
    scale: float
    dropout_p: float
    seed: int | None            # the Philox key's first word; None without dropout
    block_q: int
    block_k: int
    shapes: tuple               # the shapes of the caller's q, k, v (to sum broadcast gradients back)


def _as_2d_tail(a: np.ndarray | None) -> np.ndarray | None:
    """Give a mask or bias at least the two (Tq, Tk) axes, so tiles can be cut from them."""
    if a is None or a.ndim >= 2:
        return a
    return a.reshape((1,) * (2 - a.ndim) + a.shape)


def _cut(a: np.ndarray | None, i0: int, i1: int, j0: int, j1: int) -> np.ndarray | None:
    """The (i0:i1, j0:j1) tile of a mask or bias, leaving a broadcast (size-1) axis whole."""
    if a is None:
        return None
    rows = slice(i0, i1) if a.shape[-2] != 1 else slice(None)
    cols = slice(j0, j1) if a.shape[-1] != 1 else slice(None)
    return a[..., rows, cols]


def _key_stop(i1: int, t_k: int, causal: bool) -> int:
    """One past the last key any of the query rows < i1 may read (top-left causal: key j <= row i)."""
    return min(t_k, i1) if causal else t_k


def _scores(qs: np.ndarray, k: np.ndarray, i0: int, i1: int, j0: int, j1: int, mask: np.ndarray | None,
            bias: np.ndarray | None, causal: bool, diagonal: dict) -> np.ndarray | None:
    """The masked score tile S = (q scale) k^T + bias, -inf where masked; None when every entry is
    masked (the tile adds nothing). qs (..., bq, D), k (..., bk, D) -> (..., bq, bk).
    Masks are added as 0 / -inf tiles (a plain add is much faster than a masked copy);
    ``diagonal`` memoises the causal tiles, which depend only on (j0 - i0, bq, bk)."""
    allowed = _cut(mask, i0, i1, j0, j1)                           # (..., bq|1, bk|1) bool or None
    if allowed is not None and not allowed.any():
        return None
    s = np.matmul(qs, np.swapaxes(k, -1, -2))                     # (..., bq, bk)
    if bias is not None:
        s += _cut(bias, i0, i1, j0, j1)
    if allowed is not None and not allowed.all():
        s += additive_mask(allowed, s.dtype)                       # (..., bq|1, bk|1)
    if causal and j1 - 1 > i0:                                     # a tile crossing the diagonal
        key = (j0 - i0, i1 - i0, j1 - j0)
        if key not in diagonal:
            above = np.arange(j0, j1)[None, :] > np.arange(i0, i1)[:, None]   # (bq, bk) key after query
            diagonal[key] = additive_mask(~above, s.dtype)         # (bq, bk)
        s += diagonal[key]
    return s


def _keep_scale(seed: int, tile: int, shape: tuple, p: float, dtype: np.dtype) -> np.ndarray:
    """Tile ``tile``'s inverted-dropout factors, 0 or 1 / (1 - p), shape (..., bq, bk). The same
    (seed, tile) gives the same factors, so the backward regenerates the forward's mask."""
    gen = np.random.Generator(np.random.Philox(key=[seed, tile]))
    keep = gen.random(shape, dtype=np.float32) >= np.float32(p)    # (..., bq, bk)
    z = keep.astype(dtype)                                         # (..., bq, bk)
    z *= dtype.type(1.0 / (1.0 - p))
    return z


def _check(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None, bias: np.ndarray | None,
           dropout_p: float, rng: np.random.Generator | None, block_q: int, block_k: int) -> tuple[int, ...]:
    for name, a in (("q", q), ("k", k), ("v", v)):
        if not isinstance(a, np.ndarray) or a.dtype.kind != "f" or a.ndim < 2:
            raise ValueError(f"{name} must be a float array with at least 2 dimensions (..., T, D)")
    if not q.dtype == k.dtype == v.dtype:
        raise ValueError(f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ValueError(f"q (..., Tq, D), k (..., Tk, D), v (..., Tk, Dv) expected, got {q.shape}, {k.shape}, "
                         f"{v.shape}")
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    full = lead + (q.shape[-2], k.shape[-2])
    for name, arr in (("mask", mask), ("bias", bias)):
        if arr is None:
            continue
        if name == "mask" and arr.dtype != np.bool_:
            raise ValueError(f"mask must be boolean (True = may attend), got dtype {arr.dtype}")
        try:
            fits = np.broadcast_shapes(arr.shape, full) == full
        except ValueError:
            fits = False
        if not fits:
            raise ValueError(f"{name} of shape {a.shape} does not broadcast to the scores' shape {full}")
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p}")
    if dropout_p > 0.0 and rng is None:
        raise ValueError("attention dropout needs an explicit rng")
    for name, b in (("block_q", block_q), ("block_k", block_k)):
        if not isinstance(b, (int, np.integer)) or b < 1:
            raise ValueError(f"{name} must be a positive integer, got {b!r}")
    return lead


def flash_attention_forward(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None = None,
                            causal: bool = False, bias: np.ndarray | None = None, dropout_p: float = 0.0,
                            rng: np.random.Generator | None = None, scale: float | None = None,
                            block_q: int = BLOCK_Q, block_k: int = BLOCK_K
                            ) -> tuple[np.ndarray, FlashAttentionCache]:
    """Returns (out, cache); the arguments and ``out`` are those of ``attention_forward``.

    q (..., Tq, D), k (..., Tk, D), v (..., Tk, Dv) -> out (..., Tq, Dv).
    mask: boolean, broadcastable to (..., Tq, Tk), True = may attend (``nn.masks.padding_mask``'s
    (B, 1, 1, Tk) key-padding form included); causal: top-left, key j <= query i, never built as
    a (Tq, Tk) array; bias: float, broadcastable to (..., Tq, Tk), added to the scores.
    A query row whose keys are all masked gets a zero output. The weights are not kept.
    """
    mask = None if mask is None else np.asarray(mask)
    bias = None if bias is None else np.asarray(bias)
    lead = _check(q, k, v, mask, bias, dropout_p, rng, block_q, block_k)
    dtype = q.dtype
    t_q, t_k, d_v = q.shape[-2], k.shape[-2], v.shape[-1]
    scale = float(1.0 / np.sqrt(q.shape[-1]) if scale is None else scale)
    mask, bias = _as_2d_tail(mask), _as_2d_tail(bias)
    qs = q * dtype.type(scale)                                     # (..., Tq, D) fresh, contiguous
    seed = int(rng.integers(2**63)) if dropout_p > 0.0 and rng is not None else None   # _check: rng given
    n_k = -(-t_k // block_k)                                       # key blocks
    out = np.zeros(lead + (t_q, d_v), dtype=dtype)                 # (..., Tq, Dv)
    lse = np.full(lead + (t_q,), np.inf, dtype=dtype)              # (..., Tq)
    diagonal: dict = {}                                            # causal tiles by position
    for bi, i0 in enumerate(range(0, t_q, block_q)):
        i1 = min(i0 + block_q, t_q)
        q_i = qs[..., i0:i1, :]                                    # (..., bq, D)
        m = np.full(lead + (i1 - i0, 1), -np.inf, dtype=dtype)     # (..., bq, 1) running max
        l_sum = np.zeros(lead + (i1 - i0, 1), dtype=dtype)         # (..., bq, 1) running sum
        acc = out[..., i0:i1, :]                                   # (..., bq, Dv) a view: filled in place
        for bj, j0 in enumerate(range(0, _key_stop(i1, t_k, causal), block_k)):
            j1 = min(j0 + block_k, t_k)
            s = _scores(q_i, k[..., j0:j1, :], i0, i1, j0, j1, mask, bias, causal, diagonal)  # (..., bq, bk)
            if s is None:
                continue
            m_new = np.maximum(m, s.max(axis=-1, keepdims=True))  # (..., bq, 1)
            # a row with no key yet has max -inf; exp(s - (-inf)) would be NaN, so shift by 0
            m_safe = np.where(np.isfinite(m_new), m_new, dtype.type(0))   # (..., bq, 1)
            s -= m_safe
            p = np.exp(s, out=s)                                   # (..., bq, bk) exp(s - m)
            alpha = np.exp(m - m_safe)                             # (..., bq, 1) rescales the old sums
            l_sum *= alpha
            l_sum += p.sum(axis=-1, keepdims=True)
            if seed is not None:                                   # dropout_p > 0
                p *= _keep_scale(seed, bi * n_k + bj, p.shape, dropout_p, dtype)
            acc *= alpha
            acc += np.matmul(p, v[..., j0:j1, :])                  # (..., bq, Dv)
            m = m_new
        has_key = l_sum > 0                                        # (..., bq, 1)
        r = np.zeros_like(l_sum)                                   # (..., bq, 1)
        np.divide(1.0, l_sum, out=r, where=has_key)
        acc *= r                                                   # a row with no key stays 0
        np.log(l_sum, out=l_sum, where=has_key)
        l_sum += m
        np.copyto(lse[..., i0:i1], l_sum[..., 0], where=has_key[..., 0])
    cache = FlashAttentionCache(qs, k, v, out, lse, mask, bias, bool(causal), scale, float(dropout_p), seed,
                                int(block_q), int(block_k), (q.shape, k.shape, v.shape))
    return out, cache


def flash_attention_backward(dout: np.ndarray, cache: FlashAttentionCache
                             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Returns (dq, dk, dv) with the shapes of q, k, v; the score tiles are recomputed, never stored."""
    qs, k, v, out, lse, mask, bias, causal, scale, p_drop, seed, block_q, block_k, shapes = cache
    dtype = qs.dtype
    lead, t_q, t_k = out.shape[:-2], qs.shape[-2], k.shape[-2]
    n_k = -(-t_k // block_k)
    big = np.einsum("...i,...i->...", dout, out)[..., None]       # (..., Tq, 1) D_i = rowsum(dO * O)
    dq = np.zeros(lead + qs.shape[-2:], dtype=dtype)               # (..., Tq, D)
    dk = np.zeros(lead + k.shape[-2:], dtype=dtype)                # (..., Tk, D)
    dv = np.zeros(lead + v.shape[-2:], dtype=dtype)                # (..., Tk, Dv)
    diagonal: dict = {}                                            # causal tiles by position
    for bi, i0 in enumerate(range(0, t_q, block_q)):
        i1 = min(i0 + block_q, t_q)
        q_i, do_i = qs[..., i0:i1, :], dout[..., i0:i1, :]         # (..., bq, D), (..., bq, Dv)
        lse_i, d_i = lse[..., i0:i1, None], big[..., i0:i1, :]     # (..., bq, 1) each
        dq_i = dq[..., i0:i1, :]                                   # (..., bq, D) a view: filled in place
        for bj, j0 in enumerate(range(0, _key_stop(i1, t_k, causal), block_k)):
            j1 = min(j0 + block_k, t_k)
            k_j, v_j = k[..., j0:j1, :], v[..., j0:j1, :]          # (..., bk, D), (..., bk, Dv)
            s = _scores(q_i, k_j, i0, i1, j0, j1, mask, bias, causal, diagonal)   # (..., bq, bk)
            if s is None:
                continue
            s -= lse_i                                             # lse = +inf on a row with no key: P = 0
            p = np.exp(s, out=s)                                   # (..., bq, bk) the weights P
            dp = np.matmul(do_i, np.swapaxes(v_j, -1, -2))         # (..., bq, bk) dL/d(used weights)
            if seed is not None:                                   # p_drop > 0
                z = _keep_scale(seed, bi * n_k + bj, p.shape, p_drop, dtype)   # (..., bq, bk)
                dv[..., j0:j1, :] += np.matmul(np.swapaxes(p * z, -1, -2), do_i)
                dp *= z
            else:
                dv[..., j0:j1, :] += np.matmul(np.swapaxes(p, -1, -2), do_i)   # (..., bk, Dv)
            dp -= d_i
            dp *= p                                                # dS = P (dP - D), w.r.t. q_s k^T
            dq_i += np.matmul(dp, k_j)                             # (..., bq, D)
            dk[..., j0:j1, :] += np.matmul(np.swapaxes(dp, -1, -2), q_i)   # (..., bk, D)
    dq *= dtype.type(scale)                                        # S = (q scale) k^T
    q_shape, k_shape, v_shape = shapes
    return _sum_to_shape(dq, q_shape), _sum_to_shape(dk, k_shape), _sum_to_shape(dv, v_shape)
