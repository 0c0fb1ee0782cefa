"""Torch-style calls: npformer modules called like torch's, on NumPy arrays.

    layer = torch_style(EncoderLayer(...))      # or what from_torch returns
    y = layer(src, src_mask=..., src_key_padding_mask=...)       # torch's names and mask conventions
    layer.module                                # the npformer module itself (forward/backward)

A ``TorchCall`` holds the module and does only the boundary work: check the inputs, turn
torch's masks into npformer's (``conventions.attention_masks``), add and drop the batch
dimension of unbatched inputs, then run the module's ``forward`` and return what torch
returns. Everything else (``forward``, ``backward``, ``state_dict``, ``params``, ``dtype``,
``training``, children) is the module's, reached through the wrapper.

Dimension legend: B batch, S source positions, T target positions, E model width, H heads.
"""
from __future__ import annotations

import numpy as np

from ..nn import Decoder, DecoderLayer, Encoder, EncoderLayer, Module, MultiHeadAttention, split_heads
from ..nn.transformer import TransformerStack
from ..ops import linear_forward
from .conventions import attention_masks, check_input, check_same_batching


def generate_square_subsequent_mask(size: int, dtype=np.float32) -> np.ndarray:
    """torch's float causal mask (size, size): 0 where j <= i, -inf above the diagonal."""
    return np.where(np.tri(size, dtype=bool), 0.0, -np.inf).astype(dtype)  # (T, T)


class TorchCall:
    """An npformer module (``.module``) called with torch's arguments; the base of the six calls."""

    wraps: type = Module

    def __init__(self, module: Module) -> None:
        if not isinstance(module, self.wraps):
            raise TypeError(f"{type(self).__name__} wraps an npformer {self.wraps.__name__}, "
                            f"got {type(module).__module__}.{type(module).__name__}")
        object.__setattr__(self, "module", module)

    def __getattr__(self, name: str):
        if name == "module" or name.startswith("__"):              # not set yet (copy, pickle)
            raise AttributeError(name)
        return getattr(self.module, name)

    def __setattr__(self, name: str, value) -> None:
        if name == "module":
            raise AttributeError("a torch-style call's module is fixed; wrap the other module with torch_style")
        setattr(self.module, name, value)                          # e.g. ``call.dropout = 0.0``

    def train(self, mode: bool = True) -> "TorchCall":
        self.module.train(mode)
        return self

    def eval(self) -> "TorchCall":
        return self.train(False)

    def astype(self, dtype) -> "TorchCall":
        self.module.astype(dtype)
        return self

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.module!r})"

    def _input(self, x, name: str) -> np.ndarray:
        """A torch-style input checked against the module: (B, T, E) or unbatched (T, E)."""
        return check_input(x, name, self.module.dtype, _width_heads(self.module)[0])


def _width_heads(module) -> tuple[int, int]:
    """(d_model, n_heads) of an attention, a layer or a stack (read from its first layer)."""
    if isinstance(module, TransformerStack):
        module = module.decoder
    if isinstance(module, (Encoder, Decoder)):
        if len(module.layers) == 0:
            raise ValueError(f"{type(module).__name__} has no layers to call")
        module = module.layers[0]
    attn = module if isinstance(module, MultiHeadAttention) else module.self_attn
    return attn.d_model, attn.n_heads


def _batch(*xs: np.ndarray) -> tuple[bool, list[np.ndarray]]:
    """(batched, inputs as (B, T, E)): unbatched (T, E) inputs become a batch of one."""
    batched = xs[0].ndim == 3
    return batched, [x if batched else x[None] for x in xs]


def _masks(prefix: str, attn_mask, key_padding_mask, is_causal, n_heads: int, x_q, x_k, batched: bool,
           names: tuple[str, str]) -> dict:
    """torch's masks of one attention -> {prefix + "mask", prefix + "bias"} for the module's forward.
    x_q (B, Tq, E), x_k (B, Tk, E) give the shapes."""
    mask, bias = attention_masks(attn_mask, key_padding_mask, batch=x_q.shape[0], n_heads=n_heads,
                                 t_q=x_q.shape[1], t_k=x_k.shape[1], dtype=x_q.dtype, batched=batched,
                                 is_causal=bool(is_causal), names=names)
    return {f"{prefix}mask": mask, f"{prefix}bias": bias}


