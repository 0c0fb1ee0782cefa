"""PyTorch twins of npformer's full models, built by ``npformer.to_torch(model)``.

Each is a plain ``torch.nn.Module`` made of torch's own parts (``nn.Embedding``,
``nn.TransformerEncoder``/``nn.TransformerDecoder``, ``nn.Linear``) that computes what the
npformer model computes, with the same state-dict keys (the FFN aside: torch ``linear1``,
npformer ``ffn.linear1``):

    x      = dropout(tok[ids] * sqrt(d_model) + positions)   sinusoidal buffer or learned table
    logits = x ... stacks ... @ tok.weight^T                 tied output (paper 3.4), or a Linear

Masks come from ``pad_id`` exactly as in npformer (padding hidden as keys, causal decoder). The ViT's
patch embedding is torch's ``conv2d`` with kernel and stride P, which npformer's patch projection equals.
The VLA policy's twin builds the same [PICK, PLACE] + words + patches sequence and pointer head; the
ActionLM's, the same words + patches + action tokens with the prefix-LM mask.
This file imports torch at the top; only ``to_torch`` imports it, so ``import npformer`` does not.

Dimension legend: B batch, S source positions, T target positions, E model width, V vocabulary;
H/W/C image, P patch size, N patches, K classes.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..nn import Embeddings


class TorchEmbeddings(nn.Module):
    """tok(ids) * sqrt(d_model) + positions, then dropout; keys ``tok.weight`` (+ ``pos.weight``)."""

    def __init__(self, np_embed: Embeddings, dtype: torch.dtype) -> None:
        super().__init__()
        e = np_embed.d_model
        self.d_model, self.max_len, self.positional = e, np_embed.max_len, np_embed.positional
        self.scale = float(np_embed.scale)
        self.tok = nn.Embedding(np_embed.vocab_size, e, dtype=dtype)
        if self.positional == "learned":
            self.pos = nn.Embedding(self.max_len, e, dtype=dtype)
        else:   # the same fixed table npformer adds; not a parameter, not in the state dict
            pe = np_embed.positions(self.max_len, 0, np_embed.tok.params["weight"].dtype)  # (max_len, E)
            self.register_buffer("pe", torch.from_numpy(np.array(pe)), persistent=False)
        self.dropout = nn.Dropout(np_embed.dropout.p)

    def forward(self, ids: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """ids (B, T) long -> (B, T, E)."""
        t = ids.shape[-1]
        if offset + t > self.max_len:
            raise ValueError(f"sequence of length {offset + t} is longer than max_len {self.max_len}")
        pos = self.pos.weight[offset:offset + t] if self.positional == "learned" else self.pe[offset:offset + t]
        return self.dropout(self.tok(ids) * self.scale + pos)                # (B, T, E)


def _padding(ids: torch.Tensor, pad_id: int):
    """torch's key padding mask (True = padding), or None when the model has no pad token."""
    return (ids == pad_id) if pad_id >= 0 else None                          # (B, T)


def _add_word_path(module: nn.Module, model, dtype: torch.dtype) -> None:
    """The instruction's word path of a policy (VLA, ActionLM), as models.blocks.words_forward reads it: a
    word table over ids, or frozen text states (text_dim = S) projected, with their dropout."""
    c = model.config
    if c.text_dim:
        module.text_proj = nn.Linear(c.text_dim, c.d_model, dtype=dtype)
        module.text_dropout = nn.Dropout(model.text_dropout.p)           # dropout and text_dropout in one
    else:
        module.word_embed = TorchEmbeddings(model.word_embed, dtype)


def _word_tokens(module: nn.Module, words: torch.Tensor):
    """(word tokens (B, L, E), real (B, L) bool): ids through the table (padding is pad_id), or text states
    projected (padding is an all-zero state)."""
    if module.config.text_dim:
        return module.text_dropout(module.text_proj(words)), (words != 0).any(dim=-1)
    return module.word_embed(words), words != module.config.pad_id


