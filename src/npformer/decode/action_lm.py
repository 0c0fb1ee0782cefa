"""Decoding a step's action tokens from ``models/action_lm.py``'s prefix-LM over the KV cache.

    prefix   = words + patches, embedded and run through every layer ONCE, both ways (KVCache.prefix_mask)
    step(a)  = action tokens at their slots: per layer q, k, v of the new tokens only, attending over the
               cached prefix and the earlier action tokens (KVCache.self_mask, causal)
    act_tokens: BOS, then token j = argmax (or a draw) over slot j's allowed ids, fed back for slot j + 1

What it mirrors: ``ActionLM.forward`` in eval mode, op for op (each layer's own ``block``, the attention
over the cache ``cached_self_attention``), so the logits equal the full forward's to float rounding.
The prefix's keys and values never depend on the action tokens (the prefix does not read them), which
is what lets one prefix serve every action token of the step. Pinned by tests/decode/test_action_lm.py
(cached logits and tokens against the full forward, float32 and float64, padded words).

Dimension legend: B batch, P prefix tokens (words + patches), A action slots, E width, V_a action vocabulary.
"""
from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import numpy as np

from ..models.action_lm import ActionLM
from ..models.config import check_ids
from .kvcache import KVCache, cached_self_attention, check_eval
from .sample import sample_next