def _attend_qkv(mha: MultiHeadAttention, x_q, x_k, x_v, mask, bias, rng, need_weights):
    """Forward only, for keys and values from different inputs: project them apart, then
    attend through ``forward``'s precomputed-kv path. Returns (out, cache)."""
    e, h = mha.d_model, mha.n_heads
    w, b = mha.params["in_proj_weight"], mha.params["in_proj_bias"]
    k = split_heads(linear_forward(x_k, w[e:2 * e], b[e:2 * e])[0], h)       # (B, H, Tk, D)
    v = split_heads(linear_forward(x_v, w[2 * e:], b[2 * e:])[0], h)         # (B, H, Tk, D)
    return mha.forward(x_q, mask=mask, bias=bias, rng=rng, kv=(k, v), need_weights=need_weights)


class MultiheadAttentionCall(TorchCall):
    """``torch.nn.MultiheadAttention(batch_first=True)``."""

    wraps = MultiHeadAttention

    def __call__(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                 average_attn_weights=True, is_causal=False, *, rng=None):
        """query (B, Tq, E) or unbatched (Tq, E); key, value (B, Tk, E) or (Tk, E).
        Masks in torch's conventions (bool True = NOT allowed, float = added to the scores):
        attn_mask (Tq, Tk) or (B*H, Tq, Tk); key_padding_mask (B, Tk).
        Returns (out (B, Tq, E), weights): weights (B, Tq, Tk) averaged over heads,
        (B, H, Tq, Tk) with ``average_attn_weights=False``, None with ``need_weights=False``.
        Unlike torch, a query whose keys are all masked gets zeros, not NaN.
        """
        mha = self.module
        q, k, v = (self._input(a, n) for a, n in ((query, "query"), (key, "key"), (value, "value")))
        check_same_batching(k, "key", q, "query")
        if k.shape != v.shape:
            raise ValueError(f"key and value must have the same shape, got {k.shape} and {v.shape}")
        batched, (q, k, v) = _batch(q, k, v)                       # (B, T, E)
        kw = _masks("", attn_mask, key_padding_mask, is_causal, mha.n_heads, q, k, batched,
                    ("attn_mask", "key_padding_mask"))
        need = bool(need_weights)                                  # False: the tiled kernel may run
        if query is key and key is value:                          # self-attention: one projection
            out, c = mha.forward(q, rng=rng, need_weights=need, **kw)
        elif key is value:                                         # cross-attention
            out, c = mha.forward(q, k, rng=rng, need_weights=need, **kw)
        else:                                                      # distinct key and value tensors
            out, c = _attend_qkv(mha, q, k, v, kw["mask"], kw["bias"], rng, need)
        if not batched:
            out = out[0]                                           # (Tq, E)
        if not need:
            return out, None
        weights = MultiHeadAttention.attention_weights(c)          # (B, H, Tq, Tk)
        weights = weights if batched else weights[0]               # (H, Tq, Tk) unbatched
        return out, (weights.mean(axis=-3) if average_attn_weights else weights)


class _EncoderCall(TorchCall):
    """The call shared by an encoder layer and an encoder stack: forward(x, mask, bias, ...)."""

    _MASK = "src_mask"                                             # torch's name of the attention mask

    def _call(self, src, attn_mask, key_padding_mask, is_causal, rng):
        batched, (x,) = _batch(self._input(src, "src"))             # (B, S, E)
        kw = _masks("", attn_mask, key_padding_mask, is_causal, _width_heads(self.module)[1], x, x, batched,
                    (self._MASK, "src_key_padding_mask"))
        y, _ = self.module.forward(x, causal=False, rng=rng, **kw)  # (B, S, E)
        return y if batched else y[0]


class EncoderLayerCall(_EncoderCall):
    """``torch.nn.TransformerEncoderLayer(batch_first=True)``."""

    wraps = EncoderLayer

    def __call__(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False, *, rng=None):
        """src (B, S, E) or unbatched (S, E) -> the same shape. Masks in torch's conventions
        (bool True = NOT allowed, float = added): src_mask (S, S) or (B*H, S, S),
        src_key_padding_mask (B, S). ``is_causal`` applies the causal mask."""
        return self._call(src, src_mask, src_key_padding_mask, is_causal, rng)


class EncoderCall(_EncoderCall):
    """``torch.nn.TransformerEncoder`` of batch-first layers."""

    wraps = Encoder
    _MASK = "mask"

    def __call__(self, src, mask=None, src_key_padding_mask=None, is_causal=None, *, rng=None):
        """src (B, S, E) or unbatched (S, E) -> the same shape. Masks as ``EncoderLayerCall``'s,
        ``mask`` for ``src_mask``. Padded positions get their full value (torch's nested-tensor
        fast path zeroes them)."""
        return self._call(src, mask, src_key_padding_mask, is_causal, rng)