def _causal(t: int, device) -> torch.Tensor:
    """torch's boolean causal mask, True above the diagonal = not allowed."""
    return torch.triu(torch.ones(t, t, dtype=torch.bool, device=device), diagonal=1)  # (T, T)


class NormOnly(nn.Module):
    """An encoder of zero layers: only its final LayerNorm (key ``norm.*``), or the identity."""

    def __init__(self, norm: nn.LayerNorm | None) -> None:
        super().__init__()
        self.norm = norm

    def forward(self, x: torch.Tensor, src_key_padding_mask=None) -> torch.Tensor:
        return x if self.norm is None else self.norm(x)


class TorchTransformer(nn.Module):
    """npformer's ``Transformer`` (encoder-decoder) in torch: forward(src_ids, tgt_ids) -> logits."""

    def __init__(self, model, encoder: nn.TransformerEncoder | NormOnly, decoder: nn.TransformerDecoder,
                 dtype: torch.dtype) -> None:
        super().__init__()
        c = self.config = model.config
        if c.share_embeddings:
            self.embed = TorchEmbeddings(model.embed, dtype)
        else:
            self.src_embed = TorchEmbeddings(model.src_embed, dtype)
            self.tgt_embed = TorchEmbeddings(model.tgt_embed, dtype)
        self.encoder, self.decoder = encoder, decoder
        if not c.tie_output:
            self.generator = nn.Linear(c.d_model, c.tgt_vocab_size, dtype=dtype)

    def src_embedding(self) -> TorchEmbeddings:
        return self.embed if self.config.share_embeddings else self.src_embed

    def tgt_embedding(self) -> TorchEmbeddings:
        return self.embed if self.config.share_embeddings else self.tgt_embed

    def encode(self, src_ids: torch.Tensor) -> torch.Tensor:
        """src_ids (B, S) -> memory (B, S, E)."""
        x = self.src_embedding()(src_ids)                                    # (B, S, E)
        return self.encoder(x, src_key_padding_mask=_padding(src_ids, self.config.pad_id))

    def forward(self, src_ids: torch.Tensor, tgt_ids: torch.Tensor) -> torch.Tensor:
        """src_ids (B, S), tgt_ids (B, T) long -> logits (B, T, V)."""
        if src_ids.shape[0] != tgt_ids.shape[0]:
            raise ValueError(f"src_ids and tgt_ids must have the same batch size, got {tuple(src_ids.shape)} "
                             f"and {tuple(tgt_ids.shape)}")
        memory = self.encode(src_ids)                                        # (B, S, E)
        y = self.tgt_embedding()(tgt_ids)                                    # (B, T, E)
        h = self.decoder(y, memory, tgt_mask=_causal(tgt_ids.shape[1], y.device),
                         tgt_key_padding_mask=_padding(tgt_ids, self.config.pad_id),
                         memory_key_padding_mask=_padding(src_ids, self.config.pad_id),
                         tgt_is_causal=True)                                 # (B, T, E)
        if self.config.tie_output:
            return F.linear(h, self.tgt_embedding().tok.weight)              # (B, T, V) = h E^T
        return self.generator(h)                                             # (B, T, V)


class TorchDecoderLM(nn.Module):
    """npformer's ``DecoderLM`` in torch: forward(ids) -> next-token logits (B, T, V)."""

    def __init__(self, model, blocks: nn.TransformerEncoder, dtype: torch.dtype) -> None:
        super().__init__()
        c = self.config = model.config
        self.embed = TorchEmbeddings(model.embed, dtype)
        self.blocks = blocks
        if not c.tie_output:
            self.generator = nn.Linear(c.d_model, c.vocab_size, dtype=dtype)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)                                                  # (B, T, E)
        h = self.blocks(x, mask=_causal(ids.shape[1], x.device),
                        src_key_padding_mask=_padding(ids, self.config.pad_id), is_causal=True)
        if self.config.tie_output:
            return F.linear(h, self.embed.tok.weight)                        # (B, T, V)
        return self.generator(h)


