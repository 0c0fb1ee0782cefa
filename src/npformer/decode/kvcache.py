"""A key/value cache for autoregressive decoding, and incremental decoder steps that use it.

Without a cache, producing token t means running the decoder over all t earlier tokens again,
so n tokens cost O(n^2) position-forwards. With causal self-attention, the keys and values of
past positions never change once computed; keeping them turns each step into one position's
forward plus one attention row over the stored keys:

    step(new ids) : embed at position offset p -> per layer:
                    q, k, v = proj(new)          (only the new positions)
                    K[:, :, p:p+t], V[...] = k, v     (written in place, no concatenation)
                    attend q over K[:, :, :p+t], V[:, :, :p+t]

The encoder-decoder also caches each decoder layer's cross-attention keys and values of the
encoder memory (``MultiHeadAttention.project_kv``): the memory is fixed for the whole decode.

The steps do the full forward's arithmetic, op for op, so cached logits equal uncached ones to
float rounding (1e-12 in float64, a few ulps in float32) and decoding picks the same tokens.
They are not bit-identical: BLAS rounds a one-row product differently from the same row inside
a (T, E) product (it picks kernels and blockings by shape), and NumPy's pairwise summation in the
softmax groups a row's terms by the row's length, masked zeros included.

What it mirrors: ``cached_self_attention`` (with ``attend``) is ``MultiHeadAttention.forward``'s
self-attention in eval mode, its keys and values read from the cache; cross-attention is
``MultiHeadAttention.forward`` itself, given the cached memory projection as ``kv``. The block is
not twinned: each layer runs its own ``block`` (nn/sublayer.py) around these sub-layers, the
LayerNorm and residual of the full forward. Pinned by tests/decode/test_kvcache.py (cached logits
equal the full forward's, both model kinds, post-LN and pre-LN, float64 and float32).

A prefix-LM (``models/action_lm.py``) fills the cache first with a prefix whose positions read one
another both ways (``KVCache.prefix_mask``: key padding only, no causal rule), then decodes after it
step by step with the causal ``self_mask``; ``decode/action_lm.py`` drives it.

A long first step (the prompt, into an empty cache) runs the tiled kernel (``ops/flash_attention.py``)
with its own causal rule and the key-padding mask alone: neither the (B, 1, t, t) mask nor the
(B, H, t, t) scores are built, so a prompt of 16,384 positions prefills in O(t) memory per head.
Steps after it attend one or a few rows, exactly. "Long" is training's rule, ``nn.attention.use_tiled``
(t * t >= ``TILED_MIN_SCORES`` scores per head), read at each step: the threshold lives there alone.

Dimension legend: B batch (sources x beams), H heads, L cache capacity (positions),
D head size, E model width, S source positions, p positions already cached, t new positions,
V vocabulary.
"""
from __future__ import annotations

from functools import partial

import numpy as np

from ..models.config import check_ids
from ..nn.attention import merge_heads, use_tiled
from ..ops import attention_forward, causal_mask, flash_attention_forward


