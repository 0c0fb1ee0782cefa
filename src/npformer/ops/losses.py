"""Cross-entropy over logits, with the meaning of
``torch.nn.functional.cross_entropy(logits, target, ignore_index=, label_smoothing=)``:

    loss_n = (1 - eps) * (-log p[n, y_n]) + eps * mean_c(-log p[n, c])
    loss   = sum over non-ignored n of loss_n / (number of non-ignored n)

Dimension legend: ``N`` rows (tokens), ``C`` classes.
"""
from __future__ import annotations

import numpy as np

from .softmax import log_softmax


def cross_entropy_forward(logits: np.ndarray, targets: np.ndarray,
                          ignore_index: int = -100, label_smoothing: float = 0.0):
    """logits (N, C) float, targets (N,) int -> scalar loss (0-d array). Returns (loss, cache).

    Every row ignored gives a NaN loss, as torch does (0 / 0)."""
    n, c = logits.shape
    valid = targets != ignore_index                                # (N,)
    # a negative target would index from the end without a word: check before computing
    bad = valid & ((targets < 0) | (targets >= c))
    if bad.any():
        raise ValueError(f"targets must lie in [0, {c}) or equal ignore_index={ignore_index}, "
                         f"got {targets[bad][0]} (targets shape {targets.shape}, logits shape {logits.shape})")
    logp = log_softmax(logits)                                     # (N, C)
    safe_t = np.where(valid, targets, 0)                           # (N,)
    nll = -logp[np.arange(n), safe_t]                              # (N,)
    eps = logits.dtype.type(label_smoothing)
    if label_smoothing > 0.0:
        smooth = -logp.mean(axis=-1)                               # (N,)
        per_row = (1 - eps) * nll + eps * smooth                   # (N,)
    else:
        per_row = nll
    count = int(valid.sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        loss = np.where(valid, per_row, 0).sum(dtype=logits.dtype) / logits.dtype.type(count)
    return np.asarray(loss, dtype=logits.dtype), (logp, safe_t, valid, count, eps)


def cross_entropy_backward(dloss, cache) -> np.ndarray:
    """Returns dlogits (N, C): (softmax - smoothed one-hot) / count on the non-ignored rows."""
    logp, safe_t, valid, count, eps = cache
    n, c = logp.shape
    dlogits = np.exp(logp)                                         # (N, C) = softmax
    dlogits[np.arange(n), safe_t] -= (1 - eps)
    if eps > 0:
        dlogits -= eps / logp.dtype.type(c)
    dlogits *= (valid[:, None] * (logp.dtype.type(dloss) / logp.dtype.type(max(count, 1)))).astype(logp.dtype)
    return dlogits