class TorchEncoderClassifier(nn.Module):
    """npformer's ``EncoderClassifier`` in torch: forward(ids) -> (B, C) or, tagging, (B, T, C)."""

    def __init__(self, model, encoder: nn.TransformerEncoder, dtype: torch.dtype) -> None:
        super().__init__()
        c = self.config = model.config
        self.embed = TorchEmbeddings(model.embed, dtype)
        self.encoder = encoder
        self.head = nn.Linear(c.d_model, c.n_classes, dtype=dtype)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        c = self.config
        pad = _padding(ids, c.pad_id)                                        # (B, T) or None
        h = self.encoder(self.embed(ids), src_key_padding_mask=pad)          # (B, T, E)
        if c.head == "tagging":
            pooled = h                                                       # (B, T, E)
        elif c.pool == "cls":
            pooled = h[:, 0]                                                 # (B, E)
        else:                                                                # mean over real tokens
            real = torch.ones_like(ids, dtype=torch.bool) if pad is None else ~pad
            weights = real.to(h.dtype) / real.sum(dim=1, keepdim=True).clamp(min=1).to(h.dtype)  # (B, T)
            pooled = torch.einsum("bt,bte->be", weights, h)                  # (B, E)
        return self.head(pooled)


class TorchPatchEmbedding(nn.Module):
    """npformer's ``PatchEmbedding``: images (B, H, W, C) -> tokens (B, T, E); keys ``weight`` (E, C, P, P),
    ``bias``, ``cls_token`` (with [CLS]) and ``pos_embed`` (learned positions)."""

    def __init__(self, np_patch, dtype: torch.dtype) -> None:
        super().__init__()
        e, c, p = np_patch.d_model, np_patch.in_channels, np_patch.patch_size
        self.patch_size, self.learned = p, np_patch.positional == "learned"
        self.weight = nn.Parameter(torch.zeros(e, c, p, p, dtype=dtype))
        self.bias = nn.Parameter(torch.zeros(e, dtype=dtype))
        self.cls_token = nn.Parameter(torch.zeros(1, 1, e, dtype=dtype)) if np_patch.has_cls else None
        if self.learned:
            self.pos_embed = nn.Parameter(torch.zeros(1, np_patch.n_tokens, e, dtype=dtype))
        else:   # fixed 2-D sinusoids (or none): not a parameter, not in the state dict
            pe = np_patch.positions(np_patch.params["weight"].dtype)                # (1, T, E)
            self.register_buffer("pe", torch.from_numpy(np.array(pe)), persistent=False)
        self.dropout = nn.Dropout(np_patch.dropout.p)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        z = F.conv2d(images.permute(0, 3, 1, 2), self.weight, self.bias, stride=self.patch_size)  # (B, E, H/P, W/P)
        z = z.flatten(2).transpose(1, 2)                                     # (B, N, E), row-major over the grid
        if self.cls_token is not None:
            z = torch.cat([self.cls_token.expand(z.shape[0], -1, -1), z], dim=1)   # (B, T, E)
        return self.dropout(z + (self.pos_embed if self.learned else self.pe))     # (B, T, E)


class TorchViT(nn.Module):
    """npformer's ``ViT`` in torch: forward(images (B, H, W, C)) -> class logits (B, K)."""

    def __init__(self, model, encoder: nn.TransformerEncoder, dtype: torch.dtype) -> None:
        super().__init__()
        self.config = model.config
        self.patch_embed, self.encoder = TorchPatchEmbedding(model.patch_embed, dtype), encoder
        self.head = nn.Linear(model.config.d_model, model.config.n_classes, dtype=dtype)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        h = self.encoder(self.patch_embed(images))                           # (B, T, E)
        return self.head(h[:, 0] if self.config.pool == "cls" else h.mean(dim=1))   # (B, K)


