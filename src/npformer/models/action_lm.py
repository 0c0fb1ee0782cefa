"""A policy that acts in tokens: a prefix-LM over an instruction, an image's patches and action tokens.

    seq = words    E_w[ids] * sqrt(E) + P_w[i] + type[word]          (text_dim == 0)
             or    W_t s_i + b_t + type[word]   s_i: a frozen text encoder's state of word piece i
        + patches  W patch + b + P_p[n] + type[patch]                (npformer.nn.patches)
        + actions  E_a[a_j] * sqrt(E) + P_a[j] + type[action]        a_0 = BOS, a_j = the step's token j - 1
    h   = Encoder(seq, prefix-LM mask)
    logits[j] = W_o h[action j] + b_o            over the action_vocab tokens: token j of the step
    goal      = (W_q h[action 0] + b_q) . (W_k h[patch n]) / sqrt(E)   over the N patches (goal_head only)

The mask: the instruction and the patches (the prefix) read each other both ways, as the VLA's
encoder does; action token j reads the whole prefix and action tokens 0..j, as a language model
reads its past. Key k is visible to query q when k is in the prefix or k <= q, and never when it is
a padded word. The prefix never reads an action token, so at inference it is computed once per
step and the action tokens decode over the KV cache (``npformer.decode.action_lm``), one at a time,
as RT-2 emits text.

The goal head (``goal_head``, off by default) is a pointer read out for training only: the first action
slot's state scored against every patch's, as the tabletop policy's pointer, trained toward the patch
the expert is heading for (``loss(..., goals=)``: a cross-entropy beside the action tokens', each goal
one more scored target in the mean). It teaches the policy, early, to find the named block and the
named container in the image; acting never reads it (``forward`` returns the action logits only).

Inputs: ``actions_in`` (B, A) holds BOS (id ``action_vocab``) followed by the step's first A - 1
tokens (teacher forcing), so the embedding table has action_vocab + 1 rows; the targets are the
step's A tokens. Each action slot has its own learned position (``action_len`` slots).

The words come in one of two ways, as in ``models/vla.py``: ``text_dim == 0``, ids into a table learned
from scratch with word positions (``positional``); ``text_dim == S > 0``, a frozen language model's
S-wide states, projected by ``text_proj`` (no positions: the states carry the order), with
``text_dropout`` on the projected features.

Keys: ``word_embed.tok.weight`` and ``word_embed.pos.weight`` (learned positions) or, when text_dim > 0,
``text_proj.{weight,bias}``; ``patch_embed.{weight,bias,pos_embed}``; ``action_embed.tok.weight``
(V_a + 1, E), ``action_embed.pos.weight`` (A_max, E); ``type_embed.weight`` (3, E); ``encoder.*``;
``action_head.{weight,bias}``; with the goal head, ``goal_query.{weight,bias}`` and ``goal_key.weight``.
Dimension legend: B batch, L words, S text-state width, N patches, P = L + N prefix tokens, A action
tokens, T = P + A, E width, V_a action vocabulary.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from ..nn import Dropout, Embedding, Embeddings, Encoder, Linear, Module, add_grads
from ..nn.patches import PatchEmbedding
from .blocks import (
    encoder_stack,
    init_model,
    pointer_backward,
    pointer_forward,
    sequence_loss,
    words_backward,
    words_forward,
)
from .classifier import IGNORE_LABEL
from .config import (
    MAX_PARAMETERS,
    BlockConfig,
    check_bool,
    check_float,
    check_ids,
    check_images,
    check_int,
    check_pad_id,
    check_patch_grid,
    check_rng,
)
from .vla import check_text_states

IGNORE = IGNORE_LABEL              # -100: a target that is not scored (torch's cross-entropy default)
WORD_READS = ("prefix", "self")


@dataclass
class ActionLMConfig(BlockConfig):
    vocab_size: int                # word vocabulary, id pad_id is padding (unused when text_dim > 0)
    max_words: int = 16            # L: instructions are padded to at most this many words (or word pieces)
    image_size: int = 48           # square RGB images, pixels per side
    patch_size: int = 8            # one patch token per P x P pixels
    in_channels: int = 3           # C
    action_vocab: int = 259        # V_a: action tokens (bins + 3 gripper commands); BOS is id V_a
    action_len: int = 3            # A_max: action tokens per step (dx, dy, gripper), one learned position each
    d_model: int = 64              # E: token width
    n_heads: int = 4               # attention heads per layer
    d_ff: int = 128                # feed-forward inner width
    n_layers: int = 3              # encoder layers
    dropout: float = 0.0           # dropout on tokens, attention weights and sub-layer outputs
    activation: str = "gelu"       # feed-forward non-linearity
    norm_first: bool = True        # pre-LN (with a final norm) or post-LN
    positional: str = "learned"    # word positions (text_dim == 0): "learned" or "sinusoidal"
    pad_id: int = 0                # padding word id, masked out as a key
    eps: float = 1e-5              # LayerNorm epsilon
    text_dim: int = 0              # 0: words are ids into a learned table; S > 0: S-wide frozen text states
    text_dropout: float = 0.0      # text_dim > 0: dropout on the projected text features, on top of dropout
    goal_head: bool = False        # a pointer from action slot 0 to the goal patch, trained beside the tokens
    # what an instruction word reads: "prefix" (every word and patch, both ways) or "self" (only itself:
    # each word's state then depends on that word and its place alone, never on the other words; the
    # patches and the action tokens still read every word)
    word_reads: str = "prefix"

    def __post_init__(self) -> None:
        for name in ("vocab_size", "max_words", "image_size", "patch_size", "in_channels", "action_vocab",
                     "action_len", "d_model", "n_heads", "d_ff", "n_layers"):
            check_int(name, getattr(self, name))
        check_int("text_dim", self.text_dim, minimum=0)
        check_float("text_dropout", self.text_dropout, 0.0, 1.0)
        check_bool("goal_head", self.goal_head)
        if self.word_reads not in WORD_READS:
            raise ValueError(f"word_reads must be one of {', '.join(WORD_READS)}, got {self.word_reads!r}")
        if self.text_dropout and not self.text_dim:
            raise ValueError(f"text_dropout ({self.text_dropout}) drops projected text states: it needs text_dim > 0")
        check_patch_grid(self.image_size, self.patch_size)
        self.check_block_fields()            # no final_norm field: a final norm exactly when pre-LN
        check_pad_id(self.pad_id, self.vocab_size)
        if self.positional == "sinusoidal" and self.max_words * self.d_model > MAX_PARAMETERS:
            raise ValueError(f"ActionLMConfig describes a sinusoidal word-position table of {self.max_words:,} x "
                             f"{self.d_model:,} values, more than npformer builds ({MAX_PARAMETERS:,}, 2^31)")

    @property
    def n_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2

    @property
    def bos_id(self) -> int:
        """The id that starts every step's action tokens (one past the action vocabulary)."""
        return self.action_vocab