class KVCache:
    """Per-layer self-attention keys and values, preallocated to ``max_len`` positions.

    ``k[l]``, ``v[l]``: (B, H, L, D); positions ``[0, length)`` are filled.
    ``valid``: (B, L) bool, False where the token was padding (its key is masked, as the
    full forward masks padded keys).
    """

    def __init__(self, n_layers: int, batch: int, n_heads: int, head_dim: int, max_len: int,
                 dtype=np.float32) -> None:
        for name, val in (("n_layers", n_layers), ("batch", batch), ("n_heads", n_heads),
                          ("head_dim", head_dim), ("max_len", max_len)):
            if int(val) < 1:
                raise ValueError(f"KVCache {name} must be >= 1, got {val}")
        shape = (batch, n_heads, max_len, head_dim)
        self.k = [np.zeros(shape, dtype=dtype) for _ in range(n_layers)]   # each (B, H, L, D)
        self.v = [np.zeros(shape, dtype=dtype) for _ in range(n_layers)]   # each (B, H, L, D)
        self.valid = np.ones((batch, max_len), dtype=bool)                 # (B, L)
        self.length = 0

    @property
    def batch(self) -> int:
        return self.valid.shape[0]

    @property
    def max_len(self) -> int:
        return self.valid.shape[1]

    def check_room(self, t: int) -> None:
        if self.length + t > self.max_len:
            raise ValueError(f"KV cache full: {self.length} positions stored + {t} new > "
                             f"capacity {self.max_len}")

    def write(self, layer: int, k_new: np.ndarray, v_new: np.ndarray):
        """Store layer ``layer``'s new keys/values (B, H, t, D) after the ``length`` filled
        positions; return views of all of them, (B, H, length + t, D) each."""
        p, t = self.length, k_new.shape[2]
        self.check_room(t)
        self.k[layer][:, :, p:p + t] = k_new
        self.v[layer][:, :, p:p + t] = v_new
        return self.k[layer][:, :, :p + t], self.v[layer][:, :, :p + t]

    def self_mask(self, t: int, valid_new: np.ndarray | None) -> np.ndarray:
        """The mask for t new queries over length + t keys: causal, and no padded keys.
        Records ``valid_new`` (B, t). Returns bool (B, 1, t, length + t)."""
        p = self.length
        self.check_room(t)
        if valid_new is not None:
            self.valid[:, p:p + t] = valid_new
        causal = causal_mask(t, p + t, offset=p)                            # (t, p + t)
        return causal[None, None] & self.valid[:, None, None, :p + t]       # (B, 1, t, p + t)

    def prefill_mask(self, t: int, valid_new: np.ndarray | None) -> np.ndarray:
        """For t first positions into an empty cache: records ``valid_new`` (B, t) and returns the
        key-padding mask alone, bool (B, 1, 1, t); the kernel applies the causal rule itself."""
        return self._first(t, valid_new, "prefill_mask")

    def prefix_mask(self, t: int, valid_new: np.ndarray | None) -> np.ndarray:
        """A prefix-LM's prefix, t first positions into an empty cache that read one another both ways
        (no causal rule): records ``valid_new`` (B, t) and returns the key-padding mask, bool
        (B, 1, 1, t). Later steps (``self_mask``) read the whole prefix and, causally, each other."""
        return self._first(t, valid_new, "prefix_mask")

    def _first(self, t: int, valid_new: np.ndarray | None, caller: str) -> np.ndarray:
        if self.length:
            raise ValueError(f"{caller} needs an empty cache, this one holds {self.length} positions")
        self.check_room(t)
        if valid_new is not None:
            self.valid[:, :t] = valid_new
        return self.valid[:, None, None, :t]                                # (B, 1, 1, t)

    def advance(self, t: int) -> None:
        """Mark ``t`` more positions as filled (after every layer has written them)."""
        self.check_room(t)
        self.length += t

    def reorder(self, index: np.ndarray) -> None:
        """Keep batch rows ``index`` (B',) in that order (beam search: each new beam copies the
        cache of the beam it extends). B' may differ from B (expanding sources into beams)."""
        index = np.asarray(index)
        n = self.length
        if len(index) == self.batch:
            for buf in (*self.k, *self.v):
                buf[:, :, :n] = buf[index, :, :n]                           # gather copies first
            self.valid[:] = self.valid[index]
            return
        self.k = [_take_rows(buf, index, n) for buf in self.k]
        self.v = [_take_rows(buf, index, n) for buf in self.v]
        self.valid = self.valid[index]                                      # (B', L)