class TorchVLA(nn.Module):
    """npformer's ``VLA`` policy in torch: forward(words, images (B, H, W, C)) -> (pick, place) logits
    over the cells (B, 2, N). words: ids (B, L) long, or frozen text states (B, L, S) when text_dim = S.
    The sequence is [PICK, PLACE] + words + patches, each with its type embedding; padded words
    (pad_id, or all-zero states) are hidden as keys; the pointer head scores each action token's
    query against every cell's key, scaled by 1/sqrt(E)."""

    def __init__(self, model, encoder: nn.TransformerEncoder, dtype: torch.dtype) -> None:
        super().__init__()
        c = self.config = model.config
        self.action_queries = nn.Parameter(torch.zeros(1, 2, c.d_model, dtype=dtype))
        _add_word_path(self, model, dtype)
        self.patch_embed = TorchPatchEmbedding(model.patch_embed, dtype)
        self.type_embed = nn.Embedding(2, c.d_model, dtype=dtype)           # rows: word, patch
        self.encoder = encoder
        out = c.d_model if c.head == "pointer" else c.n_cells
        self.pick_head = nn.Linear(c.d_model, out, dtype=dtype)
        self.place_head = nn.Linear(c.d_model, out, dtype=dtype)
        if c.head == "pointer":
            self.cell_key = nn.Linear(c.d_model, c.d_model, bias=False, dtype=dtype)

    def forward(self, words: torch.Tensor, images: torch.Tensor) -> torch.Tensor:
        c = self.config
        b, n_words = words.shape[:2]
        xw, real = _word_tokens(self, words)                                 # (B, L, E), (B, L)
        tw = self.type_embed.weight                                          # (2, E)
        x = torch.cat([self.action_queries.expand(b, -1, -1), xw + tw[0], self.patch_embed(images) + tw[1]],
                      dim=1)                                                 # (B, T, E)
        pad = torch.zeros(b, x.shape[1], dtype=torch.bool, device=x.device)  # (B, T)
        pad[:, 2:2 + n_words] = ~real
        h = self.encoder(x, src_key_padding_mask=pad)                        # (B, T, E)
        heads = torch.stack([self.pick_head(h[:, 0]), self.place_head(h[:, 1])], dim=1)  # (B, 2, E or N)
        if c.head != "pointer":
            return heads                                                     # (B, 2, N)
        keys = self.cell_key(h[:, 2 + n_words:])                             # (B, N, E)
        return heads @ keys.transpose(1, 2) * c.d_model ** -0.5             # (B, 2, N)


class TorchActionLM(nn.Module):
    """npformer's ``ActionLM`` in torch: forward(words, images (B, H, W, C), actions_in (B, A)) -> the action
    slots' logits (B, A, V_a). words: ids (B, L) long, or frozen text states (B, L, S) when text_dim = S.
    The sequence is words + patches + action tokens, each with its type embedding; the mask lets the
    prefix (words, patches) read itself both ways and action token j read the prefix and tokens 0..j;
    padded words are hidden as keys."""

    def __init__(self, model, encoder: nn.TransformerEncoder, dtype: torch.dtype) -> None:
        super().__init__()
        c = self.config = model.config
        _add_word_path(self, model, dtype)
        self.patch_embed = TorchPatchEmbedding(model.patch_embed, dtype)
        self.action_embed = TorchEmbeddings(model.action_embed, dtype)
        self.type_embed = nn.Embedding(3, c.d_model, dtype=dtype)           # rows: word, patch, action
        self.encoder = encoder
        self.action_head = nn.Linear(c.d_model, c.action_vocab, dtype=dtype)
        if c.goal_head:
            self.goal_query = nn.Linear(c.d_model, c.d_model, dtype=dtype)
            self.goal_key = nn.Linear(c.d_model, c.d_model, bias=False, dtype=dtype)

    def hidden(self, words: torch.Tensor, images: torch.Tensor, actions_in: torch.Tensor) -> torch.Tensor:
        """The encoder's output over the whole sequence, (B, T, E): words, then patches, then action tokens."""
        b, n_words = words.shape[:2]
        xw, real = _word_tokens(self, words)                                 # (B, L, E), (B, L)
        tw = self.type_embed.weight                                          # (3, E)
        prefix = torch.cat([xw + tw[0], self.patch_embed(images) + tw[1]], dim=1)   # (B, P, E)
        x = torch.cat([prefix, self.action_embed(actions_in) + tw[2]], dim=1)       # (B, T, E)
        p, t = prefix.shape[1], x.shape[1]
        k = torch.arange(t, device=x.device)
        blocked = ~((k[None, :] < p) | (k[None, :] <= k[:, None]))          # (T, T), True = may not attend
        pad = torch.zeros(b, t, dtype=torch.bool, device=x.device)           # (B, T)
        pad[:, :n_words] = ~real
        if self.config.word_reads == "self":                                 # each word reads only itself,
            alone = k[None, :] == k[:, None]                                 # padded or not: no empty row
            blocked[:n_words] = ~alone[:n_words]
            full = blocked[None] | (pad[:, None, :] & ~alone)                # (B, T, T)
            return self.encoder(x, mask=full.repeat_interleave(self.config.n_heads, 0))   # (B H, T, T)
        return self.encoder(x, mask=blocked, src_key_padding_mask=pad)       # (B, T, E)

    def forward(self, words: torch.Tensor, images: torch.Tensor, actions_in: torch.Tensor, goal: bool = False):
        """The action logits (B, A, V_a), or with ``goal`` (those, the goal head's logits (B, N))."""
        h = self.hidden(words, images, actions_in)                           # (B, T, E)
        p = h.shape[1] - actions_in.shape[1]                                 # the prefix: words, patches
        logits = self.action_head(h[:, p:])                                  # (B, A, V_a)
        if not goal:
            return logits
        query = self.goal_query(h[:, p])                                     # (B, E)
        keys = self.goal_key(h[:, words.shape[1]:p])                         # (B, N, E)
        return logits, (keys @ query[:, :, None])[:, :, 0] * self.config.d_model ** -0.5   # (B, N)


