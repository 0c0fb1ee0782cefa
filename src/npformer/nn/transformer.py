"""The encoder-decoder stack without embeddings: npformer's ``torch.nn.Transformer``.

    memory = Encoder(src);  out = Decoder(tgt, memory)

Children ``encoder`` and ``decoder`` give torch's state-dict keys
(``encoder.layers.0.self_attn.in_proj_weight``, ``decoder.norm.weight``), apart from the FFN,
which lives under ``ffn.`` (``encoder.layers.0.ffn.linear1.weight``; torch: ``linear1``).
As in torch, both stacks end in a LayerNorm by default (``final_norm=True``).

Dimension legend: B batch, S source positions, T target positions, E model width.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from .module import Module, add_grads
from .stacks import Decoder, Encoder


class TransformerStack(Module):
    # children made by add_module in __init__, declared for readers and the type checker
    encoder: Encoder
    decoder: Decoder

    def __init__(self, d_model: int = 512, n_heads: int = 8, n_encoder_layers: int = 6,
                 n_decoder_layers: int = 6, d_ff: int = 2048, dropout: float = 0.1,
                 activation: str = "relu", norm_first: bool = False, final_norm: bool = True,
                 eps: float = 1e-5, rng: np.random.Generator | None = None, dtype: DTypeLike = np.float32) -> None:
        super().__init__()
        rng = rng if rng is not None else np.random.default_rng(0)
        self.add_module("encoder", Encoder(n_encoder_layers, d_model, n_heads, d_ff, dropout, activation,
                                           norm_first, final_norm, eps, rng, dtype))
        self.add_module("decoder", Decoder(n_decoder_layers, d_model, n_heads, d_ff, dropout, activation,
                                           norm_first, final_norm, eps, rng, dtype))

    @classmethod
    def from_stacks(cls, encoder: Encoder, decoder: Decoder) -> "TransformerStack":
        """Wrap an existing encoder and decoder (their arrays are shared, not copied)."""
        if not isinstance(encoder, Encoder) or not isinstance(decoder, Decoder):
            raise TypeError(f"from_stacks needs an npformer Encoder and Decoder, got "
                            f"{type(encoder).__name__} and {type(decoder).__name__}")
        stack = cls.__new__(cls)
        Module.__init__(stack)
        stack.add_module("encoder", encoder)
        stack.add_module("decoder", decoder)
        return stack

    # -- op pair (npformer's conventions: bool masks True = may attend) ------------------------
    # The one encoder-to-decoder composition: models.Transformer runs encode/decode/backward too.
    def encode(self, src: np.ndarray, mask: np.ndarray | None = None, bias: np.ndarray | None = None,
               rng: np.random.Generator | None = None) -> tuple[np.ndarray, Any]:
        """src (B, S, E) -> (memory (B, S, E), cache). mask/bias: encoder self-attention."""
        return self.encoder.forward(src, mask=mask, bias=bias, rng=rng)

    def decode(self, tgt: np.ndarray, memory: np.ndarray, tgt_mask: np.ndarray | None = None,
               memory_mask: np.ndarray | None = None, tgt_bias: np.ndarray | None = None,
               memory_bias: np.ndarray | None = None, causal: bool = True,
               rng: np.random.Generator | None = None) -> tuple[np.ndarray, Any]:
        """tgt (B, T, E), memory (B, S, E) -> (out (B, T, E), cache)."""
        return self.decoder.forward(tgt, memory, tgt_mask, memory_mask, tgt_bias, memory_bias, causal, rng)

    def forward(self, src: np.ndarray, tgt: np.ndarray, src_mask: np.ndarray | None = None,
                tgt_mask: np.ndarray | None = None, memory_mask: np.ndarray | None = None,
                src_bias: np.ndarray | None = None, tgt_bias: np.ndarray | None = None,
                memory_bias: np.ndarray | None = None, causal: bool = True,
                rng: np.random.Generator | None = None) -> tuple[np.ndarray, Any]:
        """src (B, S, E), tgt (B, T, E) -> (out (B, T, E), cache).

        src_mask: encoder self-attention (e.g. source padding, (B, 1, 1, S)); memory_mask:
        cross-attention (usually the same source padding); tgt_mask: decoder self-attention.
        ``causal`` makes the decoder's self-attention causal (npformer's default, unlike torch).
        """
        memory, c_enc = self.encode(src, src_mask, src_bias, rng)                          # (B, S, E)
        out, c_dec = self.decode(tgt, memory, tgt_mask, memory_mask, tgt_bias, memory_bias, causal, rng)  # (B, T, E)
        return out, (c_enc, c_dec)

    def backward(self, dout: np.ndarray, cache: Any) -> tuple[Any, dict[str, np.ndarray]]:
        """Returns ({"src", "tgt", "memory"}, grads): the gradients of the two inputs and of the
        encoder's output, which sums what every cross-attention sends back into the encoder."""
        c_enc, c_dec = cache
        grads: dict = {}
        (dtgt, dmemory), g = self.decoder.backward(dout, c_dec)                            # (B, T, E), (B, S, E)
        add_grads(grads, g, "decoder")
        dsrc, g = self.encoder.backward(dmemory, c_enc)                                     # (B, S, E)
        add_grads(grads, g, "encoder")
        return {"src": dsrc, "tgt": dtgt, "memory": dmemory}, grads

    def attention_weights(self, cache: Any) -> dict:
        """{'encoder': [{'self'} per layer], 'decoder': [{'self', 'cross'} per layer]}."""
        c_enc, c_dec = cache
        return {"encoder": Encoder.attention_weights(c_enc), "decoder": Decoder.attention_weights(c_dec)}
