"""Cross-entropy over logits, with the meaning of
``torch.nn.functional.cross_entropy(logits, target, ignore_index=, label_smoothing=)``:

    loss_n = (1 - eps) * (-log p[n, y_n]) + eps * mean_c(-log p[n, c])
    loss   = sum over non-ignored n of loss_n / (number of non-ignored n)

Dimension legend: ``N`` rows (tokens), ``C`` classes.
Large logits run the same row-wise code on row blocks (``ops/parallel.py``;
pinned by tests/ops/test_parallel.py): the same bits for every row.
With numba (``ops/kernels.py``) both run the compiled twin ``ops/fused/losses.py``, whose cache holds
the logits and two numbers a row instead of the (N, C) exponentials (tests/ops/test_twins.py).
"""
from __future__ import annotations

import numpy as np

from . import kernels, parallel, workspace


def cross_entropy_forward(logits: np.ndarray, targets: np.ndarray,
                          ignore_index: int = -100, label_smoothing: float = 0.0) -> tuple[np.ndarray, tuple]:
    """logits (N, C) float, targets (N,) int -> scalar loss (0-d array). Returns (loss, cache).

    Every row ignored gives a NaN loss, as torch does (0 / 0)."""
    n, c = logits.shape
    valid = targets != ignore_index                                # (N,)
    # a negative target would index from the end without a word: check before computing
    bad = valid & ((targets < 0) | (targets >= c))
    if bad.any():
        raise ValueError(f"targets must lie in [0, {c}) or equal ignore_index={ignore_index}, "
                         f"got {targets[bad][0]} (targets shape {targets.shape}, logits shape {logits.shape})")
    # one (N, C) array in all: the shifted logits z = logits - max, then exp(z) in place. With
    # s = sum_c exp(z), -log p[n, c] = log s - z[n, c], so the loss needs only z at the targets
    # (and the row mean of z for smoothing), taken before the exp overwrites z.
    safe_t = np.where(valid, targets, 0)                           # (N,)
    if (logits.dtype in kernels.FLOATS and logits.flags.c_contiguous
            and kernels.twins("cross_entropy_forward", logits.size, logits.dtype)):
        from .fused import losses as twin  # the compiled twin (numba, on first use)
        kernels.record("cross_entropy_forward", "numba")
        return twin.cross_entropy_forward(logits, safe_t.astype(np.intp, copy=False), valid, label_smoothing)
    kernels.record("cross_entropy_forward", "numpy")
    e = workspace.empty(logits.shape, logits.dtype)                # (N, C)
    z_t, s = np.empty(n, logits.dtype), np.empty(n, logits.dtype)  # (N,) each
    z_mean = np.empty(n, logits.dtype) if label_smoothing > 0.0 else None   # (N,)
    if parallel.blocked(logits, one_thread_from=parallel.ONE_THREAD_MIN):   # large: row blocks
        parallel.map_rows(_exp_shifted, n, c, logits, safe_t, e, z_t, z_mean, s)
    else:
        _exp_shifted(slice(0, n), logits, safe_t, e, z_t, z_mean, s)
    log_s = np.log(s)                                              # (N,) log-sum-exp minus the max
    nll = log_s - z_t                                              # (N,) -log p[n, y_n]
    eps = logits.dtype.type(label_smoothing)
    if label_smoothing > 0.0:
        smooth = log_s - z_mean                                    # (N,) mean_c -log p[n, c]
        per_row = (1 - eps) * nll + eps * smooth                   # (N,)
    else:
        per_row = nll
    count = int(valid.sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        loss = np.where(valid, per_row, 0).sum(dtype=logits.dtype) / logits.dtype.type(count)
    return np.asarray(loss, dtype=logits.dtype), (e, s, safe_t, valid, count, eps)


def cross_entropy_backward(dloss: np.ndarray | float, cache: tuple) -> np.ndarray:
    """Returns dlogits (N, C): (softmax - smoothed one-hot) / count on the non-ignored rows."""
    if isinstance(cache, kernels.TwinCache):                       # the forward ran the twin
        from .fused import losses as twin
        kernels.record("cross_entropy_backward", "numba")
        return twin.cross_entropy_backward(float(dloss), cache)
    kernels.record("cross_entropy_backward", "numpy")
    e, s, safe_t, valid, count, eps = cache
    n, c = e.shape
    f = e.dtype.type
    r = (valid * (f(dloss) / f(max(count, 1)))).astype(e.dtype)    # (N,) each row's weight, 0 if ignored
    dlogits = workspace.empty(e.shape, e.dtype)                    # (N, C)
    shift = eps / f(c) * r if eps > 0 else None                    # (N,) the smoothing's share of each row
    if parallel.blocked(e):
        parallel.map_rows(_softmax_rows, n, c, e, r / s, shift, dlogits)
    else:
        _softmax_rows(slice(0, n), e, r / s, shift, dlogits)
    dlogits[np.arange(n), safe_t] -= (1 - eps) * r
    return dlogits


def _exp_shifted(rows: slice, logits: np.ndarray, safe_t: np.ndarray, e: np.ndarray, z_t: np.ndarray,
                 z_mean: np.ndarray | None, s: np.ndarray) -> None:
    """For the rows ``rows``: z = logits - row max, z at the targets, z's row mean (when asked for),
    then e = exp(z) in place and its row sums s."""
    x = logits[rows]                                               # (r, C)
    m = x.max(axis=-1, keepdims=True)                              # (r, 1)
    z = np.subtract(x, m, out=e[rows])                             # (r, C) <= 0: exp cannot overflow
    z_t[rows] = z[np.arange(z.shape[0]), safe_t[rows]]             # (r,)
    if z_mean is not None:
        z.mean(axis=-1, out=z_mean[rows])                          # (r,)
    np.exp(z, out=z)                                               # (r, C) exp(z), in place
    e[rows].sum(axis=-1, out=s[rows])                              # (r,)


def _softmax_rows(rows: slice, e: np.ndarray, w: np.ndarray, shift: np.ndarray | None, out: np.ndarray) -> None:
    """out = e * w (each row's softmax times its weight), minus each row's smoothing share."""
    d = np.multiply(e[rows], w[rows, None], out=out[rows])         # (r, C)
    if shift is not None:
        d -= shift[rows, None]
