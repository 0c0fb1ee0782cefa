"""Forward-only fast twins of reference ops, for inference (sentence embeddings):

    attention_inference  mirrors  ops/attention.py  attention_forward  (no mask, no dropout, no weights)
    layernorm_inference  mirrors  ops/layernorm.py  layernorm_forward  (no cache; in place if asked)
    softmax_numerator_   mirrors  ops/softmax.py    softmax_forward    (the numerator only, in place)
    gelu_inference_      mirrors  ops/activations.py gelu_forward      (float32, in place, no cache)
    matmul_inference     mirrors  np.matmul of a few rows by a weight   (tiled, for the BLAS's no-copy kernel)

Same formulas, no caches: they work in blocks that stay in the L2 cache and write into given
buffers. Two of them have compiled twins (numba, ``ops/kernels.py`` chooses): ``gelu_inference_``
with its bias and ``layernorm_inference`` with its residual run ``ops/fused/inference.py``, one pass
each (tests/ops/test_twins.py). tests/nn/test_inference.py pins each equal to its reference op
(float64, 1e-12); the reference ops are checked against PyTorch in tests/ops.
tests/pretrained/test_minilm_kernels.py pins ``matmul_inference`` to np.matmul, and
attention_inference's two softmax paths (with and without the row maxima) to attention_forward, in
float64 and at the edges of float32's range.

Dimension legend:
    ...  any leading batch / head dimensions
    Tq   query positions,  Tk  key positions
    D    query/key size,   Dv  value size
    N    rows,             C   normalised features
"""
from __future__ import annotations

import math

import numpy as np

from . import kernels
from .activations import _BLOCK, _GELU_TAIL32, _PG32, _QG32, _horner, _normal_cdf_tail32

# Inference attention takes queries in blocks of about this many (query, key, feature) products
# per head: a block's scores (rows x Tk per head) then stay in the L2 cache through max, exp and
# sum, and each block's matrix products stay at or below OpenBLAS's m*n*k threading threshold
# (65536 * 4), so they run on the calling thread: products this small lose more to waking and
# syncing BLAS threads (badly so on a busy machine) than threads win.
INFERENCE_BLOCK = 1 << 18

# At most about this many scores (512 KiB of float32) per block across the leading (sequence, head)
# dimensions: 32 texts of 256 tokens, 12 heads, took one layer's attention from 132 ms (all at once,
# 12 MB of scores per block) to 68 ms (a text at a time), thread CPU time on one core.
SCORES_BLOCK = 1 << 17

# Scores within +-EXP_SAFE are exponentiated as they are, without subtracting the row maximum:
# exp(60) = 1.1e26, times 512 keys, stays far below float32's 3.4e38; exp(-60) = 8.8e-27 is far
# above its smallest normal number (1.2e-38), so no sum is 0 or loses precision.
EXP_SAFE = 60.0

# k^T is copied contiguous when k is a strided view (a head of the packed q|k|v projection) with at least
# this many keys: numpy's stacked matmul with a transposed strided operand ran the scores' products slower
# than with k^T copied contiguous, the copy included, for many keys, and faster for a few
# (benchmarks/bench_bounds.py --only strided-kt; on a 2-core AMD EPYC, 12 heads of 32, one thread, in
# attention_inference's query blocks: the view 1.74x the copy's time for one text of 256 keys, 1.24x for
# 8 texts of 40, 0.65x for 32 texts of 12). A threshold from one machine.
KT_COPY_MIN_KEYS = 32

# The inference LayerNorm goes through whole rows, about this many elements at a time: 65,536
# elements per block (170 rows of 384 float32 = 255 KiB) stay in the L2 cache through the five passes.
_ELEMENTS_PER_BLOCK = 1 << 16

# A product of at most FEW_ROWS rows by a weight matrix (a query's tokens through a layer) runs as
# tiles of at most TILE_DEPTH inputs by as many outputs as keep rows x depth x outputs at or under
# TILE_MACS. Why: OpenBLAS (SkylakeX kernel) copies ("packs") the weight matrix into its blocked
# layout on every call; with a dozen rows that copy costs as much as the arithmetic, while products
# of under about a million multiply-adds go through its small-matrix path, straight from the
# operands. The 24 products of all-MiniLM-L6-v2 at 12 rows, one BLAS thread, thread CPU time:
# 6.7 ms whole, 3.7 ms tiled, 1.5 ms at 1 row (the weights read once, no packing); at 40 rows and
# more, whole products are faster again. Tile sizes from 96 to 384 inputs and 0.6 to 1 M
# multiply-adds change a query's time by under 5%.
FEW_ROWS = 24
TILE_DEPTH = 192
TILE_MACS = 900_000


