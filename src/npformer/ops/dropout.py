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

``dropout_add_forward`` is dropout followed by the residual sum. With numba (``ops/kernels.py``) both
run the compiled twin ``ops/fused/dropout.py``: the same draws (it computes each block's starting state,
the words ``block_states`` reads from NumPy, and runs the SFC64 stream itself), so the same mask, with
the output in the same pass (tests/ops/test_twins.py).
"""
from __future__ import annotations

import numpy as np

from . import kernels, parallel


def dropout_forward(x: np.ndarray, p: float, rng: np.random.Generator | None, training: bool = True,
                    out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """Returns (y, cache). Identity when not training or p == 0.
    ``out`` may be ``x`` itself, to drop in place when the caller owns x and needs it no more.
    With numba (``ops/kernels.py``) it runs the compiled twin ``ops/fused/dropout.py``: the same draws,
    mask and output, in one pass."""
    if not training or p == 0.0:
        return x, None
    return _dropout("dropout_forward", x, None, p, rng, out)


def _dropout(op: str, x: np.ndarray, res: np.ndarray | None, p: float, rng: np.random.Generator | None,
             out: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Dropout of x, plus ``res`` when given (the residual sum): (output, mask), on the twin or the reference."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout p must be in [0, 1), got {p}")
    if rng is None:
        raise ValueError("dropout in training needs an explicit rng (np.random.Generator)")
    scale = x.dtype.type(1.0 / (1.0 - p))
    twin = _twin_runs(op, x, res, out)
    kernels.record(op, "numba" if twin else "numpy")
    if parallel.blocked(x, out, one_thread_from=0):          # the mask depends on the blocks: any thread count
        n = x.shape[-1]
        root = int(rng.integers(0, 1 << 63))
        cut = np.uint32(min(round(p * 2.0**32), 2**32 - 1))        # keep where a 32-bit draw is >= cut
        per_block = parallel.rows_per_block(n)
        if twin:
            from .fused import dropout as fused  # the compiled twin (numba, on first use)
            states = fused.block_states(root, -(-(x.size // n) // per_block))       # (K, 4), as block_states
            return fused.dropout_streams(x, res, states, per_block * n, cut, scale, out)
        y = np.empty_like(x) if out is None else out                 # (...)
        mask = np.empty_like(x)                                      # (...)
        x2, y2, mask2 = (a.reshape(-1, n) for a in (x, y, mask))     # (R, N) views
        parallel.map_rows(_forward_block, x2.shape[0], n, x2, cut, scale, root, per_block, y2, mask2)
    else:
        # float32 draws (half the generator's work of float64) for any x
        keep = rng.random(x.shape, dtype=np.float32) >= np.float32(p)           # (...)
        if twin:
            from .fused import dropout as fused
            return fused.dropout_keep(x, res, keep, scale, out)
        mask = keep * scale                                          # (...) 0 or scale, in x's dtype, one pass
        y = np.multiply(x, mask, out=out)
    if res is not None:
        y = parallel.add(y, res, out=y)
    return y, mask


def _twin_runs(op: str, x: np.ndarray, res: np.ndarray | None, out: np.ndarray | None) -> bool:
    """Whether the compiled twin takes this call: contiguous arrays of one shape and a float dtype."""
    arrays = (x,) + (() if res is None else (res,)) + (() if out is None else (out,))
    return (x.dtype in kernels.FLOATS and x.ndim > 0 and x.shape[-1] > 0
            and all(a.shape == x.shape and a.dtype == x.dtype and a.flags.c_contiguous for a in arrays)
            and kernels.twins(op, x.size, x.dtype))


def _forward_block(rows: slice, x2: np.ndarray, cut: np.uint32, scale: np.floating, root: int, per_block: int,
                   y2: np.ndarray, mask2: np.ndarray) -> None:
    """One block's mask from its own stream (block rows.start // per_block), and y = x * mask."""
    m = mask2[rows]                                                  # (r, N)
    np.multiply(_block_draws(rows, root, per_block, m.shape) >= cut, scale, out=m)   # 0 or scale
    np.multiply(x2[rows], m, out=y2[rows])


def _block_stream(root: int, block: int) -> np.random.SFC64:
    return np.random.SFC64(np.random.SeedSequence(root, spawn_key=(block,)))


def _block_draws(rows: slice, root: int, per_block: int, shape: tuple[int, ...]) -> np.ndarray:
    """The 32-bit draws of the block ``rows`` (shape (r, N)), from the block's own stream."""
    bits = _block_stream(root, rows.start // per_block)
    size = shape[0] * shape[1]
    return bits.random_raw((size + 1) // 2).view(np.uint32)[:size].reshape(shape)   # (r, N)


def block_states(root: int, n_blocks: int) -> np.ndarray:
    """(K, 4) uint64: the SFC64 state (a, b, c, counter) each block's stream starts from, as ``_block_draws``
    seeds it: the specification the twin's own ``fused/dropout.py block_states`` is tested against."""
    return np.array([_block_stream(root, k).state["state"]["state"] for k in range(n_blocks)], np.uint64)


def dropout_add_forward(y: np.ndarray, x: np.ndarray, p: float, rng: np.random.Generator | None,
                        training: bool = True, out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """The residual sum after dropout, ``dropout(y) + x`` (y, x of one shape). Returns (sum, dropout's
    cache). ``out`` may be ``y`` itself. The compiled twin makes the mask and the sum in one pass,
    from the same draws."""
    if not training or p == 0.0:
        kernels.record("dropout_add_forward", "numpy")
        return (parallel.add(y, x) if out is None else parallel.add(y, x, out=out)), None
    if x.shape != y.shape:
        raise ValueError(f"dropout_add_forward: x's shape {x.shape} must be y's {y.shape}")
    return _dropout("dropout_add_forward", y, x, p, rng, out)


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
