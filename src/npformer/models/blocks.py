"""The pieces the models are built from, written once and shared by every model.

    init_model         Module's set-up, the config's type check and the generator
    token_embeddings   dropout(E[ids] * sqrt(d) + P)                          (paper 3.4, 3.5)
    encoder_stack      N encoder layers (+ final norm) from a BlockConfig
    decoder_stack      N decoder layers (+ final norm) from a BlockConfig
    output_forward     logits = h W_out^T, W_out = the token table when tied  (paper 3.4)
    output_backward    its gradient: the tied table's starts here, the lookups' are added later
    lookup_backward    an embedding lookup's gradients, its rows added into the table's gradient so far
    sequence_loss      mean token cross-entropy over the positions not ignored
    pointer_forward    logits = queries keys^T / sqrt(E): queries pick among keys, attention-style
    pointer_backward   its gradient, to the queries and the keys
    words_forward      an instruction's word tokens: ids through a table, or frozen text states projected
    words_backward     their gradient (the policies VLA and ActionLM read words this way)

Dimension legend: B batch, T positions, E model width, V vocabulary.
"""
from __future__ import annotations

from typing import Any, Protocol, TypeVar

import numpy as np
from numpy.typing import DTypeLike

from ..nn import Decoder, Embeddings, Encoder, Linear, Module, add_grads
from ..ops import cross_entropy_backward, cross_entropy_forward, linear_backward, linear_forward
from .config import BlockConfig, check_float, make_rng

C = TypeVar("C")


class TokenConfig(Protocol):
    """What ``token_embeddings`` reads of a config (the models that read token ids have these fields)."""
    d_model: int
    positional: str
    dropout: float


def init_model(model: Module, config: object, config_cls: type[C], rng: np.random.Generator | int
               ) -> tuple[C, np.random.Generator]:
    """The first lines of every model's ``__init__``: ``Module.__init__``, a TypeError unless
    ``config`` is a ``config_cls``, ``model.config = config``. Returns (config, Generator)."""
    Module.__init__(model)
    if not isinstance(config, config_cls):
        name = config_cls.__name__
        article = "an" if name[0] in "AEIOU" else "a"
        raise TypeError(f"config must be {article} {name}, got {type(config).__name__}")
    model.config = config  # type: ignore[attr-defined]  # each model class declares its own config's type
    return config, make_rng(rng)


def token_embeddings(c: TokenConfig, vocab_size: int, max_len: int, rng: np.random.Generator,
                     dtype: DTypeLike, scale: bool = True) -> Embeddings:
    """Token table scaled by sqrt(d_model) (unless ``scale`` is False), plus c.positional positions, then dropout."""
    return Embeddings(vocab_size, c.d_model, max_len, c.positional, scale=scale, dropout=c.dropout, rng=rng,
                      dtype=dtype)


def _layer_args(c: BlockConfig) -> tuple[int, int, int, float, str, bool, bool, float]:
    """The block hyper-parameters every layer of a stack takes, in Encoder/Decoder's order."""
    return c.d_model, c.n_heads, c.d_ff, c.dropout, c.activation, c.norm_first, c.use_final_norm, c.eps


def encoder_stack(c: BlockConfig, n_layers: int, rng: np.random.Generator, dtype: DTypeLike) -> Encoder:
    """N encoder layers as the BlockConfig ``c`` says, with a final norm when ``c.use_final_norm``."""
    return Encoder(n_layers, *_layer_args(c), rng, dtype)


def decoder_stack(c: BlockConfig, n_layers: int, rng: np.random.Generator, dtype: DTypeLike) -> Decoder:
    """N decoder layers as the BlockConfig ``c`` says, with a final norm when ``c.use_final_norm``."""
    return Decoder(n_layers, *_layer_args(c), rng, dtype)


def output_forward(h: np.ndarray, table: Embeddings, generator: Linear | None) -> tuple[np.ndarray, Any]:
    """The pre-softmax projection h (..., E) -> (logits (..., V), cache): tied to the token
    table (paper 3.4) when ``generator`` is None, else the generator Linear."""
    if generator is None:
        return linear_forward(h, table.tok.params["weight"])              # (..., V) = h E^T
    return generator.forward(h)                                           # (..., V)