def softmax_numerator_(x: np.ndarray) -> np.ndarray:
    """In place, x <- exp(x - max(x)) over the last axis; returns the row sums (..., 1).

    softmax(x) is x / sums afterwards. Attention at inference divides its output instead,
    softmax(s) @ v = (exp(s - m) @ v) / sum(exp(s - m)): Dv divisions per row, not N.
    Every row needs a finite entry (no masking here).
    """
    m = np.maximum.reduce(x, axis=-1, keepdims=True)        # (..., 1)
    np.subtract(x, m, out=x)                                # (..., N)
    np.exp(x, out=x)
    return np.add.reduce(x, axis=-1, keepdims=True)         # (..., 1)


def attention_inference(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float | None = None,
                        out: np.ndarray | None = None,
                        block: int = INFERENCE_BLOCK) -> np.ndarray:
    """softmax(q k^T * scale) v, forward only: no mask, no weights returned, no cache.

    q (..., Tq, D), k (..., Tk, D), v (..., Tk, Dv) -> out (..., Tq, Dv); views with any
    strides are fine (``out`` too, e.g. the heads' columns of a (T, E) buffer).
    Queries go in blocks of ``block // (Tk * max(D, Dv))`` rows (see INFERENCE_BLOCK) and each
    block's scores are exponentiated in place; the block's output is divided by the softmax
    sums instead of the scores. Every key is attended: pass each sequence's own keys only.

    Two reductions over the scores' short rows are avoided (numpy's slowest loop here: over 12
    keys, the row maximum, its subtraction and the row sum took 18 times as long as the exp).
    The sums come out of the product with v, from a column of ones beside it: [v | 1]. The row
    maximum is subtracted only when the scores could leave [-EXP_SAFE, EXP_SAFE]: |q_i . k_j| <=
    |q_i| |k_j| (Cauchy-Schwarz) bounds every score, and within that range exp neither overflows
    nor loses precision (softmax(s) = softmax(s - c)).
    """
    d, t_q, t_k, d_v = q.shape[-1], q.shape[-2], k.shape[-2], v.shape[-1]
    scale = (1.0 / np.sqrt(d)) if scale is None else scale
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    if out is None:
        out = np.empty(lead + (t_q, d_v), dtype=q.dtype)                 # (..., Tq, Dv)
    rows = max(1, block // (t_k * max(d, d_v)))
    # Many sequences at once (c, H, ...): a block's scores over all of them, c * H * rows * Tk,
    # would leave the cache (32 texts of 256 tokens: 12 MB); then they go a few sequences at a time.
    per_item = math.prod(lead[1:]) * min(rows, t_q) * t_k                # scores of one lead[0] item
    items = max(1, SCORES_BLOCK // per_item)
    if lead and items < lead[0] and all(a.ndim == len(lead) + 2 and a.shape[0] == lead[0] for a in (q, k, v)):
        for a in range(0, lead[0], items):
            attention_inference(q[a:a + items], k[a:a + items], v[a:a + items], scale, out[a:a + items], block)
        return out
    qs = np.multiply(q, q.dtype.type(scale))                          # (..., Tq, D) scaled once, contiguous
    k_t = np.swapaxes(k, -1, -2)                                      # (..., D, Tk) view
    if t_k >= KT_COPY_MIN_KEYS and not k.flags.c_contiguous:
        k_t = np.ascontiguousarray(k_t)                               # (..., D, Tk): see KT_COPY_MIN_KEYS
    v1 = np.empty(v.shape[:-1] + (d_v + 1,), dtype=q.dtype)           # (..., Tk, Dv + 1): [v | 1]
    v1[..., :d_v] = v
    v1[..., d_v] = 1
    q2 = np.einsum("...d,...d->...", qs, qs)                          # (..., Tq) |q_i|^2
    k2 = np.einsum("...d,...d->...", k, k)                            # (..., Tk) |k_j|^2
    bounded = bool(q2.max(initial=0) * k2.max(initial=0) <= EXP_SAFE * EXP_SAFE)  # False for NaN too
    for i in range(0, t_q, rows):
        j = min(i + rows, t_q)
        scores = np.matmul(qs[..., i:j, :], k_t)                     # (..., rows, Tk)
        if not bounded:
            scores -= np.maximum.reduce(scores, axis=-1, keepdims=True)  # (..., rows, 1) row maxima
        np.exp(scores, out=scores)
        o1 = np.matmul(scores, v1)                                    # (..., rows, Dv + 1): numerators, sums
        np.divide(o1[..., :d_v], o1[..., d_v:], out=out[..., i:j, :])
    return out


def matmul_inference(x: np.ndarray, w: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """x @ w, as np.matmul(x, w, out=out): x (N, K), w (K, O) -> (N, O).

    N <= FEW_ROWS: in tiles of w, TILE_DEPTH rows (inputs) by at most TILE_MACS / (N * TILE_DEPTH)
    columns (outputs), the depth tiles of one output tile summed into ``out``. Otherwise (or for
    arrays that are not 2-d) one np.matmul. Same sums to float rounding, in another order.
    """
    n = x.shape[0]
    if x.ndim != 2 or w.ndim != 2 or n > FEW_ROWS or n * w.shape[0] * w.shape[1] <= TILE_MACS:
        return np.matmul(x, w, out=out)
    k_all, o_all = w.shape
    if out is None:
        out = np.empty((n, o_all), dtype=np.result_type(x, w))           # (N, O)
    depth = min(k_all, TILE_DEPTH)
    cols = max(16, TILE_MACS // (n * depth) // 16 * 16)                  # outputs per tile
    part = np.empty((n, min(cols, o_all)), dtype=out.dtype)              # (N, cols) a depth tile's sum
    for j in range(0, o_all, cols):
        o = out[:, j:j + cols]                                           # (N, cols) view
        np.matmul(x[:, :depth], w[:depth, j:j + cols], out=o)
        for k in range(depth, k_all, depth):
            p = part[:, :o.shape[1]]                                     # (N, cols) view
            np.matmul(x[:, k:k + depth], w[k:k + depth, j:j + cols], out=p)
            o += p
    return out


def layernorm_inference(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float = 1e-5,
                        out: np.ndarray | None = None, residual: np.ndarray | None = None) -> np.ndarray:
    """LayerNorm forward only, no cache: x (..., C) -> (..., C). ``out`` may be ``x`` (in place).
    ``residual`` (x's shape), when given, is added first: LN(x + residual), the post-LN block's
    norm of its residual sum, with the sum in ``out``'s memory.

    Same formula as ``layernorm_forward``, done in blocks of rows that stay in the cache. With numba
    (``ops/kernels.py``) the compiled twin ``ops/fused/inference.py`` runs instead: the sum, the
    row's statistics and the output in one kernel (tests/ops/test_twins.py).
    """
    c = x.shape[-1]
    if residual is not None and residual.shape != x.shape:
        raise ValueError(f"layernorm_inference: residual's shape {residual.shape} must be x's {x.shape}")
    out = np.empty(x.shape, x.dtype) if out is None else out      # C-ordered whatever x's strides
    if (x.dtype in kernels.FLOATS and c > 0 and all(a.flags.c_contiguous and a.dtype == x.dtype and a.shape == x.shape
                                                    for a in (x, out) + (() if residual is None else (residual,)))
            and kernels.twins("layernorm_inference", x.size, x.dtype)):
        from .fused import inference as twin  # the compiled twin (numba, on first use)
        kernels.record("layernorm_inference", "numba")
        return twin.layernorm(x, residual, weight, bias, eps, out)
    kernels.record("layernorm_inference", "numpy")
    x2 = x.reshape(-1, c)                                          # (N, C)
    y2 = out.reshape(-1, c)                                        # (N, C), shares out's memory
    if not np.shares_memory(y2, out):
        raise ValueError("out must be reshapeable to (N, C) without a copy")
    r2 = None if residual is None else residual.reshape(-1, c)     # (N, C)
    inv_c, eps = x.dtype.type(1.0 / c), x.dtype.type(eps)
    step = max(1, _ELEMENTS_PER_BLOCK // c)                        # rows per block
    for i in range(0, x2.shape[0], step):
        xb, yb = x2[i:i + step], y2[i:i + step]                    # (n, C)
        if r2 is not None:
            xb = np.add(xb, r2[i:i + step], out=yb)                # (n, C) the residual sum
        mean = np.add.reduce(xb, axis=1, keepdims=True)            # (n, 1)
        mean *= inv_c
        np.subtract(xb, mean, out=yb)                              # (n, C) centred
        var = np.einsum("ij,ij->i", yb, yb)[:, None]               # (n, 1) sum of squares
        var *= inv_c
        var += eps
        rstd = np.sqrt(var, out=var)
        np.divide(1.0, rstd, out=rstd)                             # (n, 1)
        yb *= rstd
        yb *= weight
        yb += bias
    return out


def gelu_inference_(x: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """Exact (erf) GELU in place, float32, no cache: x (..., C) <- gelu(x + bias) (bias (C,), or
    none); returns x. With numba (``ops/kernels.py``) the compiled twin ``ops/fused/inference.py``
    runs instead: the bias, Phi and the product in one pass (tests/ops/test_twins.py).

    ``gelu_forward``'s float32 formula step for step (Phi = 1/2 + x Pg(u) / Qg(u), u = min(x^2, 32),
    capped at 1; below -2 sqrt(2) Phi from the erfc tail), written over x in cache-sized blocks:
    no (N,) outputs, Phi or mask arrays are made, which for a (rows, d_ff) block of a feed-forward
    layer is most of gelu_forward's cost besides the arithmetic. x must be C-contiguous float32.
    """
    if x.dtype != np.float32 or not x.flags.c_contiguous:
        raise TypeError(f"gelu_inference_ needs a C-contiguous float32 array, got {x.dtype}"
                        f"{'' if x.flags.c_contiguous else ', not C-contiguous'}")
    if bias is not None and (x.ndim == 0 or np.shape(bias) != x.shape[-1:]):
        raise ValueError(f"gelu_inference_: bias must have shape {x.shape[-1:]}, got {np.shape(bias)}")
    if x.size and kernels.twins("gelu_inference_", x.size, x.dtype):
        from .fused import inference as twin  # the compiled twin (numba, on first use)
        kernels.record("gelu_inference_", "numba")
        return twin.gelu_inplace(x, bias)
    kernels.record("gelu_inference_", "numpy")
    if bias is not None:
        x += bias
    flat = x.reshape(-1)                                            # (N,) view
    m = min(flat.size, _BLOCK)
    u, p, q = (np.empty(m, dtype=np.float32) for _ in range(3))    # (m,) scratch
    u_max, one = np.full(m, 32.0, dtype=np.float32), np.ones(m, dtype=np.float32)  # as gelu_forward
    tail = np.empty(m, dtype=bool)                                 # (m,)
    tail_at, tail_x = [], []                                        # the tail's positions and x, all blocks
    with np.errstate(over="ignore"):
        for start in range(0, flat.size, _BLOCK):
            xs = flat[start:start + _BLOCK]                         # (b,) view
            b = xs.size
            ub, pb, qb, tb = u[:b], p[:b], q[:b], tail[:b]
            np.multiply(xs, xs, out=ub)
            np.minimum(ub, u_max[:b], out=ub)
            _horner(pb, ub, _PG32)
            _horner(qb, ub, _QG32)
            pb *= xs
            pb /= qb                                                # Phi - 1/2
            pb += np.float32(0.5)
            np.minimum(pb, one[:b], out=pb)                         # large x: Phi = 1 exactly
            np.less(xs, _GELU_TAIL32, out=tb)                       # large -x: redone below, from x
            if tb.any():
                idx = np.flatnonzero(tb)                            # (n,)
                tail_at.append(idx + start)
                tail_x.append(xs[idx])
            xs *= pb
    if tail_at:                                                     # one tail evaluation for all blocks
        xt = np.concatenate(tail_x)                                 # (n,)
        flat[np.concatenate(tail_at)] = xt * _normal_cdf_tail32(xt)
    return x
