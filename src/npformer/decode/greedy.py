"""Greedy decoding: at each step take the most probable next token.

All decoding here starts from a ``prefix`` (B, P) that is fed first (a BOS column for
translation, the prompt for a language model) and then generates up to ``max_new`` tokens.
A row that has produced ``eos_id`` keeps emitting ``eos_id`` (cut with ``strip_eos``); the loop
stops early once every row has finished.

Dimension legend: B batch, P prefix length, N generated tokens, V vocabulary.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from .steppers import make_stepper, target_vocab_size


def check_decode_args(model, prefix, max_new: int, eos_id):
    prefix = np.asarray(prefix)
    if prefix.ndim != 2 or prefix.shape[1] < 1 or not np.issubdtype(prefix.dtype, np.integer):
        raise ValueError(f"prefix must be a 2-D integer array (B, P) with P >= 1, got {prefix.dtype} {prefix.shape}")
    if int(max_new) < 1:
        raise ValueError(f"max_new must be >= 1, got {max_new}")
    v = target_vocab_size(model)
    if eos_id is not None and not 0 <= int(eos_id) < v:
        raise ValueError(f"eos_id must be in [0, {v}), got {eos_id}")
    # the last generated token is never fed back, so P + max_new - 1 positions are embedded
    n_pos = prefix.shape[1] + int(max_new) - 1
    if n_pos > model.config.max_len:
        raise ValueError(f"prefix length {prefix.shape[1]} + max_new {max_new} needs {n_pos} positions, "
                         f"more than the model's max_len {model.config.max_len}")
    return prefix, int(max_new), n_pos


def decode_loop(model, prefix, max_new: int, choose: Callable[[np.ndarray], np.ndarray], *,
                src_ids=None, eos_id: int | None = None, cache: bool = True) -> np.ndarray:
    """Feed ``prefix``, then repeatedly pick ``choose(logits (B, V)) -> ids (B,)`` and feed it.
    Returns the generated ids (B, N), N <= max_new."""
    prefix, max_new, n_pos = check_decode_args(model, prefix, max_new, eos_id)
    b = prefix.shape[0]
    stepper = make_stepper(model, batch=b, src_ids=src_ids, cache=cache, max_len=n_pos)
    logits = stepper.step(prefix)[:, -1]                                   # (B, V)
    done = np.zeros(b, dtype=bool)                                         # (B,)
    out = []
    for i in range(max_new):
        nxt = np.asarray(choose(logits), dtype=np.int64)                   # (B,)
        if eos_id is not None:
            nxt = np.where(done, eos_id, nxt)
            done |= nxt == eos_id
        out.append(nxt)
        if done.all() or i == max_new - 1:
            break
        logits = stepper.step(nxt[:, None])[:, -1]                         # (B, V)
    return np.stack(out, axis=1)                                           # (B, N)


def greedy(model, prefix, max_new: int, *, src_ids=None, eos_id: int | None = None,
           cache: bool = True) -> np.ndarray:
    """Greedy decoding. prefix (B, P) int, src_ids (B, S) for an encoder-decoder.
    Returns generated ids (B, N); ties go to the lowest id (``argmax``)."""
    return decode_loop(model, prefix, max_new, lambda logits: logits.argmax(axis=-1),
                       src_ids=src_ids, eos_id=eos_id, cache=cache)


def strip_eos(ids: np.ndarray, eos_id: int | None) -> list[np.ndarray]:
    """Cut each row (B, N) before its first ``eos_id``: a list of B 1-D arrays."""
    rows = []
    for row in np.asarray(ids):
        hits: np.ndarray | list[int] = np.flatnonzero(row == eos_id) if eos_id is not None else []
        rows.append(row[:hits[0]] if len(hits) else row)
    return rows