def output_backward(dlogits: np.ndarray, cache: Any, table_name: str,
                    generator: Linear | None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """dlogits (..., V) -> (dh (..., E), grads). Tied: grads holds f"{table_name}.tok.weight", to
    which the caller ADDS the embedding lookups' gradients (``lookup_backward``); untied: "generator.*"."""
    grads: dict = {}
    if generator is None:
        dh, dw_out, _ = linear_backward(dlogits, cache)                   # (..., E), (V, E)
        grads[f"{table_name}.tok.weight"] = dw_out
    else:
        dh, g_gen = generator.backward(dlogits, cache)
        add_grads(grads, g_gen, "generator")
    return dh, grads


def lookup_backward(grads: dict, table: Embeddings, name: str, dx: np.ndarray, cache: Any) -> None:
    """Adds the embedding lookup ``table`` (keys ``name.*``)'s gradients into ``grads``. Its token rows
    go, in place, into the array already at ``name.tok.weight`` (a tied projection's, or the other
    lookup's of a shared table: paper 3.4) rather than into a second (V, E) table."""
    _, g = table.backward(dx, cache, dtok=grads.pop(f"{name}.tok.weight", None))
    add_grads(grads, g, name)


def sequence_loss(logits: np.ndarray, targets: np.ndarray, ignore_index: int, label_smoothing: float,
                  name: str = "targets") -> tuple[float, np.ndarray]:
    """Mean token cross-entropy over the rows whose target is not ``ignore_index``.

    logits (..., C), targets (...) int -> (loss float, dlogits (..., C))."""
    check_float("label_smoothing", label_smoothing, 0.0, 1.0)
    if not np.any(targets != ignore_index):
        raise ValueError(f"{name} holds only ignored positions (ignore index {ignore_index}): nothing to score")
    c = logits.shape[-1]
    flat, cache = cross_entropy_forward(logits.reshape(-1, c), targets.reshape(-1),
                                        ignore_index=ignore_index, label_smoothing=float(label_smoothing))
    dlogits = cross_entropy_backward(1.0, cache).reshape(logits.shape)  # (..., C)
    return float(flat), dlogits



def pointer_forward(queries: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, Any]:
    """queries (B, Q, E), keys (B, N, E) -> (logits (B, Q, N) = queries keys^T / sqrt(E), cache): each
    query scores every key as attention does, and the scores are logits over the N keys (the tabletop
    policy's cells, the gripper policy's goal patch)."""
    scale = queries.dtype.type(queries.shape[-1] ** -0.5)
    return (queries @ keys.transpose(0, 2, 1)) * scale, (queries, keys, scale)     # (B, Q, N)


def pointer_backward(dlogits: np.ndarray, cache: Any) -> tuple[np.ndarray, np.ndarray]:
    """dlogits (B, Q, N) -> (dqueries (B, Q, E), dkeys (B, N, E))."""
    queries, keys, scale = cache
    dlogits = dlogits * scale                                     # (B, Q, N)
    return dlogits @ keys, dlogits.transpose(0, 2, 1) @ queries


def words_forward(model: Any, words: np.ndarray, rng: np.random.Generator | None) -> tuple[np.ndarray, Any]:
    """The word tokens (B, L, E) of a policy that reads an instruction, before their type embedding, and the
    cache: ``model.word_embed`` over ids (B, L) when ``model.config.text_dim`` is 0, else frozen text states
    (B, L, S) through ``model.text_proj`` and ``model.text_dropout``."""
    if not model.config.text_dim:
        return model.word_embed.forward(words, rng)               # E_w[ids] * sqrt(E) + P_w
    x, c_proj = model.text_proj.forward(words)                    # (B, L, E) = s W_t^T + b_t
    x, c_drop = model.text_dropout.forward(x, rng)                # (B, L, E)
    return x, (c_proj, c_drop)


def words_backward(model: Any, dxw: np.ndarray, c_w: Any, grads: dict) -> np.ndarray | None:
    """Adds the word path's gradients into ``grads``; returns d loss / d text states (B, L, S), or None for
    word ids."""
    if not model.config.text_dim:
        _, g = model.word_embed.backward(dxw, c_w)
        add_grads(grads, g, "word_embed")
        return None
    c_proj, c_drop = c_w
    dxw, _ = model.text_dropout.backward(dxw, c_drop)
    dstates, g = model.text_proj.backward(dxw, c_proj)             # (B, L, S)
    add_grads(grads, g, "text_proj")
    return dstates