class CachedActionLM:
    """One step's incremental decoder: the prefix of ``words`` and ``images`` is computed in ``__init__``;
    ``step(ids)`` feeds action tokens (BOS first) and returns the logits of the slot after each."""

    def __init__(self, model: ActionLM, words: np.ndarray, images: np.ndarray) -> None:
        if not isinstance(model, ActionLM):
            raise TypeError(f"CachedActionLM decodes an ActionLM, got {type(model).__name__}")
        check_eval(model)
        words, images = model.check_inputs(words, images)
        c = model.config
        self.model = model
        x, _ = model.embed_prefix(words, images)                           # (B, P, E)
        b, p = x.shape[:2]
        self.prefix_len = p
        layers = model.encoder.layers
        self.cache = KVCache(len(layers), b, c.n_heads, c.d_model // c.n_heads, p + c.action_len, x.dtype)
        valid = np.ones((b, p), dtype=bool)                                # (B, P): padded words are no keys
        valid[:, :words.shape[1]] = model.word_mask(words)
        mask = self.cache.prefix_mask(p, valid)                            # (B, 1, 1, P): both ways
        if model.words_alone(words.shape[1]):                              # word_reads="self": the model's own
            mask = model.attention_mask(words, 0)                          # rule, (B, 1, P, P)
        self._run_layers(x, mask)
        self.cache.advance(p)
        # the prefix's own outputs are never scored: the final norm and the head run on action slots only

    @property
    def slots(self) -> int:
        """Action tokens fed so far."""
        return self.cache.length - self.prefix_len

    def _run_layers(self, x: np.ndarray, mask: np.ndarray) -> np.ndarray:
        for i, layer in enumerate(self.model.encoder.layers):
            self_attn = partial(cached_self_attention, layer.self_attn, cache=self.cache, layer=i, mask=mask)
            x, _ = layer.block(x, self_attn, layer.ffn.forward)            # (B, t, E)
        return x

    def step(self, ids: np.ndarray) -> np.ndarray:
        """ids (B, t) action tokens for the next t slots (BOS = action_vocab first) -> logits (B, t, V_a)."""
        c = self.model.config
        ids = check_ids(ids, "ids", c.action_vocab + 1)
        if ids.shape[0] != self.cache.batch:
            raise ValueError(f"ids must have {self.cache.batch} rows, got shape {ids.shape}")
        t = ids.shape[1]
        if self.slots + t > c.action_len:
            raise ValueError(f"{self.slots} action tokens fed + {t} new > action_len {c.action_len}")
        x, _ = self.model.embed_actions(ids, offset=self.slots)            # (B, t, E)
        mask = self.cache.self_mask(t, None)                               # (B, 1, t, P + slots + t)
        x = self._run_layers(x, mask)
        self.cache.advance(t)
        if self.model.encoder.norm is not None:
            x, _ = self.model.encoder.norm.forward(x)
        return self.model.project_output(x)[0]                             # (B, t, V_a)


def check_allowed(allowed: Sequence, n_slots: int, vocab: int) -> list[np.ndarray]:
    """One non-empty 1-D integer array of ids in [0, vocab) per slot, or ValueError naming the slot."""
    if isinstance(allowed, np.ndarray) or not isinstance(allowed, Sequence) or len(allowed) != n_slots:
        n = len(allowed) if hasattr(allowed, "__len__") else "?"
        raise ValueError(f"allowed must be a list of {n_slots} arrays of token ids, one per action slot, "
                         f"got {type(allowed).__name__} of length {n}")
    out = []
    for j, ids in enumerate(allowed):
        ids = np.asarray(ids)
        if ids.dtype.kind not in "iu" or ids.ndim != 1 or not len(ids) or ids.min() < 0 or ids.max() >= vocab:
            raise ValueError(f"allowed[{j}] must be a non-empty 1-D array of token ids in [0, {vocab}), "
                             f"got {ids.dtype} {ids.shape}")
        out.append(ids.astype(np.int64))
    return out


def restrict(logits: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """logits (B, V) with every id outside ``ids`` set to -inf: a copy."""
    keep = np.zeros(logits.shape[-1], dtype=bool)                          # (V,)
    keep[ids] = True
    return np.where(keep, logits, logits.dtype.type(-np.inf))              # (B, V)


def softmax64(z: np.ndarray) -> np.ndarray:
    """Row softmax in float64 (-inf entries get probability 0)."""
    z = z.astype(np.float64)
    z = np.exp(z - z.max(axis=-1, keepdims=True))                          # (B, V)
    return z / z.sum(axis=-1, keepdims=True)


def act_tokens(model: ActionLM, words: np.ndarray, images: np.ndarray, allowed: Sequence,
               temperature: float = 0.0, rng: np.random.Generator | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One step's action tokens for every row: the prefix once, then ``action_len`` slots over the KV cache.

    words, images as ``ActionLM.forward``'s; allowed: per slot, the token ids it may take (the tokenizer's
    slot rule). temperature 0 is greedy (ties to the lowest id); > 0 draws from softmax(logits / temperature)
    over the allowed ids with ``rng``. Returns (tokens (B, A) int64, probs (B, A, V_a) float64): each
    slot's distribution over its allowed ids, softmax(logits / temperature), or softmax(logits) when greedy.
    The model must be in eval mode."""
    c = model.config
    allowed = check_allowed(allowed, c.action_len, c.action_vocab)
    if not np.isfinite(temperature) or temperature < 0:
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature}")
    if temperature > 0 and not isinstance(rng, np.random.Generator):
        raise TypeError(f"sampling (temperature {temperature}) needs rng, an np.random.Generator, "
                        f"got {type(rng).__name__}")
    dec = CachedActionLM(model, words, images)
    b = dec.cache.batch
    nxt = np.full(b, c.bos_id, dtype=np.int64)                             # (B,)
    tokens, probs = [], []
    for j in range(c.action_len):
        logits = restrict(dec.step(nxt[:, None])[:, 0], allowed[j])        # (B, V_a)
        if temperature == 0:
            nxt = logits.argmax(axis=-1)                                   # (B,)
            probs.append(softmax64(logits))
        else:
            assert rng is not None                                         # checked above
            nxt = sample_next(logits, rng, temperature)                    # (B,)
            probs.append(softmax64(logits.astype(np.float64) / temperature))
        tokens.append(nxt.astype(np.int64))
    return np.stack(tokens, axis=1), np.stack(probs, axis=1)               # (B, A), (B, A, V_a)
