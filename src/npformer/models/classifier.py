"""An encoder-only model with a classification or a tagging head (BERT-style).

    h = Encoder(dropout(E[ids] * sqrt(d) + P))        bidirectional, padding hidden as keys
    classification: logits = head(pool(h))            pool = h[:, 0] ("cls") or the mean over real tokens
    tagging:        logits = head(h)                  one prediction per position

Dimension legend: B batch, T positions, E model width, C classes, H heads.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from ..nn import Embeddings, Encoder, Linear, Module, add_grads, padding_mask
from .blocks import encoder_stack, init_model, sequence_loss, token_embeddings
from .config import BlockConfig, check_choice, check_ids, check_int, check_pad_id, check_rng

IGNORE_LABEL = -100   # a label that the loss skips (torch's default ignore_index)


@dataclass
class EncoderClassifierConfig(BlockConfig):
    vocab_size: int                    # tokens V
    n_classes: int                     # classes C (or tags, for tagging)
    head: str = "classification"       # "classification": one label per sequence; "tagging": one per token
    pool: str = "cls"                  # classification only: "cls" = position 0, "mean" = mean of real tokens
    d_model: int = 128                 # model width E
    n_heads: int = 4                   # attention heads H
    d_ff: int = 512                    # inner width of the FFN
    n_layers: int = 2                  # encoder layers
    max_len: int = 128                 # longest sequence the positional table holds
    dropout: float = 0.1               # embedding sum, sub-layer outputs, attention weights, FFN inner
    positional: str = "learned"        # "learned" or "sinusoidal" (paper 3.5)
    activation: str = "gelu"           # FFN activation: "gelu" or "relu"
    norm_first: bool = False           # False: post-LN (paper, BERT); True: pre-LN
    final_norm: bool | None = None     # LayerNorm after the last layer; None -> same as norm_first
    pad_id: int = 0                    # padding token, hidden as a key and left out of mean pooling; -1: none
    eps: float = 1e-5                  # LayerNorm epsilon

    def __post_init__(self) -> None:
        for name in ("vocab_size", "n_classes", "d_model", "n_heads", "d_ff", "n_layers", "max_len"):
            check_int(name, getattr(self, name))
        check_choice("head", self.head, ("classification", "tagging"))
        check_choice("pool", self.pool, ("cls", "mean"))
        self.check_block_fields()
        check_pad_id(self.pad_id, self.vocab_size, allow_none=True)


class EncoderClassifier(Module):
    """Sequence classifier or token tagger over a Transformer encoder."""

    # the config (init_model) and the children (add_module) made in __init__, declared for the type checker
    config: EncoderClassifierConfig
    embed: Embeddings
    encoder: Encoder
    head: Linear

    def __init__(self, config: EncoderClassifierConfig, rng: np.random.Generator | int = 0,
                 dtype: DTypeLike = np.float32) -> None:
        c, rng = init_model(self, config, EncoderClassifierConfig, rng)
        self.add_module("embed", token_embeddings(c, c.vocab_size, c.max_len, rng, dtype))
        self.add_module("encoder", encoder_stack(c, c.n_layers, rng, dtype))
        self.add_module("head", Linear(c.d_model, c.n_classes, rng=rng, dtype=dtype))

    # -- public boundary ------------------------------------------------------------------------
    def check_inputs(self, ids: ArrayLike, rng: np.random.Generator | None = None) -> np.ndarray:
        """Validate ids (integer, (B, T), inside the vocabulary, T <= max_len) and the rng."""
        c = self.config
        check_rng(self, rng, c.dropout)
        return check_ids(ids, "ids", c.vocab_size, c.max_len, c.positional)

    def forward(self, ids: np.ndarray, rng: np.random.Generator | None = None) -> tuple[np.ndarray, Any]:
        """ids (B, T) int -> (logits (B, C) for classification or (B, T, C) for tagging, cache)."""
        return self._forward(self.check_inputs(ids, rng), rng)

    def loss(self, ids: np.ndarray, labels: np.ndarray, label_smoothing: float = 0.0,
             rng: np.random.Generator | None = None) -> tuple[float, dict[str, np.ndarray]]:
        """Cross-entropy and its gradients. labels: (B,) class ids for classification,
        (B, T) tag ids for tagging, where padded positions and labels of -100 are skipped.
        Returns (loss float, grads)."""
        c = self.config
        ids = self.check_inputs(ids, rng)
        labels = np.asarray(labels)
        if labels.dtype.kind not in "iu":
            raise TypeError(f"labels must hold integer class ids, got dtype {labels.dtype}")
        want = ids.shape[:1] if c.head == "classification" else ids.shape
        if labels.shape != want:
            raise ValueError(f"labels must have shape {want} for {c.head} of ids {ids.shape}, got {labels.shape}")
        real = labels[labels != IGNORE_LABEL]
        if real.size and (real.min() < 0 or real.max() >= c.n_classes):
            raise ValueError(f"labels hold class ids outside [0, {c.n_classes}): min {real.min()}, max {real.max()}")
        if c.head == "tagging" and c.pad_id >= 0:
            labels = np.where(ids == c.pad_id, IGNORE_LABEL, labels)       # (B, T): no loss on padding
        logits, cache = self._forward(ids, rng)
        loss, dlogits = sequence_loss(logits, labels, IGNORE_LABEL, label_smoothing, "labels")
        return loss, self.backward(dlogits, cache)[1]

    # -- passes ---------------------------------------------------------------------------------
    def _forward(self, ids: np.ndarray, rng: np.random.Generator | None) -> tuple[np.ndarray, tuple]:
        c = self.config
        keys = padding_mask(ids, c.pad_id) if c.pad_id >= 0 else None      # (B, 1, 1, T)
        x, c_emb = self.embed.forward(ids, rng)                             # (B, T, E)
        h, c_enc = self.encoder.forward(x, mask=keys, rng=rng)              # (B, T, E)
        weights = None
        if c.head == "tagging":
            pooled = h                                                      # (B, T, E)
        elif c.pool == "cls":
            pooled = h[:, 0]                                                # (B, E)
        else:
            real = (ids != c.pad_id) if c.pad_id >= 0 else np.ones(ids.shape, dtype=bool)  # (B, T)
            count = np.maximum(real.sum(axis=1, keepdims=True), 1)          # (B, 1)
            weights = (real / count).astype(h.dtype)                       # (B, T): 1/n on real tokens
            pooled = np.einsum("bt,bte->be", weights, h)                    # (B, E)
        logits, c_head = self.head.forward(pooled)                          # (B, C) or (B, T, C)
        return logits, (c_emb, c_enc, weights, h.shape, c_head)

    def backward(self, dlogits: np.ndarray, cache: Any) -> tuple[Any, dict[str, np.ndarray]]:
        """dlogits (B, C) or (B, T, C) -> ({"embeddings": d loss / d embedding output (B, T, E)}, grads),
        grads one entry per state_dict() key."""
        c_emb, c_enc, weights, h_shape, c_head = cache
        grads: dict = {}
        dpooled, g_head = self.head.backward(dlogits, c_head)
        add_grads(grads, g_head, "head")
        if self.config.head == "tagging":
            dh = dpooled                                                    # (B, T, E)
        elif weights is None:                                               # cls pooling
            dh = np.zeros(h_shape, dtype=dpooled.dtype)                     # (B, T, E)
            dh[:, 0] = dpooled
        else:                                                               # mean pooling
            dh = weights[:, :, None] * dpooled[:, None, :]                  # (B, T, E)
        dx, g_enc = self.encoder.backward(dh, c_enc)                        # (B, T, E)
        add_grads(grads, g_enc, "encoder")
        _, g_emb = self.embed.backward(dx, c_emb)
        add_grads(grads, g_emb, "embed")
        return {"embeddings": dx}, grads

    def attention_weights(self, cache: Any) -> list[dict]:
        """One {"self": (B, H, T, T)} per layer."""
        return self.encoder.attention_weights(cache[1])
