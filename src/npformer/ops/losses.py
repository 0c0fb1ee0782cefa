"""Cross-entropy over logits, with the meaning of
``torch.nn.functional.cross_entropy(logits, target, ignore_index=, label_smoothing=)``:

    loss_n = (1 - eps) * (-log p[n, y_n]) + eps * mean_c(-log p[n, c])
    loss   = sum over non-ignored n of loss_n / (number of non-ignored n)

Dimension legend: ``N`` rows (tokens), ``C`` classes.
"""
from __future__ import annotations

import numpy as np

from . import workspace


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
    m = logits.max(axis=-1, keepdims=True)                         # (N, 1)
    z = np.subtract(logits, m, out=workspace.empty(logits.shape, logits.dtype))  # (N, C) <= 0: exp cannot overflow
    safe_t = np.where(valid, targets, 0)                           # (N,)
    z_t = z[np.arange(n), safe_t]                                  # (N,)
    z_mean = z.mean(axis=-1) if label_smoothing > 0.0 else None    # (N,)
    e = np.exp(z, out=z)                                           # (N, C) exp(z), in place
    s = e.sum(axis=-1)                                             # (N,)
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
    e, s, safe_t, valid, count, eps = cache
    n, c = e.shape
    f = e.dtype.type
    r = (valid * (f(dloss) / f(max(count, 1)))).astype(e.dtype)    # (N,) each row's weight, 0 if ignored
    dlogits = np.multiply(e, (r / s)[:, None], out=workspace.empty(e.shape, e.dtype))  # (N, C) = softmax * r
    dlogits[np.arange(n), safe_t] -= (1 - eps) * r
    if eps > 0:
        dlogits -= (eps / f(c) * r)[:, None]
    return dlogits