def model_to_torch(model, stack_to_torch, torch_dtype, load) -> nn.Module:
    """The torch twin of an npformer Transformer, DecoderLM, EncoderClassifier, ViT, VLA or ActionLM, weights
    copied. ``stack_to_torch``, ``torch_dtype`` and ``load`` are interop.torch's converters."""
    from ..models import DecoderLM, EncoderClassifier, Transformer
    from ..models.action_lm import ActionLM
    from ..models.vit import ViT
    from ..models.vla import VLA

    if not isinstance(model, (Transformer, DecoderLM, EncoderClassifier, ViT, VLA, ActionLM)):
        raise TypeError("to_torch accepts npformer's MultiHeadAttention, EncoderLayer, DecoderLayer, Encoder, "
                        "Decoder, TransformerStack, LayerNorm, Transformer, DecoderLM, EncoderClassifier, ViT, "
                        f"VLA and ActionLM, got {type(model).__module__}.{type(model).__name__}")
    dtype = torch_dtype(model)
    if isinstance(model, Transformer):
        if len(model.encoder.layers):
            enc = stack_to_torch(model.encoder, False)
        else:
            norm = model.encoder.norm
            enc = NormOnly(None if norm is None else nn.LayerNorm(norm.params["weight"].shape[0], eps=norm.eps,
                                                                  dtype=dtype))
        out = TorchTransformer(model, enc, stack_to_torch(model.decoder, True), dtype)
    elif isinstance(model, DecoderLM):
        out = TorchDecoderLM(model, stack_to_torch(model.blocks, False), dtype)
    elif isinstance(model, ViT):
        out = TorchViT(model, stack_to_torch(model.encoder, False), dtype)
    elif isinstance(model, VLA):
        out = TorchVLA(model, stack_to_torch(model.encoder, False), dtype)
    elif isinstance(model, ActionLM):
        out = TorchActionLM(model, stack_to_torch(model.encoder, False), dtype)
    else:
        out = TorchEncoderClassifier(model, stack_to_torch(model.encoder, False), dtype)
    load(out, model)
    return out


__all__ = ["NormOnly", "TorchActionLM", "TorchDecoderLM", "TorchEmbeddings", "TorchEncoderClassifier",
           "TorchPatchEmbedding", "TorchTransformer", "TorchViT", "TorchVLA", "model_to_torch"]