def prefix_lm_mask(t_prefix: int, n_actions: int, alone: int = 0) -> np.ndarray:
    """(T, T) bool, True where query q may read key k: k in the prefix (k < t_prefix) or k <= q; the
    first ``alone`` queries (the words, with ``word_reads="self"``) read only themselves."""
    t = t_prefix + n_actions
    k = np.arange(t)                                              # (T,)
    rule = (k[None, :] < t_prefix) | (k[None, :] <= k[:, None])   # (T, T)
    rule[:alone] = np.eye(alone, t, dtype=bool)
    return rule


class ActionLM(Module):
    # the config (init_model) and the children (add_module) made in __init__, declared for the type checker
    config: ActionLMConfig
    text_proj: Linear                                # frozen text states only
    text_dropout: Dropout                            # frozen text states only
    word_embed: Embeddings                           # own word table only
    patch_embed: PatchEmbedding
    action_embed: Embeddings
    type_embed: Embedding
    encoder: Encoder
    action_head: Linear
    goal_query: Linear                               # goal head only
    goal_key: Linear                                 # goal head only

    WORD, PATCH, ACTION = 0, 1, 2  # rows of type_embed

    def __init__(self, config: ActionLMConfig, rng: np.random.Generator | int = 0,
                 dtype: DTypeLike = np.float32) -> None:
        c, rng = init_model(self, config, ActionLMConfig, rng)
        if c.text_dim:
            self.add_module("text_proj", Linear(c.text_dim, c.d_model, rng=rng, dtype=dtype))
            # one mask with both rates: a feature survives dropout and text_dropout with (1 - p)(1 - p_t)
            self.add_module("text_dropout", Dropout(1.0 - (1.0 - c.dropout) * (1.0 - c.text_dropout)))
        else:
            self.add_module("word_embed", Embeddings(c.vocab_size, c.d_model, c.max_words, positional=c.positional,
                                                     dropout=c.dropout, rng=rng, dtype=dtype))
        self.add_module("patch_embed", PatchEmbedding(c.image_size, c.patch_size, c.in_channels, c.d_model,
                                                      cls_token=False, positional="learned", dropout=c.dropout,
                                                      rng=rng, dtype=dtype))
        self.add_module("action_embed", Embeddings(c.action_vocab + 1, c.d_model, c.action_len, positional="learned",
                                                   dropout=c.dropout, rng=rng, dtype=dtype))
        self.add_module("type_embed", Embedding(3, c.d_model, rng=rng, dtype=dtype, std=0.02))
        self.add_module("encoder", encoder_stack(c, c.n_layers, rng, dtype))
        self.add_module("action_head", Linear(c.d_model, c.action_vocab, rng=rng, dtype=dtype))
        if c.goal_head:
            self.add_module("goal_query", Linear(c.d_model, c.d_model, rng=rng, dtype=dtype))
            self.add_module("goal_key", Linear(c.d_model, c.d_model, bias=False, rng=rng, dtype=dtype))

    # -- public boundary ------------------------------------------------------------------------
    def layout(self, n_words: int, n_actions: int | None = None) -> dict:
        """Where each kind of token sits in the sequence: name -> slice."""
        p = n_words + self.config.n_patches
        a = self.config.action_len if n_actions is None else n_actions
        return {"words": slice(0, n_words), "patches": slice(n_words, p), "actions": slice(p, p + a)}

    def check_inputs(self, words: ArrayLike, images: ArrayLike, rng: np.random.Generator | None = None
                     ) -> tuple[np.ndarray, np.ndarray]:
        """Validate the words (ids (B, L) in the vocabulary or, when text_dim = S > 0, text states (B, L, S)
        in the model's dtype; L <= max_words), the images ((B, H, W, C) in the model's dtype, finite;
        the task scales pixels to [0, 1]) and the rng. Returns (words, images)."""
        c = self.config
        check_rng(self, rng, max(c.dropout, c.text_dropout))
        if c.text_dim:
            words = check_text_states(words, c.text_dim, c.max_words, self.dtype)
        else:
            words = check_ids(words, "word_ids", c.vocab_size, c.max_words, c.positional)
        images = check_images(images, c.image_size, c.in_channels, self.dtype, batch=len(words),
                              context=f" to go with words {words.shape}")
        return words, images

    def check_actions(self, actions_in: ArrayLike, batch: int, name: str = "actions_in") -> np.ndarray:
        """actions_in (B, A) ints in [0, action_vocab] (BOS included), 1 <= A <= action_len."""
        c = self.config
        actions_in = check_ids(actions_in, name, c.action_vocab + 1, c.action_len, "action-slot")
        if len(actions_in) != batch:
            raise ValueError(f"{name} must have one row per instruction ({batch}), got shape {actions_in.shape}")
        return actions_in

    def word_mask(self, words: np.ndarray) -> np.ndarray:
        """(B, L) bool, True for a real word: an id other than pad_id, or a text state that is not all zeros."""
        return (words != 0).any(axis=-1) if self.config.text_dim else words != self.config.pad_id

    def attention_mask(self, words: np.ndarray, n_actions: int) -> np.ndarray:
        """(B, 1, T, T) bool, True where a query may read a key: the prefix-LM rule (``prefix_lm_mask``),
        and no padded word is read."""
        b, n_words = words.shape[:2]
        p = n_words + self.config.n_patches
        keep = np.ones((b, p + n_actions), dtype=bool)            # (B, T): padded words are not keys
        keep[:, :n_words] = self.word_mask(words)
        alone = self.words_alone(n_words)
        keys = keep[:, None, None, :]                             # (B, 1, 1, T)
        if alone:                                                 # a word alone reads itself, padded or not
            keys = keys | np.eye(p + n_actions, dtype=bool)       # (B, 1, T, T)
        return prefix_lm_mask(p, n_actions, alone)[None, None] & keys   # (B, 1, T, T)

    def words_alone(self, n_words: int) -> int:
        """How many leading queries read only themselves: the words with ``word_reads="self"``, else none."""
        return n_words if self.config.word_reads == "self" else 0

    def forward(self, words: np.ndarray, images: np.ndarray, actions_in: np.ndarray,
                rng: np.random.Generator | None = None) -> tuple[np.ndarray, Any]:
        """words: ids (B, L) int, or text states (B, L, S) when text_dim = S > 0 (padding: rows of zeros);
        images (B, H, W, C) floats in [0, 1]; actions_in (B, A) int, BOS first ->
        (logits (B, A, V_a): each slot's next action token, cache)."""
        words, images = self.check_inputs(words, images, rng)
        actions_in = self.check_actions(actions_in, len(words))
        return self._forward(words, images, actions_in, rng)

    def loss(self, words: np.ndarray, images: np.ndarray, actions_in: np.ndarray, targets: np.ndarray,
             goals: np.ndarray | None = None, label_smoothing: float = 0.0, rng: np.random.Generator | None = None
             ) -> tuple[float, dict[str, np.ndarray]]:
        """Mean cross-entropy over the action tokens (targets (B, A) in [0, V_a), or -100 not scored) and,
        with the goal head, the goals (B,) patch indices in [0, N) (or -100), each goal one more scored
        target; words, images and actions_in as ``forward``'s. Returns (loss, grads)."""
        words, images = self.check_inputs(words, images, rng)
        actions_in = self.check_actions(actions_in, len(words))
        targets = check_ids(targets, "targets", self.config.action_vocab, allow=IGNORE)
        if targets.shape != actions_in.shape:
            raise ValueError(f"targets must have the shape of actions_in {actions_in.shape}, got {targets.shape}")
        if (goals is not None) != self.config.goal_head:
            raise ValueError("goals must be given exactly when the model has a goal head "
                             f"(goal_head={self.config.goal_head}), got {'none' if goals is None else 'goals'}")
        if goals is None:
            logits, cache = self._forward(words, images, actions_in, rng)    # (B, A, V_a)
            loss, dlogits = sequence_loss(logits, targets, IGNORE, label_smoothing, "targets")
            return loss, self.backward(dlogits, cache)[1]
        goals = np.asarray(goals)
        if goals.shape != (len(words),):
            raise ValueError(f"goals must be one patch index per example, shape ({len(words)},), got {goals.shape}")
        goals = check_ids(goals[:, None], "goals", self.config.n_patches, allow=IGNORE)[:, 0]
        (logits, goal_logits), cache = self._forward(words, images, actions_in, rng, goal=True)
        n_a, n_g = int((targets != IGNORE).sum()), int((goals != IGNORE).sum())
        if n_a + n_g == 0:
            raise ValueError("targets and goals hold only ignored positions (ignore index -100): nothing to score")
        n = n_a + n_g                                             # the mean over every scored target
        loss, dlogits, dgoal = 0.0, np.zeros_like(logits), np.zeros_like(goal_logits)
        if n_a:
            loss_a, d = sequence_loss(logits, targets, IGNORE, label_smoothing, "targets")
            loss, dlogits = loss + n_a * loss_a / n, d * logits.dtype.type(n_a / n)
        if n_g:
            loss_g, d = sequence_loss(goal_logits, goals, IGNORE, label_smoothing, "goals")
            loss, dgoal = loss + n_g * loss_g / n, d * goal_logits.dtype.type(n_g / n)
        return loss, self.backward(dlogits, cache, dgoal)[1]

    # -- passes ---------------------------------------------------------------------------------
    def embed_prefix(self, words: np.ndarray, images: np.ndarray, rng: np.random.Generator | None = None
                     ) -> tuple[np.ndarray, Any]:
        """The prefix tokens: words then patches, each with its type, (B, P, E), and the cache."""
        tw = self.type_embed.params["weight"]                     # (3, E)
        xw, c_w = words_forward(self, words, rng)                 # (B, L, E)
        xp, c_p = self.patch_embed.forward(images, rng)           # (B, N, E)
        return np.concatenate([xw + tw[self.WORD], xp + tw[self.PATCH]], axis=1), (c_w, c_p)   # (B, P, E)

    def embed_actions(self, actions_in: np.ndarray, offset: int = 0, rng: np.random.Generator | None = None
                      ) -> tuple[np.ndarray, Any]:
        """Action tokens at slots offset.. (B, t, E) with their type, and the cache."""
        xa, c_a = self.action_embed.forward(actions_in, rng, offset=offset)   # (B, t, E)
        return xa + self.type_embed.params["weight"][self.ACTION], c_a

    def project_output(self, h: np.ndarray) -> tuple[np.ndarray, Any]:
        """The action head: h (..., E) of action positions -> (logits (..., V_a), cache)."""
        return self.action_head.forward(h)

    def goal_forward(self, h: np.ndarray, n_words: int) -> tuple[np.ndarray, Any]:
        """The goal head: the encoder's output h (B, T, E) -> (logits (B, N) over the patches, cache)."""
        lay = self.layout(n_words)
        query, c_q = self.goal_query.forward(h[:, lay["actions"].start])     # (B, E)
        keys, c_k = self.goal_key.forward(h[:, lay["patches"]])              # (B, N, E)
        logits, c_ptr = pointer_forward(query[:, None], keys)                # (B, 1, N)
        return logits[:, 0], (c_q, c_k, c_ptr)

    def goal_backward(self, dgoal: np.ndarray, cache: Any, dh: np.ndarray, n_words: int, grads: dict) -> None:
        """Adds the goal head's gradient, dgoal (B, N), into dh (B, T, E) and its parameters' into grads."""
        c_q, c_k, c_ptr = cache
        lay = self.layout(n_words)
        dquery, dkeys = pointer_backward(dgoal[:, None], c_ptr)              # (B, 1, E), (B, N, E)
        dq, g = self.goal_query.backward(dquery[:, 0], c_q)                  # (B, E)
        dh[:, lay["actions"].start] += dq
        add_grads(grads, g, "goal_query")
        dk, g = self.goal_key.backward(dkeys, c_k)                           # (B, N, E)
        dh[:, lay["patches"]] += dk
        add_grads(grads, g, "goal_key")

    def _forward(self, words: np.ndarray, images: np.ndarray, actions_in: np.ndarray,
                 rng: np.random.Generator | None, goal: bool = False) -> tuple[Any, Any]:
        """(logits, cache), or with ``goal`` ((logits, goal logits (B, N)), cache)."""
        n_words = words.shape[1]
        xp, c_prefix = self.embed_prefix(words, images, rng)      # (B, P, E)
        xa, c_a = self.embed_actions(actions_in, 0, rng)          # (B, A, E)
        x = np.concatenate([xp, xa], axis=1)                      # (B, T, E)
        mask = self.attention_mask(words, xa.shape[1])            # (B, 1, T, T)
        h, c_enc = self.encoder.forward(x, mask=mask, rng=rng)    # (B, T, E)
        logits, c_out = self.project_output(h[:, xp.shape[1]:])   # (B, A, V_a)
        if not goal:
            return logits, (c_prefix, c_a, c_enc, c_out, None, h.shape, n_words)
        goal_logits, c_goal = self.goal_forward(h, n_words)       # (B, N)
        return (logits, goal_logits), (c_prefix, c_a, c_enc, c_out, c_goal, h.shape, n_words)

    def backward(self, dlogits: np.ndarray, cache: Any, dgoal: np.ndarray | None = None
                 ) -> tuple[Any, dict[str, np.ndarray]]:
        """dlogits (B, A, V_a) and, when the forward computed the goal head, dgoal (B, N) -> (dinputs, grads),
        grads one per state_dict key. dinputs: {"images": d loss / d images (B, H, W, C)} and, when
        text_dim > 0, "words": d loss / d text states (B, L, S)."""
        (c_w, c_p), c_a, c_enc, c_out, c_goal, h_shape, n_words = cache
        if (dgoal is None) != (c_goal is None):
            raise ValueError("dgoal must be given exactly when the forward computed the goal head")
        lay = self.layout(n_words, dlogits.shape[1])
        grads: dict = {}
        dh = np.zeros(h_shape, dtype=dlogits.dtype)               # (B, T, E): only action positions are read
        dh[:, lay["actions"]], g = self.action_head.backward(dlogits, c_out)
        add_grads(grads, g, "action_head")
        if dgoal is not None:
            self.goal_backward(dgoal, c_goal, dh, n_words, grads)
        dx, g = self.encoder.backward(dh, c_enc)                  # (B, T, E)
        add_grads(grads, g, "encoder")
        dxw, dxp, dxa = dx[:, lay["words"]], dx[:, lay["patches"]], dx[:, lay["actions"]]
        dtype_w = np.zeros_like(self.type_embed.params["weight"])  # (3, E)
        dtype_w[self.WORD] = dxw.sum(axis=(0, 1))
        dtype_w[self.PATCH] = dxp.sum(axis=(0, 1))
        dtype_w[self.ACTION] = dxa.sum(axis=(0, 1))
        grads["type_embed.weight"] = dtype_w
        _, g = self.action_embed.backward(dxa, c_a)
        add_grads(grads, g, "action_embed")
        dwords = words_backward(self, dxw, c_w, grads)
        dimages, g = self.patch_embed.backward(dxp, c_p)          # (B, H, W, C)
        add_grads(grads, g, "patch_embed")
        return ({"images": dimages} if dwords is None else {"images": dimages, "words": dwords}), grads

    @staticmethod
    def attention_weights(cache: Any) -> list[dict]:
        """One {"self": (B, H, T, T)} per layer; ``layout`` says which tokens are words, patches, actions."""
        return Encoder.attention_weights(cache[2])
