"""A tiny vision-language-action policy: one transformer reads words and image patches as one sequence.

    seq = [PICK, PLACE]                         two learned action query tokens
        + words    E_w[ids] * sqrt(E) + P_w[i] + type[word]                 (text_dim == 0)
             or    W_t s_i + b_t + type[word]   s_i: a frozen text encoder's state of word piece i
        + patches  W patch + b + P_p[n] + type[patch]       (npformer.nn.patches)
    h   = Encoder(seq)                          pre-LN, padded words masked as keys
    head="pointer" (default): each action token points at a cell, attention-style,
        logits[a, n] = (W_a h[a] + b_a) . (W_k h[patch n]) / sqrt(E)
    head="linear": logits[a] = W_a h[a] + b_a, one fixed output per cell

Each token carries its own position information (a word table over word positions, a patch
table over the grid) and a type embedding that says which kind of token it is. The action
tokens read everything through attention, so their attention weights show what the policy
looked at to act.

The words come in one of two ways. ``text_dim == 0``: word ids, looked up in a table learned from
scratch. ``text_dim == S > 0``: each word piece's S-wide hidden state from a frozen pretrained
language model (all-MiniLM-L6-v2 in the tabletop task), projected to E by ``text_proj``; the states
already carry the word's context and order, so no position table is added. ``text_dropout`` drops
projected features while training, so that the policy cannot lean on a few directions the trained
words happen to share: it then reads the broad ones that words it never saw share with them too. The policy never sees
the language model's weights, only its states, and trains the projection with everything else.

Keys: ``action_queries`` (1, 2, E), ``word_embed.tok.weight``, ``word_embed.pos.weight`` (or, when
text_dim > 0, ``text_proj.{weight,bias}``), ``patch_embed.{weight,bias,pos_embed}``,
``type_embed.weight`` (2, E), ``encoder.*``, ``pick_head.*``, ``place_head.*`` and, for the pointer
head, ``cell_key.weight``.
Dimension legend: B batch, L words, S text-state width, N patches (= cells), T = 2 + L + N tokens,
E width.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from ..nn import Dropout, Embedding, Embeddings, Encoder, Linear, Module, add_grads
from ..nn.patches import PatchEmbedding
from ..ops import cross_entropy_backward, cross_entropy_forward
from .blocks import encoder_stack, init_model, pointer_backward, pointer_forward, words_backward, words_forward
from .config import (
    BlockConfig,
    check_choice,
    check_float,
    check_ids,
    check_images,
    check_int,
    check_pad_id,
    check_patch_grid,
    check_rng,
)

N_ACTIONS = 2                      # pick, place


def check_text_states(states: ArrayLike, text_dim: int, max_words: int, dtype: DTypeLike) -> np.ndarray:
    """Return ``states`` if it is a finite (B, L, S) array in ``dtype`` with B >= 1, 1 <= L <= max_words and
    S == text_dim, or raise naming what was expected."""
    if not isinstance(states, np.ndarray) or states.ndim != 3 or states.shape[2] != text_dim \
            or not states.shape[0] or not 1 <= states.shape[1] <= max_words:
        raise ValueError(f"words must be text states of shape (B, L <= {max_words}, {text_dim}) for this model "
                         f"(text_dim {text_dim}), got {getattr(states, 'shape', type(states).__name__)} "
                         f"{getattr(states, 'dtype', '')}".rstrip())
    if states.dtype != dtype:
        raise TypeError(f"text states must have the model's dtype {dtype}, got {states.dtype}")
    if not np.isfinite(states).all():
        raise ValueError("text states contain NaN or inf")
    return states


@dataclass
class VLAConfig(BlockConfig):
    vocab_size: int                # word vocabulary, id pad_id is padding (unused when text_dim > 0)
    max_words: int = 16            # L: instructions are padded to at most this many words (or word pieces)
    image_size: int = 32           # square RGB images, pixels per side
    patch_size: int = 8            # P: one patch per grid cell
    in_channels: int = 3           # C
    d_model: int = 64              # E: token width
    n_heads: int = 4               # attention heads per layer
    d_ff: int = 128                # feed-forward inner width
    n_layers: int = 3              # encoder layers
    dropout: float = 0.0           # dropout on tokens, attention weights and sub-layer outputs
    activation: str = "gelu"       # feed-forward non-linearity
    norm_first: bool = True        # pre-LN (with a final norm) or post-LN
    pad_id: int = 0                # padding word id, masked out as a key
    head: str = "pointer"          # "pointer": action query . patch key per cell; "linear": a fixed map
    eps: float = 1e-5              # LayerNorm epsilon
    text_dim: int = 0              # 0: words are ids into a learned table; S > 0: S-wide frozen text states
    text_dropout: float = 0.0      # text_dim > 0: dropout on the projected text features, on top of dropout

    def __post_init__(self) -> None:
        for name in ("vocab_size", "max_words", "image_size", "patch_size", "in_channels", "d_model", "n_heads",
                     "d_ff", "n_layers"):
            check_int(name, getattr(self, name))
        check_int("text_dim", self.text_dim, minimum=0)
        check_float("text_dropout", self.text_dropout, 0.0, 1.0)
        if self.text_dropout and not self.text_dim:
            raise ValueError(f"text_dropout ({self.text_dropout}) drops projected text states: it needs text_dim > 0")
        check_patch_grid(self.image_size, self.patch_size)
        self.check_block_fields()            # no final_norm field: a final norm exactly when pre-LN
        check_pad_id(self.pad_id, self.vocab_size)
        check_choice("head", self.head, ("pointer", "linear"))

    @property
    def n_cells(self) -> int:
        return (self.image_size // self.patch_size) ** 2


class VLA(Module):
    # the config (init_model) and the children (add_module) made in __init__, declared for the type checker
    config: VLAConfig
    text_proj: Linear                                # frozen MiniLM states only
    text_dropout: Dropout                            # frozen MiniLM states only
    word_embed: Embeddings                           # own word table only
    patch_embed: PatchEmbedding
    type_embed: Embedding
    encoder: Encoder
    pick_head: Linear
    place_head: Linear
    cell_key: Linear                                 # place by keys only

    WORD, PATCH = 0, 1             # rows of type_embed

    def __init__(self, config: VLAConfig, rng: np.random.Generator | int = 0, dtype: DTypeLike = np.float32) -> None:
        c, rng = init_model(self, config, VLAConfig, rng)
        self.params["action_queries"] = (rng.standard_normal((1, N_ACTIONS, c.d_model)) * 0.02).astype(dtype)
        if c.text_dim:
            self.add_module("text_proj", Linear(c.text_dim, c.d_model, rng=rng, dtype=dtype))
            # one mask with both rates: a feature survives dropout and text_dropout with (1 - p)(1 - p_t)
            self.add_module("text_dropout", Dropout(1.0 - (1.0 - c.dropout) * (1.0 - c.text_dropout)))
        else:
            self.add_module("word_embed", Embeddings(c.vocab_size, c.d_model, c.max_words, positional="learned",
                                                     dropout=c.dropout, rng=rng, dtype=dtype))
        self.add_module("patch_embed", PatchEmbedding(c.image_size, c.patch_size, c.in_channels, c.d_model,
                                                      cls_token=False, positional="learned", dropout=c.dropout,
                                                      rng=rng, dtype=dtype))
        self.add_module("type_embed", Embedding(2, c.d_model, rng=rng, dtype=dtype, std=0.02))
        self.add_module("encoder", encoder_stack(c, c.n_layers, rng, dtype))
        out = c.d_model if c.head == "pointer" else c.n_cells
        self.add_module("pick_head", Linear(c.d_model, out, rng=rng, dtype=dtype))
        self.add_module("place_head", Linear(c.d_model, out, rng=rng, dtype=dtype))
        if c.head == "pointer":
            # no key bias: q . b_k shifts every cell's logit equally, so softmax ignores it
            self.add_module("cell_key", Linear(c.d_model, c.d_model, bias=False, rng=rng, dtype=dtype))

    def layout(self, n_words: int) -> dict:
        """Where each kind of token sits in the sequence: name -> slice."""
        a, n = N_ACTIONS, self.config.n_cells
        return {"actions": slice(0, a), "words": slice(a, a + n_words), "patches": slice(a + n_words, a + n_words + n)}

    def check_inputs(self, words: ArrayLike, images: ArrayLike,
                     rng: np.random.Generator | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Validate the words (word ids (B, L) ints in the vocabulary or, when text_dim = S > 0, text states
        (B, L, S) in the model's dtype, finite; L <= max_words), the images ((B, H, W, C) in the model's
        dtype, finite) and the rng. Returns (words, images)."""
        c = self.config
        check_rng(self, rng, max(c.dropout, c.text_dropout))
        if c.text_dim:
            words = check_text_states(words, c.text_dim, c.max_words, self.dtype)
        else:
            words = check_ids(words, "word_ids", c.vocab_size, c.max_words)
        images = check_images(images, c.image_size, c.in_channels, self.dtype, batch=len(words),
                              context=f" to go with words {words.shape}")
        return words, images

    def word_mask(self, words: np.ndarray) -> np.ndarray:
        """(B, L) bool, True for a real word: an id other than pad_id, or a text state that is not all
        zeros (a frozen language model's states never are; padding is)."""
        return (words != 0).any(axis=-1) if self.config.text_dim else words != self.config.pad_id

    def forward(self, words: np.ndarray, images: np.ndarray,
                rng: np.random.Generator | None = None) -> tuple[np.ndarray, Any]:
        """words: ids (B, L) int, or text states (B, L, S) when text_dim = S > 0 (padding: rows of zeros);
        images (B, H, W, C) -> (logits (B, 2, N): pick and place over cells, cache)."""
        c = self.config
        words, images = self.check_inputs(words, images, rng)
        b, n_words = words.shape[:2]
        tw = self.type_embed.params["weight"]                     # (2, E)
        xw, c_w = words_forward(self, words, rng)                 # (B, L, E)
        xp, c_p = self.patch_embed.forward(images, rng)           # (B, N, E)
        xa = np.broadcast_to(self.params["action_queries"], (b, N_ACTIONS, c.d_model))  # (B, 2, E)
        x = np.concatenate([xa, xw + tw[self.WORD], xp + tw[self.PATCH]], axis=1)     # (B, T, E)
        keep = np.ones((b, x.shape[1]), dtype=bool)               # (B, T): padded words are not keys
        keep[:, self.layout(n_words)["words"]] = self.word_mask(words)
        h, c_enc = self.encoder.forward(x, mask=keep[:, None, None, :], rng=rng)  # (B, T, E)
        pick, c_pick = self.pick_head.forward(h[:, 0])            # (B, N) or pointer query (B, E)
        place, c_place = self.place_head.forward(h[:, 1])         # (B, N) or (B, E)
        heads = np.stack([pick, place], axis=1)                   # (B, 2, N) or (B, 2, E)
        c_key = None
        if c.head == "pointer":
            keys, c_lin = self.cell_key.forward(h[:, self.layout(n_words)["patches"]])  # (B, N, E)
            logits, c_ptr = pointer_forward(heads, keys)          # (B, 2, N)
            c_key = (c_lin, c_ptr)
        else:
            logits = heads                                        # (B, 2, N)
        return logits, (c_w, c_p, c_enc, c_pick, c_place, c_key, h.shape, n_words)

    def backward(self, dlogits: np.ndarray, cache: Any) -> tuple[Any, dict[str, np.ndarray]]:
        """dlogits (B, 2, N) -> (dinputs, grads), grads one per state_dict key. dinputs: {"images": d loss /
        d images (B, H, W, C)} and, when text_dim > 0, "words": d loss / d text states (B, L, S); word ids
        have no gradient."""
        c_w, c_p, c_enc, c_pick, c_place, c_key, h_shape, n_words = cache
        lay = self.layout(n_words)
        grads: dict = {}
        dh = np.zeros(h_shape, dtype=dlogits.dtype)               # (B, T, E)
        dheads = dlogits                                          # (B, 2, N)
        if c_key is not None:                                     # pointer: logits = heads keys^T * scale
            c_lin, c_ptr = c_key
            dheads, dkeys = pointer_backward(dlogits, c_ptr)      # (B, 2, E), (B, N, E)
            dh[:, lay["patches"]], g = self.cell_key.backward(dkeys, c_lin)
            add_grads(grads, g, "cell_key")
        dh[:, 0], g = self.pick_head.backward(dheads[:, 0], c_pick)
        add_grads(grads, g, "pick_head")
        dh[:, 1], g = self.place_head.backward(dheads[:, 1], c_place)
        add_grads(grads, g, "place_head")
        dx, g = self.encoder.backward(dh, c_enc)                  # (B, T, E)
        add_grads(grads, g, "encoder")
        grads["action_queries"] = dx[:, lay["actions"]].sum(axis=0, keepdims=True)  # (1, 2, E)
        dxw, dxp = dx[:, lay["words"]], dx[:, lay["patches"]]
        dtype_w = np.zeros_like(self.type_embed.params["weight"])  # (2, E)
        dtype_w[self.WORD] = dxw.sum(axis=(0, 1))
        dtype_w[self.PATCH] = dxp.sum(axis=(0, 1))
        grads["type_embed.weight"] = dtype_w
        dwords = words_backward(self, dxw, c_w, grads)
        dimages, g = self.patch_embed.backward(dxp, c_p)          # (B, H, W, C)
        add_grads(grads, g, "patch_embed")
        return ({"images": dimages} if dwords is None else {"images": dimages, "words": dwords}), grads

    def loss(self, words: np.ndarray, images: np.ndarray, actions: np.ndarray, label_smoothing: float = 0.0,
             rng: np.random.Generator | None = None) -> tuple[float, dict[str, np.ndarray]]:
        """Mean cross-entropy over both action tokens; words as ``forward``'s, actions (B, 2) int [pick,
        place]. Returns (loss, grads)."""
        actions = np.asarray(actions)
        n_cells = self.config.n_cells
        if actions.dtype.kind not in "iu" or actions.shape != (len(words), N_ACTIONS):
            raise ValueError(f"actions must be integer (pick, place) cells of shape ({len(words)}, 2), "
                             f"got {actions.dtype} {actions.shape}")
        if actions.min() < 0 or actions.max() >= n_cells:
            raise ValueError(f"actions hold cells outside [0, {n_cells}): min {actions.min()}, max {actions.max()}")
        logits, cache = self.forward(words, images, rng)          # (B, 2, N)
        b, a, n = logits.shape
        loss, lc = cross_entropy_forward(logits.reshape(b * a, n), actions.reshape(b * a),
                                         label_smoothing=label_smoothing)
        dlogits = cross_entropy_backward(1.0, lc).reshape(b, a, n)
        return float(loss), self.backward(dlogits, cache)[1]

    def act(self, words: np.ndarray, images: np.ndarray, batch_size: int = 512) -> np.ndarray:
        """Predicted (pick, place) cells (B, 2), in eval mode, in batches; words as ``forward``'s."""
        was_training = self.training
        self.eval()
        out = [self.forward(words[i:i + batch_size], images[i:i + batch_size])[0].argmax(-1)
               for i in range(0, len(words), batch_size)]
        self.train(was_training)
        return np.concatenate(out) if out else np.zeros((0, N_ACTIONS), dtype=np.int64)

    @staticmethod
    def attention_weights(cache: Any) -> list[dict]:
        """One {"self": (B, H, T, T)} per layer; ``layout`` says which tokens are actions, words, patches."""
        return Encoder.attention_weights(cache[2])
