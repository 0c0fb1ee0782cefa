"""The Transformer of "Attention Is All You Need": an encoder-decoder for sequence to sequence.

    memory = Encoder(dropout(E_src[src] * sqrt(d) + PE))                  (paper 3.1, 3.4, 3.5)
    h      = Decoder(dropout(E_tgt[tgt] * sqrt(d) + PE), memory)          causal self-attention
    logits = h W_out^T,  W_out = E_tgt when the weights are tied           (paper 3.4)

The encoder-to-decoder composition (memory into every cross-attention, and in backward the
summed memory gradient back into the encoder) is ``nn.TransformerStack``'s, run through
``self.stack`` over this model's own ``encoder`` and ``decoder``.

Masks come from ``pad_id``: padded source positions are hidden from the encoder's
self-attention and the decoder's cross-attention; the decoder's self-attention is
causal and hides padded target positions as keys.

Dimension legend: B batch, S source positions, T target positions, E model width,
V target vocabulary, H heads.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from ..nn import Decoder, Embeddings, Encoder, Linear, Module, TransformerStack, add_grads, padding_mask
from .blocks import (
    decoder_stack,
    encoder_stack,
    init_model,
    lookup_backward,
    output_backward,
    output_forward,
    sequence_loss,
    token_embeddings,
)
from .config import BlockConfig, check_bool, check_ids, check_int, check_mask, check_pad_id, check_rng, check_same_batch


@dataclass
class TransformerConfig(BlockConfig):
    src_vocab_size: int = 37000        # source vocabulary (the paper's shared BPE vocabulary: 37,000)
    tgt_vocab_size: int = 37000        # target vocabulary
    d_model: int = 512                 # model width E (paper base: 512)
    n_heads: int = 8                   # attention heads H; d_model / n_heads per head
    d_ff: int = 2048                   # inner width of the position-wise FFN
    n_encoder_layers: int = 6          # N on the encoder side
    n_decoder_layers: int = 6          # N on the decoder side
    dropout: float = 0.1               # P_drop: embedding sums, sub-layer outputs (+ attention, FFN inner)
    max_len: int = 512                 # longest sequence the positional table holds
    positional: str = "sinusoidal"     # "sinusoidal" (paper 3.5) or "learned"
    activation: str = "relu"           # FFN activation: "relu" (paper) or "gelu"
    norm_first: bool = False           # False: post-LN (paper); True: pre-LN
    final_norm: bool | None = None     # LayerNorm after each stack; None -> same as norm_first
    share_embeddings: bool = True      # one embedding table for source and target (needs equal vocabs)
    tie_output: bool = True            # pre-softmax projection = target embedding table (paper 3.4)
    pad_id: int = 0                    # padding token: masked in attention, ignored by the loss
    eps: float = 1e-5                  # LayerNorm epsilon

    def __post_init__(self) -> None:
        for name in ("src_vocab_size", "tgt_vocab_size", "d_model", "n_heads", "d_ff", "max_len"):
            check_int(name, getattr(self, name))
        check_int("n_encoder_layers", self.n_encoder_layers, minimum=0)
        check_int("n_decoder_layers", self.n_decoder_layers, minimum=1)
        self.check_block_fields()
        for name in ("share_embeddings", "tie_output"):
            check_bool(name, getattr(self, name))
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError("share_embeddings needs one vocabulary for source and target, got "
                             f"src_vocab_size {self.src_vocab_size} and tgt_vocab_size {self.tgt_vocab_size}")
        check_pad_id(self.pad_id, min(self.src_vocab_size, self.tgt_vocab_size))


class Transformer(Module):
    """Encoder-decoder Transformer. ``Transformer(TransformerConfig())`` is the paper's base model."""

    # the config (init_model) and the children (add_module) made in __init__, declared for the type checker
    config: TransformerConfig
    embed: Embeddings                                 # shared embeddings only
    src_embed: Embeddings                             # unshared only
    tgt_embed: Embeddings                             # unshared only
    encoder: Encoder
    decoder: Decoder
    generator: Linear                                # untied output only

    def __init__(self, config: TransformerConfig | None = None, rng: np.random.Generator | int = 0,
                 dtype: DTypeLike = np.float32) -> None:
        c, rng = init_model(self, TransformerConfig() if config is None else config, TransformerConfig, rng)
        if c.share_embeddings:
            self.add_module("embed", token_embeddings(c, c.src_vocab_size, c.max_len, rng, dtype))
            self._src_name = self._tgt_name = "embed"
        else:
            self.add_module("src_embed", token_embeddings(c, c.src_vocab_size, c.max_len, rng, dtype))
            self.add_module("tgt_embed", token_embeddings(c, c.tgt_vocab_size, c.max_len, rng, dtype))
            self._src_name, self._tgt_name = "src_embed", "tgt_embed"
        self.add_module("encoder", encoder_stack(c, c.n_encoder_layers, rng, dtype))
        self.add_module("decoder", decoder_stack(c, c.n_decoder_layers, rng, dtype))
        if not c.tie_output:
            self.add_module("generator", Linear(c.d_model, c.tgt_vocab_size, rng=rng, dtype=dtype))

    @property
    def src_embedding(self) -> Embeddings:
        return cast(Embeddings, self._children[self._src_name])

    @property
    def tgt_embedding(self) -> Embeddings:
        return cast(Embeddings, self._children[self._tgt_name])

    @property
    def stack(self) -> TransformerStack:
        """The encoder-decoder composition (nn/transformer.py) over this model's own ``encoder`` and
        ``decoder`` (the arrays are shared). Not a child, so the state_dict keys stay ``encoder.*``/``decoder.*``."""
        return TransformerStack.from_stacks(self.encoder, self.decoder)

    # -- public boundary ------------------------------------------------------------------------
    def check_inputs(self, src_ids: ArrayLike | None = None, tgt_ids: ArrayLike | None = None,
                     rng: np.random.Generator | None = None) -> tuple[Any, Any]:  # arrays, None where None was given
        """Validate token ids (integer, (B, L), inside the vocabulary, not longer than max_len),
        equal batch sizes and the rng; returns the ids as arrays."""
        c = self.config
        check_rng(self, rng, c.dropout)
        if src_ids is not None:
            src_ids = check_ids(src_ids, "src_ids", c.src_vocab_size, c.max_len, c.positional)
        if tgt_ids is not None:
            tgt_ids = check_ids(tgt_ids, "tgt_ids", c.tgt_vocab_size, c.max_len, c.positional)
        if src_ids is not None and tgt_ids is not None:
            check_same_batch(src_ids, tgt_ids, "src_ids", "tgt_ids")
        return src_ids, tgt_ids

    def forward(self, src_ids: np.ndarray, tgt_ids: np.ndarray,
                rng: np.random.Generator | None = None) -> tuple[np.ndarray, Any]:
        """src_ids (B, S) int, tgt_ids (B, T) int -> (logits (B, T, V), cache)."""
        src_ids, tgt_ids = self.check_inputs(src_ids, tgt_ids, rng)
        return self._forward(src_ids, tgt_ids, rng)

    def encode(self, src_ids: np.ndarray,
               rng: np.random.Generator | None = None) -> tuple[np.ndarray, np.ndarray, Any]:
        """src_ids (B, S) -> (memory (B, S, E), src_mask (B, 1, 1, S) bool, cache)."""
        src_ids, _ = self.check_inputs(src_ids, None, rng)
        return self._encode(src_ids, rng)

    def decode(self, tgt_ids: np.ndarray, memory: np.ndarray, src_mask: np.ndarray,
               rng: np.random.Generator | None = None) -> tuple[np.ndarray, Any]:
        """tgt_ids (B, T), memory (B, S, E), src_mask bool broadcastable to (B, H, T, S)
        -> (logits (B, T, V), cache)."""
        _, tgt_ids = self.check_inputs(None, tgt_ids, rng)
        if not isinstance(memory, np.ndarray) or memory.dtype != self.dtype:
            got = memory.dtype if isinstance(memory, np.ndarray) else type(memory).__name__
            raise TypeError(f"memory must be a numpy array of the model's dtype {self.dtype}, got {got}")
        b, t = tgt_ids.shape
        if memory.ndim != 3 or memory.shape[0] != b or memory.shape[2] != self.config.d_model:
            raise ValueError(f"memory must have shape (B={b}, S, E={self.config.d_model}), got {memory.shape}")
        src_mask = check_mask(src_mask, "src_mask", (b, self.config.n_heads, t, memory.shape[1]))
        return self._decode(tgt_ids, memory, src_mask, rng)

    def loss(self, src_ids: np.ndarray, tgt_in: np.ndarray, tgt_out: np.ndarray, label_smoothing: float = 0.0,
             rng: np.random.Generator | None = None) -> tuple[float, dict[str, np.ndarray]]:
        """Forward, token cross-entropy (pad_id ignored, optional label smoothing) and backward.

        tgt_in is the decoder input (starts with BOS), tgt_out the same sequence shifted left.
        Returns (loss float, grads dict keyed like state_dict())."""
        src_ids, tgt_in = self.check_inputs(src_ids, tgt_in, rng)
        tgt_out = check_ids(tgt_out, "tgt_out", self.config.tgt_vocab_size)
        if tgt_out.shape != tgt_in.shape:
            raise ValueError(f"tgt_in and tgt_out must have the same shape, got {tgt_in.shape} and {tgt_out.shape}")
        logits, cache = self._forward(src_ids, tgt_in, rng)                  # (B, T, V)
        loss, dlogits = sequence_loss(logits, tgt_out, self.config.pad_id, label_smoothing, "tgt_out")
        return loss, self.backward(dlogits, cache)[1]

    # -- forward pieces -------------------------------------------------------------------------
    def _forward(self, src_ids: np.ndarray, tgt_ids: np.ndarray,
                 rng: np.random.Generator | None) -> tuple[np.ndarray, tuple]:
        memory, src_mask, enc_cache = self._encode(src_ids, rng)              # (B, S, E)
        logits, dec_cache = self._decode(tgt_ids, memory, src_mask, rng)      # (B, T, V)
        return logits, (enc_cache, dec_cache)

    def _encode(self, src_ids: np.ndarray, rng: np.random.Generator | None) -> tuple[np.ndarray, np.ndarray, tuple]:
        src_mask = padding_mask(src_ids, self.config.pad_id)                # (B, 1, 1, S)
        x, c_emb = self.src_embedding.forward(src_ids, rng)                  # (B, S, E)
        memory, c_enc = self.stack.encode(x, mask=src_mask, rng=rng)        # (B, S, E)
        return memory, src_mask, (c_emb, c_enc)

    def _decode(self, tgt_ids: np.ndarray, memory: np.ndarray, src_mask: np.ndarray,
                rng: np.random.Generator | None) -> tuple[np.ndarray, tuple]:
        tgt_keys = padding_mask(tgt_ids, self.config.pad_id)                # (B, 1, 1, T); causal added inside
        y, c_emb = self.tgt_embedding.forward(tgt_ids, rng)                  # (B, T, E)
        h, c_dec = self.stack.decode(y, memory, tgt_mask=tgt_keys, memory_mask=src_mask,
                                     causal=True, rng=rng)                  # (B, T, E)
        logits, c_out = self.project_output(h)                              # (B, T, V)
        return logits, (c_emb, c_dec, c_out)

    def project_output(self, h: np.ndarray) -> tuple[np.ndarray, Any]:
        """The pre-softmax projection: h (..., E) -> (logits (..., V), cache)."""
        return output_forward(h, self.tgt_embedding, getattr(self, "generator", None))

    # -- backward -------------------------------------------------------------------------------
    def backward(self, dlogits: np.ndarray, cache: Any) -> tuple[Any, dict[str, np.ndarray]]:
        """dlogits (B, T, V) -> (dinputs, grads), grads one entry per state_dict() key with the same
        shape. The ids have no gradient; dinputs holds the gradients of the loss with respect to the
        embedding layers' outputs, ``src_embeddings`` (B, S, E) and ``tgt_embeddings`` (B, T, E), and
        to the encoder output ``memory`` (B, S, E)."""
        (c_src_emb, c_enc), (c_tgt_emb, c_dec, c_out) = cache
        # tied weights (paper 3.4): the table's gradient starts as the projection's; each
        # embedding lookup then ADDS its rows into that same (V, E) array (dtok=)
        dh, grads = output_backward(dlogits, c_out, self._tgt_name, getattr(self, "generator", None))
        d, g_stack = self.stack.backward(dh, (c_enc, c_dec))             # decoder, then memory -> encoder
        add_grads(grads, g_stack, "")
        lookup_backward(grads, self.tgt_embedding, self._tgt_name, d["tgt"], c_tgt_emb)   # projection's + target's
        lookup_backward(grads, self.src_embedding, self._src_name, d["src"], c_src_emb)   # shared table: + source's
        return {"src_embeddings": d["src"], "tgt_embeddings": d["tgt"], "memory": d["memory"]}, grads

    # -- inspection -----------------------------------------------------------------------------
    def attention_weights(self, cache: Any) -> dict:
        """{"encoder": [{"self": (B, H, S, S)}] per layer,
            "decoder": [{"self": (B, H, T, T), "cross": (B, H, T, S)}] per layer}."""
        (_, c_enc), (_, c_dec, _) = cache
        return self.stack.attention_weights((c_enc, c_dec))