def _take_rows(buf: np.ndarray, index: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros((len(index),) + buf.shape[1:], dtype=buf.dtype)         # (B', H, L, D)
    out[:, :, :n] = buf[index, :, :n]
    return out


# -- pieces shared by the two model kinds -----------------------------------------------------

def attend(mha, q, k, v, mask, tiled: bool = False):
    """Attention of ready-made heads q (B, H, t, D) over k, v (B, H, n, D), then the output
    projection, as ``MultiHeadAttention.forward`` does after its input projections.
    tiled: the first t positions of a sequence (n = t): the tiled kernel, causal, ``mask`` the
    key padding only. Returns (out (B, t, E), weights (B, H, t, n), None when tiled)."""
    if tiled:
        heads, _ = flash_attention_forward(q, k, v, mask=mask, causal=True)   # (B, H, t, D)
        weights = None
    else:
        heads, weights, _ = attention_forward(q, k, v, mask=mask)           # (B, H, t, D)
    out, _ = mha.out_proj.forward(merge_heads(heads))                      # (B, t, E)
    return out, weights


def cached_self_attention(mha, x, cache: KVCache, layer: int, mask, tiled: bool = False):
    """Self-attention of new positions x (B, t, E) over the cached past plus themselves."""
    q, k, v = mha.project_qkv(x)                                           # each (B, H, t, D)
    k_all, v_all = cache.write(layer, k, v)                                 # (B, H, p + t, D)
    return attend(mha, q, k_all, v_all, mask, tiled)


def check_eval(model) -> None:
    if model.training:
        raise ValueError("model is in training mode: call model.eval() before decoding "
                         "(dropout must be off)")


def _valid(ids: np.ndarray, pad_id) -> np.ndarray | None:
    return None if pad_id is None or pad_id < 0 else ids != pad_id        # (B, t)


# -- one decoding step, for both model kinds -------------------------------------------------

class _CachedDecoder:
    """A step's frame: embed the new ids at the cached offset, run each layer's block with
    self-attention over the cache, advance the cache, the stack's final norm, the logits.
    A model kind gives its stack, embedding and vocabulary, and ``_block`` (the layer's call)."""

    def __init__(self, model, stack, embed, vocab_size: int, batch: int, max_len: int | None, dtype) -> None:
        cfg = model.config
        self.model, self.stack, self.embed, self.vocab_size = model, stack, embed, vocab_size
        max_len = cfg.max_len if max_len is None else min(int(max_len), cfg.max_len)
        self.cache = KVCache(len(stack.layers), batch, cfg.n_heads, cfg.d_model // cfg.n_heads, max_len, dtype)

    @property
    def length(self) -> int:
        return self.cache.length

    def step(self, ids: np.ndarray) -> np.ndarray:
        """ids (B, t) new (target) tokens -> logits (B, t, V) for the positions after each."""
        cache = self.cache
        ids = check_ids(ids, "ids", self.vocab_size)
        t = ids.shape[1]
        x, _ = self.embed.forward(ids, offset=cache.length)                # (B, t, E)
        # a long prompt into an empty cache: the tiled kernel, O(t) memory, by nn/attention.py's rule
        tiled = cache.length == 0 and use_tiled(need_weights=False, training=False, t_q=t, t_k=t)
        valid = _valid(ids, self.model.config.pad_id)                       # (B, t) or None
        if tiled:
            mask = cache.prefill_mask(t, valid)                             # (B, 1, 1, t)
        else:
            mask = cache.self_mask(t, valid)                                # (B, 1, t, p + t)
        for i, layer in enumerate(self.stack.layers):
            self_attn = partial(cached_self_attention, layer.self_attn, cache=cache, layer=i, mask=mask,
                                tiled=tiled)
            x, _ = self._block(i, layer, x, self_attn)                      # (B, t, E)
        cache.advance(t)
        if self.stack.norm is not None:
            x, _ = self.stack.norm.forward(x)
        return self.model.project_output(x)[0]                             # (B, t, V)

    def _block(self, i: int, layer, x: np.ndarray, self_attn):
        """Layer ``i``'s block on x (B, t, E), with ``self_attn`` its cached self-attention."""
        raise NotImplementedError

    def reorder(self, index: np.ndarray) -> None:
        """Keep rows ``index`` of the batch (beam search)."""
        self.cache.reorder(index)


class CachedTransformerDecoder(_CachedDecoder):
    """Incremental decoding for ``npformer.models.Transformer``.

    Encodes ``src_ids`` (B, S) once, projects the memory to every decoder layer's cross-attention
    keys/values once, then ``step(ids)`` runs the decoder on only the new target ids.
    """

    def __init__(self, model, src_ids: np.ndarray, max_len: int | None = None) -> None:
        check_eval(model)
        cfg = model.config
        src_ids = check_ids(src_ids, "src_ids", cfg.src_vocab_size)
        memory, self.src_mask, _ = model.encode(src_ids)                   # (B, S, E), (B, 1, 1, S)
        self.memory_kv = [layer.multihead_attn.project_kv(memory)          # (B, H, S, D) x2 per layer
                          for layer in model.decoder.layers]
        super().__init__(model, model.decoder, model.tgt_embedding, cfg.tgt_vocab_size, src_ids.shape[0],
                         max_len, memory.dtype)

    def _block(self, i, layer, x, self_attn):
        cross_attn = partial(layer.multihead_attn.forward, kv=self.memory_kv[i], mask=self.src_mask)
        return layer.block(x, self_attn, cross_attn, layer.ffn.forward)

    def reorder(self, index: np.ndarray) -> None:
        super().reorder(index)
        self.memory_kv = [(k[index], v[index]) for k, v in self.memory_kv]
        self.src_mask = self.src_mask[index]


class CachedLM(_CachedDecoder):
    """Incremental decoding for ``npformer.models.DecoderLM`` (causal ``Encoder`` blocks)."""

    def __init__(self, model, batch: int, max_len: int | None = None) -> None:
        check_eval(model)
        super().__init__(model, model.blocks, model.embed, model.config.vocab_size, batch, max_len,
                         model.embed.tok.params["weight"].dtype)

    def _block(self, i, layer, x, self_attn):
        return layer.block(x, self_attn, layer.ffn.forward)