class _DecoderCall(TorchCall):
    """The call shared by a decoder layer and a decoder stack: forward(x, memory, masks, biases, ...)."""

    def __call__(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                 memory_key_padding_mask=None, tgt_is_causal=None, memory_is_causal=False, *, rng=None):
        """tgt (B, T, E), memory (B, S, E), or both unbatched -> (B, T, E) or (T, E).
        Masks in torch's conventions (bool True = NOT allowed, float = added): tgt_mask (T, T) or
        (B*H, T, T), memory_mask (T, S) or (B*H, T, S), key padding masks (B, T) and (B, S).
        As in torch, self-attention is causal only when asked (``tgt_is_causal`` or ``tgt_mask``)."""
        x, mem = self._input(tgt, "tgt"), self._input(memory, "memory")
        check_same_batching(mem, "memory", x, "tgt")
        batched, (x, mem) = _batch(x, mem)                         # (B, T, E), (B, S, E)
        h = _width_heads(self.module)[1]
        kw = {**_masks("tgt_", tgt_mask, tgt_key_padding_mask, tgt_is_causal, h, x, x, batched,
                       ("tgt_mask", "tgt_key_padding_mask")),
              **_masks("memory_", memory_mask, memory_key_padding_mask, memory_is_causal, h, x, mem, batched,
                       ("memory_mask", "memory_key_padding_mask"))}
        y, _ = self.module.forward(x, mem, causal=False, rng=rng, **kw)  # (B, T, E)
        return y if batched else y[0]


class DecoderLayerCall(_DecoderCall):
    """``torch.nn.TransformerDecoderLayer(batch_first=True)``."""

    wraps = DecoderLayer


class DecoderCall(_DecoderCall):
    """``torch.nn.TransformerDecoder`` of batch-first layers."""

    wraps = Decoder


class TransformerCall(TorchCall):
    """``torch.nn.Transformer(batch_first=True)``."""

    wraps = TransformerStack
    generate_square_subsequent_mask = staticmethod(generate_square_subsequent_mask)

    def __call__(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None, src_key_padding_mask=None,
                 tgt_key_padding_mask=None, memory_key_padding_mask=None, src_is_causal=None,
                 tgt_is_causal=None, memory_is_causal=False, *, rng=None):
        """src (B, S, E), tgt (B, T, E), or both unbatched (S, E), (T, E) -> (B, T, E) or (T, E).
        Masks in torch's conventions (bool True = NOT allowed, float = added): src_mask (S, S),
        tgt_mask (T, T), memory_mask (T, S), each also (B*H, ., .); key padding masks (B, S),
        (B, T) and (B, S). As in torch, the target is causal only when asked: pass
        ``tgt_mask=generate_square_subsequent_mask(T)`` or ``tgt_is_causal=True``."""
        x_src, x_tgt = self._input(src, "src"), self._input(tgt, "tgt")
        check_same_batching(x_src, "src", x_tgt, "tgt")
        memory = EncoderCall(self.module.encoder)(x_src, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
                                                  is_causal=src_is_causal, rng=rng)             # (B, S, E)
        return DecoderCall(self.module.decoder)(x_tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                                                tgt_key_padding_mask=tgt_key_padding_mask,
                                                memory_key_padding_mask=memory_key_padding_mask,
                                                tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal,
                                                rng=rng)                                       # (B, T, E)


_CALLS = (MultiheadAttentionCall, EncoderLayerCall, DecoderLayerCall, EncoderCall, DecoderCall, TransformerCall)


def torch_style(module) -> TorchCall:
    """``module`` in the torch-style call for its type (a ``TorchCall`` comes back as it is)."""
    if isinstance(module, TorchCall):
        return module
    for call in _CALLS:
        if isinstance(module, call.wraps):
            return call(module)
    raise TypeError("torch_style wraps npformer's " + ", ".join(c.wraps.__name__ for c in _CALLS)
                    + f"; got {type(module).__module__}.{type(module).__name__}")


__all__ = ["DecoderCall", "DecoderLayerCall", "EncoderCall", "EncoderLayerCall", "MultiheadAttentionCall",
           "TorchCall", "TransformerCall", "generate_square_subsequent_mask", "torch_style"]
