"""Steppers: the one interface every decoding strategy drives.

    stepper.step(ids (B, t)) -> logits (B, t, V)   feed new tokens, get next-token logits
    stepper.reorder(index (B',))                    keep / repeat batch rows (beam search)

``make_stepper`` picks the cached implementation (``kvcache``) or a recomputing one that runs
the model's full ``forward`` over the whole prefix at every step: the reference the cache must
match, and the baseline of the KV-cache benchmark.

Dimension legend: B batch, S source positions, T target positions so far, t new positions,
E model width, V vocabulary.
"""
from __future__ import annotations

import numpy as np

from ..models import DecoderLM, Transformer
from ..models.config import check_ids
from .kvcache import CachedLM, CachedTransformerDecoder, check_eval


def is_encoder_decoder(model) -> bool:
    """True for ``models.Transformer``, False for ``models.DecoderLM``."""
    if isinstance(model, Transformer):
        return True
    if isinstance(model, DecoderLM):
        return False
    raise TypeError(f"expected an npformer Transformer or DecoderLM, got {type(model).__name__}")


def target_vocab_size(model) -> int:
    cfg = model.config
    return cfg.tgt_vocab_size if is_encoder_decoder(model) else cfg.vocab_size


class RecomputeTransformerDecoder:
    """No cache: each step runs ``model.decode`` over all target ids so far (the encoder memory
    is computed once; its key/value projections are redone every step inside ``decode``)."""

    def __init__(self, model, src_ids: np.ndarray) -> None:
        check_eval(model)
        self.model = model
        src_ids = check_ids(src_ids, "src_ids", model.config.src_vocab_size)
        self.memory, self.src_mask, _ = model.encode(src_ids)              # (B, S, E), (B, 1, 1, S)
        self.ids = np.zeros((src_ids.shape[0], 0), dtype=np.int64)         # (B, 0)

    @property
    def length(self) -> int:
        return self.ids.shape[1]

    def step(self, ids: np.ndarray) -> np.ndarray:
        ids = check_ids(ids, "ids", self.model.config.tgt_vocab_size)
        self.ids = np.concatenate([self.ids, ids], axis=1)                 # (B, T)
        logits, _ = self.model.decode(self.ids, self.memory, self.src_mask)  # (B, T, V)
        return logits[:, -ids.shape[1]:]                                   # (B, t, V)

    def reorder(self, index: np.ndarray) -> None:
        self.ids, self.memory, self.src_mask = self.ids[index], self.memory[index], self.src_mask[index]


class RecomputeLM:
    """No cache: each step runs ``model.forward`` over every token so far."""

    def __init__(self, model, batch: int) -> None:
        check_eval(model)
        self.model = model
        self.ids = np.zeros((batch, 0), dtype=np.int64)                    # (B, 0)

    @property
    def length(self) -> int:
        return self.ids.shape[1]

    def step(self, ids: np.ndarray) -> np.ndarray:
        ids = check_ids(ids, "ids", self.model.config.vocab_size)
        self.ids = np.concatenate([self.ids, ids], axis=1)                 # (B, T)
        logits, _ = self.model.forward(self.ids)                           # (B, T, V)
        return logits[:, -ids.shape[1]:]                                   # (B, t, V)

    def reorder(self, index: np.ndarray) -> None:
        self.ids = self.ids[index]


def make_stepper(model, batch: int | None = None, src_ids: np.ndarray | None = None,
                 cache: bool = True, max_len: int | None = None):
    """A stepper for ``model``: encoder-decoder models need ``src_ids`` (B, S); decoder-only
    models need ``batch``. ``max_len`` bounds the cache (default: the model's max_len)."""
    if is_encoder_decoder(model):
        if src_ids is None:
            raise ValueError("an encoder-decoder model needs src_ids (B, S) to decode")
        if batch is not None and np.asarray(src_ids).shape[0] != batch:
            raise ValueError(f"src_ids has {np.asarray(src_ids).shape[0]} rows but the batch is {batch}")
        return CachedTransformerDecoder(model, src_ids, max_len) if cache else \
            RecomputeTransformerDecoder(model, src_ids)
    if src_ids is not None:
        raise ValueError("a decoder-only model takes no src_ids")
    if batch is None or batch < 1:
        raise ValueError(f"batch must be a positive int for a decoder-only model, got {batch}")
    return CachedLM(model, batch, max_len) if cache else RecomputeLM(model, batch)
