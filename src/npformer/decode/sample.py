"""Sampling with temperature and top-k, from an explicit ``np.random.Generator``.

    p = softmax(logits / temperature), restricted to the k most probable tokens.

temperature -> 0 approaches greedy decoding; ``temperature=0`` is exactly greedy (argmax).
Dimension legend: B batch, V vocabulary.
"""
from __future__ import annotations

import numpy as np

from .greedy import decode_loop


def _check(temperature: float, top_k: int | None, vocab_size: int | None = None) -> None:
    if not np.isfinite(temperature) or temperature < 0:
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature}")
    if top_k is not None and (int(top_k) != top_k or top_k < 1):
        raise ValueError(f"top_k must be a positive int or None, got {top_k}")
    if top_k is not None and vocab_size is not None and top_k > vocab_size:
        raise ValueError(f"top_k ({top_k}) is larger than the vocabulary ({vocab_size})")


def sample_next(logits: np.ndarray, rng: np.random.Generator, temperature: float = 1.0,
                top_k: int | None = None) -> np.ndarray:
    """One token per row of logits (B, V). Returns ids (B,)."""
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be an np.random.Generator, got {type(rng).__name__}")
    logits = np.asarray(logits)
    _check(temperature, top_k, logits.shape[-1])
    if temperature == 0:
        return logits.argmax(axis=-1)
    # float64 so that tiny temperatures and the cumulative sum below do not lose tokens
    z = logits.astype(np.float64) / temperature                            # (B, V)
    if top_k is not None and top_k < z.shape[-1]:
        # exactly k survivors per row, even when several logits tie with the k-th largest
        drop = np.argpartition(-z, top_k - 1, axis=-1)[:, top_k:]          # (B, V - k)
        np.put_along_axis(z, drop, -np.inf, axis=-1)
    z -= z.max(axis=-1, keepdims=True)
    p = np.exp(z)                                                          # (B, V), unnormalised
    cdf = np.cumsum(p, axis=-1)                                            # (B, V)
    r = rng.random(len(p)) * cdf[:, -1]                                    # (B,)
    # inverse CDF: the first index whose cumulative mass exceeds r; a zero-probability token
    # never is (its cdf equals its predecessor's), and r rounding up to the total falls back
    # to the last token that has probability
    idx = (cdf <= r[:, None]).sum(axis=-1)                                 # (B,)
    last = p.shape[-1] - 1 - np.argmax(p[:, ::-1] > 0, axis=-1)            # (B,)
    return np.minimum(idx, last)


def sample(model, prefix, max_new: int, rng: np.random.Generator, *, temperature: float = 1.0,
           top_k: int | None = None, src_ids=None, eos_id: int | None = None,
           cache: bool = True) -> np.ndarray:
    """Sample up to ``max_new`` tokens after ``prefix`` (B, P). Returns ids (B, N)."""
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be an np.random.Generator, got {type(rng).__name__}")
    _check(temperature, top_k)
    return decode_loop(model, prefix, max_new,
                       lambda logits: sample_next(logits, rng, temperature, top_k),
                       src_ids=src_ids, eos_id=eos_id, cache=cache)
