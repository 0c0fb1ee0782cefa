"""Inverted dropout: keep each element with probability 1 - p and scale it by 1 / (1 - p),
so the expected value is unchanged and inference needs no rescaling.

Large arrays (``ops/parallel.py``) draw their mask in row blocks: one draw from
``rng`` gives a root seed, and block i draws from its own SFC64 generator, seeded by the root seed
and i through ``np.random.SeedSequence`` (independent streams by its construction). Each element
keeps when a raw 32-bit draw u is >= round(p 2^32): probability 1 - p to within 2^-33, from half
the generator's work of a float32 uniform (two elements per 64-bit output, no conversion). The mask
then depends on the seed and the array's shape, never on the thread count; it is not the mask the
one stream of ``rng`` would give (tests/ops/test_parallel.py pins the twin: values, keep rate,
independence of the blocks, any thread count).

``dropout_add_forward`` is dropout followed by the residual sum; with numba (``ops/kernels.py``) it
runs the compiled twin ``ops/fused/dropout.py`` on the same draws (tests/ops/test_twins.py).
"""
from __future__ import annotations

import numpy as np

from . import kernels, parallel


def dropout_forward(x: np.ndarray, p: float, rng: np.random.Generator | None, training: bool = True,
                    out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """Returns (y, cache). Identity when not training or p == 0.
    ``out`` may be ``x`` itself, to drop in place when the caller owns x and needs it no more."""
    if not training or p == 0.0:
        return x, None
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout p must be in [0, 1), got {p}")
    if rng is None:
        raise ValueError("dropout in training needs an explicit rng (np.random.Generator)")
    scale = x.dtype.type(1.0 / (1.0 - p))
    if parallel.blocked(x, out, one_thread_from=0):          # the mask depends on the blocks: any thread count
        y = np.empty_like(x) if out is None else out                 # (...)
        mask = np.empty_like(x)                                      # (...)
        n = x.shape[-1]
        root = int(rng.integers(0, 1 << 63))
        cut = np.uint32(min(round(p * 2.0**32), 2**32 - 1))        # keep where a 32-bit draw is >= cut
        x2, y2, mask2 = (a.reshape(-1, n) for a in (x, y, mask))     # (R, N) views
        parallel.map_rows(_forward_block, x2.shape[0], n, x2, cut, scale, root, parallel.rows_per_block(n), y2, mask2)
        return y, mask
    # float32 draws (half the generator's work of float64) for any x; keep * scale makes the
    # (0 or scale) mask in x's dtype in one pass
    mask = (rng.random(x.shape, dtype=np.float32) >= np.float32(p)) * scale  # (...)
    return np.multiply(x, mask, out=out), mask


def _forward_block(rows: slice, x2: np.ndarray, cut: np.uint32, scale: np.floating, root: int, per_block: int,
                   y2: np.ndarray, mask2: np.ndarray) -> None:
    """One block's mask from its own stream (block rows.start // per_block), and y = x * mask."""
    m = mask2[rows]                                                  # (r, N)
    np.multiply(_block_draws(rows, root, per_block, m.shape) >= cut, scale, out=m)   # 0 or scale
    np.multiply(x2[rows], m, out=y2[rows])


def _block_draws(rows: slice, root: int, per_block: int, shape: tuple[int, ...]) -> np.ndarray:
    """The 32-bit draws of the block ``rows`` (shape (r, N)), from the block's own stream."""
    bits = np.random.SFC64(np.random.SeedSequence(root, spawn_key=(rows.start // per_block,)))
    size = shape[0] * shape[1]
    return bits.random_raw((size + 1) // 2).view(np.uint32)[:size].reshape(shape)   # (r, N)


def keep_draws(x: np.ndarray, p: float, rng: np.random.Generator, out: np.ndarray | None = None) -> np.ndarray:
    """The keep mask (bool, x's shape) that ``dropout_forward(x, p, rng, out=out)`` draws, from the same
    draws of ``rng``: the compiled twin makes its mask from it."""
    if parallel.blocked(x, out, one_thread_from=0):
        root = int(rng.integers(0, 1 << 63))
        cut = np.uint32(min(round(p * 2.0**32), 2**32 - 1))
        n = x.shape[-1]
        keep = np.empty(x.shape, dtype=bool)                                 # (...)
        parallel.map_rows(_keep_block, x.size // n, n, cut, root, parallel.rows_per_block(n), keep.reshape(-1, n))
        return keep
    return rng.random(x.shape, dtype=np.float32) >= np.float32(p)          # (...)


def _keep_block(rows: slice, cut: np.uint32, root: int, per_block: int, keep2: np.ndarray) -> None:
    k = keep2[rows]                                                  # (r, N)
    np.greater_equal(_block_draws(rows, root, per_block, k.shape), cut, out=k)


def dropout_add_forward(y: np.ndarray, x: np.ndarray, p: float, rng: np.random.Generator | None,
                        training: bool = True, out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """The residual sum after dropout, ``dropout(y) + x`` (y, x of one shape). Returns (sum, dropout's
    cache). ``out`` may be ``y`` itself. The compiled twin makes the mask and the sum in one pass,
    from the same draws."""
    if (training and p != 0.0 and rng is not None and 0.0 < p < 1.0 and y.dtype in kernels.FLOATS
            and x.shape == y.shape and x.dtype == y.dtype and y.ndim > 0 and y.shape[-1] > 0
            and all(a.flags.c_contiguous for a in (y, x) + (() if out is None else (out,)))
            and (out is None or (out.shape == y.shape and out.dtype == y.dtype))
            and kernels.twins("dropout_add_forward", y.size)):
        from .fused import dropout as twin  # the compiled twin (numba, on first use)
        kernels.record("dropout_add_forward", "numba")
        keep = keep_draws(y, p, rng, out)                                   # (...)
        return twin.dropout_add_forward(y, x, keep, y.dtype.type(1.0 / (1.0 - p)), out)
    kernels.record("dropout_add_forward", "numpy")
    d, mask = dropout_forward(y, p, rng, training, out=out)                 # (...)
    if d is y and out is None:                                              # no dropout: a fresh sum
        return parallel.add(y, x), mask
    return parallel.add(d, x, out=d), mask


def dropout_backward(dy: np.ndarray, cache: np.ndarray | None, out: np.ndarray | None = None) -> np.ndarray:
    """dx = dy * mask; ``out`` may be ``dy`` itself (in place)."""
    mask = cache
    if mask is None:
        return dy
    if parallel.blocked(dy, mask, out):
        dx = np.empty_like(dy) if out is None else out               # (...)
        n = dy.shape[-1]
        dy2, mask2, dx2 = (a.reshape(-1, n) for a in (dy, mask, dx))  # (R, N) views
        parallel.map_rows(_backward_block, dy2.shape[0], n, dy2, mask2, dx2)
        return dx
    return np.multiply(dy, mask, out=out)


def _backward_block(rows: slice, dy2: np.ndarray, mask2: np.ndarray, dx2: np.ndarray) -> None:
    np.multiply(dy2[rows], mask2[rows], out=dx2[rows])
