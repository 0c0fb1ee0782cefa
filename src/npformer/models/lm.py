"""A decoder-only language model (GPT-style): the Transformer's decoder without cross-attention.

    x      = dropout(E[ids] * sqrt(d) + P)    (GPT-2: E[ids] + P, ``scale_embeddings=False``)
    h      = blocks(x)          N self-attention + FFN layers, causal: position t reads 0..t
    logits = h W_out^T,  W_out = E when tied (paper 3.4)

A decoder block with no encoder to read is an encoder layer with a causal mask, so
the blocks are an ``npformer.nn.Encoder`` named ``blocks`` called with ``causal=True``.

Dimension legend: B batch, T positions, E model width, V vocabulary, H heads.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from ..nn import Embeddings, Encoder, Linear, Module, add_grads, padding_mask
from .blocks import (
    encoder_stack,
    init_model,
    lookup_backward,
    output_backward,
    output_forward,
    sequence_loss,
    token_embeddings,
)
from .config import BlockConfig, check_bool, check_ids, check_int, check_pad_id, check_rng


@dataclass
class DecoderLMConfig(BlockConfig):
    vocab_size: int                    # tokens V
    d_model: int = 256                 # model width E
    n_heads: int = 4                   # attention heads H
    d_ff: int = 1024                   # inner width of the FFN
    n_layers: int = 4                  # number of blocks
    max_len: int = 256                 # context length the positional table holds
    dropout: float = 0.1               # embedding sum, sub-layer outputs, attention weights, FFN inner
    positional: str = "learned"        # "learned" (GPT) or "sinusoidal" (paper 3.5)
    activation: str = "gelu"           # FFN activation: "gelu" or "relu"
    norm_first: bool = True            # pre-LN (GPT-2 style); False: post-LN
    final_norm: bool | None = None     # LayerNorm after the last block; None -> same as norm_first
    tie_output: bool = True            # pre-softmax projection = token embedding table
    pad_id: int = -1                   # padding token hidden as a key and ignored by the loss; -1: none
    eps: float = 1e-5                  # LayerNorm epsilon
    scale_embeddings: bool = True      # token vectors times sqrt(E) (paper 3.4); GPT-2 adds them unscaled

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_heads", "d_ff", "n_layers", "max_len"):
            check_int(name, getattr(self, name))
        self.check_block_fields()
        check_bool("tie_output", self.tie_output)
        check_bool("scale_embeddings", self.scale_embeddings)
        check_pad_id(self.pad_id, self.vocab_size, allow_none=True)


class DecoderLM(Module):
    """Causal language model: predicts token t + 1 from tokens 0..t."""

    # the config (init_model) and the children (add_module) made in __init__, declared for the type checker
    config: DecoderLMConfig
    embed: Embeddings
    blocks: Encoder
    generator: Linear                                # untied output only

    def __init__(self, config: DecoderLMConfig, rng: np.random.Generator | int = 0,
                 dtype: DTypeLike = np.float32) -> None:
        c, rng = init_model(self, config, DecoderLMConfig, rng)
        self.add_module("embed", token_embeddings(c, c.vocab_size, c.max_len, rng, dtype,
                                                        scale=c.scale_embeddings))
        self.add_module("blocks", encoder_stack(c, c.n_layers, rng, dtype))
        if not c.tie_output:
            self.add_module("generator", Linear(c.d_model, c.vocab_size, rng=rng, dtype=dtype))

    # -- public boundary ------------------------------------------------------------------------
    def check_inputs(self, ids: ArrayLike, rng: np.random.Generator | None = None, name: str = "ids") -> np.ndarray:
        """Validate ids (integer, (B, T), inside the vocabulary, T <= max_len) and the rng."""
        c = self.config
        check_rng(self, rng, c.dropout)
        return check_ids(ids, name, c.vocab_size, c.max_len, c.positional)

    def forward(self, ids: np.ndarray, rng: np.random.Generator | None = None) -> tuple[np.ndarray, Any]:
        """ids (B, T) int -> (logits (B, T, V), cache)."""
        return self._forward(self.check_inputs(ids, rng), rng)

    def loss(self, ids_in: np.ndarray, ids_out: np.ndarray, label_smoothing: float = 0.0,
             rng: np.random.Generator | None = None) -> tuple[float, dict[str, np.ndarray]]:
        """Next-token cross-entropy (targets equal to pad_id ignored) and its gradients.
        ids_out is ids_in shifted left by one. Returns (loss float, grads)."""
        ids_in = self.check_inputs(ids_in, rng, "ids_in")
        ids_out = check_ids(ids_out, "ids_out", self.config.vocab_size, allow=self.config.pad_id)
        if ids_out.shape != ids_in.shape:
            raise ValueError(f"ids_in and ids_out must have the same shape, got {ids_in.shape} and {ids_out.shape}")
        logits, cache = self._forward(ids_in, rng)                          # (B, T, V)
        loss, dlogits = sequence_loss(logits, ids_out, self.config.pad_id, label_smoothing, "ids_out")
        return loss, self.backward(dlogits, cache)[1]

    # -- passes ---------------------------------------------------------------------------------
    def _forward(self, ids: np.ndarray, rng: np.random.Generator | None) -> tuple[np.ndarray, tuple]:
        keys = padding_mask(ids, self.config.pad_id) if self.config.pad_id >= 0 else None  # (B, 1, 1, T)
        x, c_emb = self.embed.forward(ids, rng)                             # (B, T, E)
        h, c_blocks = self.blocks.forward(x, mask=keys, causal=True, rng=rng)  # (B, T, E)
        logits, c_out = self.project_output(h)                              # (B, T, V)
        return logits, (c_emb, c_blocks, c_out)

    def project_output(self, h: np.ndarray) -> tuple[np.ndarray, Any]:
        """The pre-softmax projection: h (..., E) -> (logits (..., V), cache)."""
        return output_forward(h, self.embed, getattr(self, "generator", None))

    def backward(self, dlogits: np.ndarray, cache: Any) -> tuple[Any, dict[str, np.ndarray]]:
        """dlogits (B, T, V) -> ({"embeddings": d loss / d embedding output (B, T, E)}, grads),
        grads one entry per state_dict() key."""
        c_emb, c_blocks, c_out = cache
        # tied weights: the table's gradient starts as the projection's; the lookup ADDS its rows
        # into that same (V, E) array (dtok=)
        dh, grads = output_backward(dlogits, c_out, "embed", getattr(self, "generator", None))
        dx, g_blocks = self.blocks.backward(dh, c_blocks)                   # (B, T, E)
        add_grads(grads, g_blocks, "blocks")
        lookup_backward(grads, self.embed, "embed", dx, c_emb)
        return {"embeddings": dx}, grads

    def attention_weights(self, cache: Any) -> list[dict]:
        """One {"self": (B, H, T, T)} per block."""
        return self.blocks.attention_weights(cache[1])
