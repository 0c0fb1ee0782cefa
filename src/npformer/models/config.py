"""The shared base of every model config: a dataclass that saves and loads as JSON,
with small helpers that check invariants up front and name the offending values.

A config subclass is a ``@dataclass`` whose fields are plain JSON values (ints,
floats, strings, bools, None) and whose ``__post_init__`` calls the checks below.

A config decides how much memory its model takes, so its size is checked before any array is
made: ``param_count(config)`` counts the parameters from the fields alone, and a config over
``MAX_PARAMETERS`` (2^31, 8 GiB of float32), over ``MAX_LAYERS`` layers in a stack, or whose
sinusoidal position table is as absurd, is refused when it is made (``BlockConfig.check_block_fields``).
"""
from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from ..settings import quoted, read_json

if TYPE_CHECKING:
    from ..nn import Module

MAX_PARAMETERS = 2 ** 31            # parameters (and values of a position table) a config may describe
MAX_LAYERS = 1024                   # layers in one stack: each is a dozen arrays and Python objects


CfgT = TypeVar("CfgT", bound="Config")

class Config:
    """Mixin for dataclass configs: ``to_dict``/``from_dict`` and ``save_json``/``load_json``."""

    __dataclass_fields__: ClassVar[dict[str, Any]]   # set by @dataclass on every subclass

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls: type[CfgT], d: dict) -> CfgT:
        if not isinstance(d, dict):
            raise TypeError(f"{cls.__name__}.from_dict expects a dict, got {type(d).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"{cls.__name__} has no fields {unknown}; known fields: {sorted(names)}")
        return cls(**d)

    def save_json(self, path: str | os.PathLike) -> None:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_dict(), f, indent=2)
            f.write("\n")

    @classmethod
    def load_json(cls: type[CfgT], path: str | os.PathLike) -> CfgT:
        return cls.from_dict(read_json(path, top=dict))


class BlockConfig(Config):
    """Mixin for configs of models built from transformer blocks: the fields they all have
    (d_model, n_heads, dropout, eps, activation, norm_first) and, where the dataclass has them,
    positional and final_norm, are checked in one place, and the final norm's default is derived here.
    Last, the model's size (``check_size``): every config calls this after checking its int fields."""

    # the fields every block config has (its dataclass defines them); declared here for the checks below
    d_model: int
    n_heads: int
    d_ff: int
    dropout: float
    eps: float
    activation: str
    norm_first: bool

    def check_block_fields(self) -> None:
        check_heads(self.d_model, self.n_heads)
        check_float("dropout", self.dropout, 0.0, 1.0)
        check_float("eps", self.eps, 0.0, 1.0, low_inclusive=False)
        if hasattr(self, "positional"):
            check_choice("positional", self.positional, ("sinusoidal", "learned"))
        check_choice("activation", self.activation, ("relu", "gelu", "gelu_tanh"))
        check_bool("norm_first", self.norm_first)
        check_bool("final_norm", getattr(self, "final_norm", None), allow_none=True)
        check_size(self)

    @property
    def use_final_norm(self) -> bool:
        """final_norm, or by default (and in configs without the field) a final norm exactly when
        the blocks are pre-LN."""
        final_norm = getattr(self, "final_norm", None)
        return self.norm_first if final_norm is None else final_norm


# -- the size a config describes, counted before anything is built ------------------------------
# Each model's count is its __init__ read as arithmetic; tests/test_fuzz_loaders.py checks every one
# against the built model's num_parameters() over many configs.

def _stack(c: Any, n_layers: int, cross: bool) -> int:
    """Parameters of n encoder layers (decoder layers with ``cross``) and the stack's final norm."""
    e, f = c.d_model, c.d_ff
    attention = 4 * e * e + 4 * e               # in_proj (3E, E) + (3E,), out_proj (E, E) + (E,)
    layer = attention + (2 * e * f + f + e) + 2 * 2 * e   # + FFN linear1 (F, E) + (F,), linear2 (E, F) + (E,); 2 norms
    if cross:
        layer += attention + 2 * e              # multihead_attn and norm3
    return n_layers * layer + (2 * e if c.use_final_norm else 0)


def _linear(n_in: int, n_out: int, bias: bool = True) -> int:
    return n_in * n_out + (n_out if bias else 0)


def _tokens(c: Any, vocab_size: int, max_len: int, positional: str) -> int:
    """nn.Embeddings: the token table, and the position table when positions are learned."""
    return vocab_size * c.d_model + (max_len * c.d_model if positional == "learned" else 0)


def _patches(c: Any, cls_token: bool, positional: str) -> int:
    """nn.PatchEmbedding: the patch projection (a conv's weight and bias), [CLS], learned positions."""
    e, n_tokens = c.d_model, (c.image_size // c.patch_size) ** 2 + int(cls_token)
    return (e * c.in_channels * c.patch_size ** 2 + e + (e if cls_token else 0)
            + (n_tokens * e if positional == "learned" else 0))


def _transformer(c: Any) -> int:
    tables = _tokens(c, c.src_vocab_size, c.max_len, c.positional)
    if not c.share_embeddings:
        tables += _tokens(c, c.tgt_vocab_size, c.max_len, c.positional)
    return (tables + _stack(c, c.n_encoder_layers, False) + _stack(c, c.n_decoder_layers, True)
            + (0 if c.tie_output else _linear(c.d_model, c.tgt_vocab_size)))


def _decoder_lm(c: Any) -> int:
    return (_tokens(c, c.vocab_size, c.max_len, c.positional) + _stack(c, c.n_layers, False)
            + (0 if c.tie_output else _linear(c.d_model, c.vocab_size)))


def _classifier(c: Any) -> int:
    return (_tokens(c, c.vocab_size, c.max_len, c.positional) + _stack(c, c.n_layers, False)
            + _linear(c.d_model, c.n_classes))


def _vit(c: Any) -> int:
    return _patches(c, c.pool == "cls", c.positional) + _stack(c, c.n_layers, False) + _linear(c.d_model, c.n_classes)


def _vla(c: Any) -> int:
    e = c.d_model
    words = _linear(c.text_dim, e) if c.text_dim else _tokens(c, c.vocab_size, c.max_words, "learned")
    out = e if c.head == "pointer" else (c.image_size // c.patch_size) ** 2
    return (2 * e + words + _patches(c, False, "learned") + 2 * e       # action queries (pick, place), type table
            + _stack(c, c.n_layers, False) + 2 * _linear(e, out) + (e * e if c.head == "pointer" else 0))


def _action_lm(c: Any) -> int:
    e = c.d_model
    words = _linear(c.text_dim, e) if c.text_dim else _tokens(c, c.vocab_size, c.max_words, c.positional)
    actions = _tokens(c, c.action_vocab + 1, c.action_len, "learned")      # BOS row, a position per slot
    return (words + _patches(c, False, "learned") + actions + 3 * e       # type table: word, patch, action
            + _stack(c, c.n_layers, False) + _linear(e, c.action_vocab)
            + (_linear(e, e) + e * e if c.goal_head else 0))                # goal query (with bias), key


_COUNTS = {"TransformerConfig": _transformer, "DecoderLMConfig": _decoder_lm, "EncoderClassifierConfig": _classifier,
           "ViTConfig": _vit, "VLAConfig": _vla, "ActionLMConfig": _action_lm}


def param_count(config: object) -> int | None:
    """The number of parameters the model of ``config`` has, from the fields alone (no array is made);
    None for a config class npformer does not know (a model kind registered by someone else)."""
    count = _COUNTS.get(type(config).__name__)
    return None if count is None else count(config)


def _stack_row(name: str, c: Any, n_layers: int, cross: bool) -> tuple[str, int, str]:
    """A stack's row of ``components``: its count, and "N layers x per layer [+ final norm]"."""
    total = _stack(c, n_layers, cross)
    norm = 2 * c.d_model if c.use_final_norm else 0
    note = ""
    if n_layers:
        note = f"{n_layers} layers x {(total - norm) // n_layers:,}" + (f" + final norm {norm:,}" if norm else "")
    return name, total, note


def _tied(table: str) -> tuple[str, int, str]:
    return "output projection", 0, f"tied to {table}.tok.weight (paper 3.4)"


def _transformer_rows(c: Any) -> list[tuple[str, int, str]]:
    src = _tokens(c, c.src_vocab_size, c.max_len, c.positional)
    rows = ([("embed", src, "shared by source and target")] if c.share_embeddings
            else [("src_embed", src, ""), ("tgt_embed", _tokens(c, c.tgt_vocab_size, c.max_len, c.positional), "")])
    rows += [_stack_row("encoder", c, c.n_encoder_layers, False), _stack_row("decoder", c, c.n_decoder_layers, True)]
    if c.tie_output:
        return rows + [_tied("embed" if c.share_embeddings else "tgt_embed")]
    return rows + [("generator", _linear(c.d_model, c.tgt_vocab_size), "")]


def _decoder_lm_rows(c: Any) -> list[tuple[str, int, str]]:
    rows = [("embed", _tokens(c, c.vocab_size, c.max_len, c.positional), ""),
            _stack_row("blocks", c, c.n_layers, False)]
    return rows + [_tied("embed") if c.tie_output else ("generator", _linear(c.d_model, c.vocab_size), "")]


def _classifier_rows(c: Any) -> list[tuple[str, int, str]]:
    return [("embed", _tokens(c, c.vocab_size, c.max_len, c.positional), ""),
            _stack_row("encoder", c, c.n_layers, False), ("head", _linear(c.d_model, c.n_classes), "")]


def _vit_rows(c: Any) -> list[tuple[str, int, str]]:
    return [("patch_embed", _patches(c, c.pool == "cls", c.positional), ""),
            _stack_row("encoder", c, c.n_layers, False), ("head", _linear(c.d_model, c.n_classes), "")]


def _vla_rows(c: Any) -> list[tuple[str, int, str]]:
    e = c.d_model
    out = e if c.head == "pointer" else (c.image_size // c.patch_size) ** 2
    words = ([("text_proj", _linear(c.text_dim, e), ""), ("text_dropout", 0, "")] if c.text_dim
             else [("word_embed", _tokens(c, c.vocab_size, c.max_words, "learned"), "")])
    rows = words + [("patch_embed", _patches(c, False, "learned"), ""), ("type_embed", 2 * e, ""),
                    _stack_row("encoder", c, c.n_layers, False),
                    ("pick_head", _linear(e, out), ""), ("place_head", _linear(e, out), "")]
    return rows + ([("cell_key", e * e, "")] if c.head == "pointer" else [])


_ROWS = {"TransformerConfig": _transformer_rows, "DecoderLMConfig": _decoder_lm_rows,
         "EncoderClassifierConfig": _classifier_rows, "ViTConfig": _vit_rows, "VLAConfig": _vla_rows}


def components(config: object) -> list[tuple[str, int, str]] | None:
    """(name, parameters, note) of each top-level child of the model of ``config``, in the model's order,
    from the fields alone (``npformer info``); None for a config class npformer does not know. A tied
    output projection is a row of 0 parameters; a model's own parameters (VLA's action queries) are in
    ``param_count`` but in no row."""
    rows = _ROWS.get(type(config).__name__)
    return None if rows is None else rows(config)


def check_size(config: Any) -> None:
    """ValueError naming the config when its model would be absurd: more than MAX_LAYERS layers in a
    stack, more than MAX_PARAMETERS parameters, or a sinusoidal position table of more values."""
    name = type(config).__name__
    for field in ("n_layers", "n_encoder_layers", "n_decoder_layers"):
        n = getattr(config, field, 0)
        if n > MAX_LAYERS:
            raise ValueError(f"{name}.{field} is {n:,}: npformer builds at most {MAX_LAYERS:,} layers a stack")
    n = param_count(config)
    if n is not None and n > MAX_PARAMETERS:
        raise ValueError(f"{name} describes a model of {n:,} parameters, more than npformer builds "
                         f"({MAX_PARAMETERS:,}, 2^31)")
    if getattr(config, "positional", None) == "sinusoidal":
        rows = getattr(config, "max_len", None) or (config.image_size // config.patch_size) ** 2 + 1
        if rows * config.d_model > MAX_PARAMETERS:
            raise ValueError(f"{name} describes a sinusoidal position table of {rows:,} x {config.d_model:,} "
                             f"values, more than npformer builds ({MAX_PARAMETERS:,}, 2^31)")


# -- invariant checks (each raises ValueError/TypeError naming the field and its value) --------

def check_int(name: str, value: object, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {quoted(value)} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


def check_float(name: str, value: object, low: float, high: float, high_inclusive: bool = False,
                low_inclusive: bool = True) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise TypeError(f"{name} must be a number, got {quoted(value)} ({type(value).__name__})")
    above = low <= value if low_inclusive else low < value
    below = value <= high if high_inclusive else value < high
    if not (above and below):
        interval = f"{'[' if low_inclusive else '('}{low}, {high}{']' if high_inclusive else ')'}"
        raise ValueError(f"{name} must be in {interval}, got {value}")


def check_choice(name: str, value: object, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {quoted(value)}")


def check_bool(name: str, value: object, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if not isinstance(value, bool):
        want = "a bool or None" if allow_none else "a bool"
        raise TypeError(f"{name} must be {want}, got {quoted(value)}")


def check_heads(d_model: int, n_heads: int) -> None:
    """Multi-head attention splits d_model into n_heads equal slices (paper 3.2.2)."""
    if d_model % n_heads != 0:
        raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads}); "
                         f"{d_model} / {n_heads} = {d_model / n_heads:g}")


def check_patch_grid(image_size: int, patch_size: int) -> None:
    """Images are cut into whole P x P patches (ViT, section 3.1)."""
    if image_size % patch_size:
        raise ValueError(f"image_size ({image_size}) must be a multiple of patch_size ({patch_size})")


def check_pad_id(pad_id: object, vocab_size: int, name: str = "pad_id", allow_none: bool = False) -> None:
    """pad_id is a token id in [0, vocab_size), or -1 (no padding) where allowed."""
    if isinstance(pad_id, bool) or not isinstance(pad_id, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {quoted(pad_id)}")
    if allow_none and pad_id == -1:
        return
    if not 0 <= pad_id < vocab_size:
        extra = " or -1 for none" if allow_none else ""
        raise ValueError(f"{name} must be in [0, {vocab_size}){extra}, got {pad_id}")


# -- public-boundary input checks (run once per public call, never inside the passes) -----------

def check_ids(ids: ArrayLike, name: str, vocab_size: int, max_len: int | None = None,
              positional: str = "learned", allow: int | None = None) -> np.ndarray:
    """Return ``ids`` as a (B, T) integer array, or raise naming ``name`` and the bad values.

    ``allow`` is one extra value that may appear besides [0, vocab_size) (an ignore index)."""
    ids = np.asarray(ids)
    if ids.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integer token ids, got dtype {ids.dtype} with shape {ids.shape}")
    if ids.ndim != 2:
        raise ValueError(f"{name} must have shape (batch, length), got shape {ids.shape}")
    if ids.shape[0] == 0 or ids.shape[1] == 0:
        raise ValueError(f"{name} must hold at least one sequence of at least one token, got shape {ids.shape}")
    real = ids if allow is None else ids[ids != allow]
    if real.size and (real.min() < 0 or real.max() >= vocab_size):
        also = "" if allow is None else f" (or {allow}, ignored)"
        raise ValueError(f"{name} holds ids outside the vocabulary [0, {vocab_size}){also}: "
                         f"min {real.min()}, max {real.max()}, vocab_size {vocab_size}")
    if max_len is not None and ids.shape[1] > max_len:
        raise ValueError(f"{name} has {ids.shape[1]} positions, longer than the {positional} "
                         f"positions the model has (max_len {max_len})")
    return ids


def check_images(images: ArrayLike, image_size: int, in_channels: int, dtype: DTypeLike, batch: int | None = None,
                 context: str = "") -> np.ndarray:
    """Return ``images`` if it is a finite (B, H, W, C) array in ``dtype`` with B >= 1 (B == batch
    when given), or raise naming the shape expected; ``context`` ends the shape message."""
    want = (image_size, image_size, in_channels)
    if not isinstance(images, np.ndarray) or images.ndim != 4 or images.shape[1:] != want or not len(images) \
            or (batch is not None and len(images) != batch):
        raise ValueError(f"images must be an array of shape ({'B' if batch is None else batch}, {image_size}, "
                         f"{image_size}, {in_channels}){context}, "
                         f"got {getattr(images, 'shape', type(images).__name__)}")
    if images.dtype != dtype:
        raise TypeError(f"images must have the model's dtype {dtype}, got {images.dtype}")
    if not np.isfinite(images).all():
        raise ValueError("images contain NaN or inf")
    return images


def check_same_batch(a: np.ndarray, b: np.ndarray, name_a: str, name_b: str) -> None:
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"{name_a} and {name_b} must have the same batch size, "
                         f"got {a.shape[0]} ({name_a} {a.shape}) and {b.shape[0]} ({name_b} {b.shape})")


def check_mask(mask: ArrayLike, name: str, full_shape: tuple) -> np.ndarray:
    """A boolean mask (True = may attend) that broadcasts to ``full_shape`` (B, H, Tq, Tk)."""
    mask = np.asarray(mask)
    if mask.dtype != np.bool_:
        raise TypeError(f"{name} must be boolean (True = may attend), got dtype {mask.dtype} with shape {mask.shape}")
    try:
        ok = mask.ndim <= len(full_shape) and np.broadcast_shapes(mask.shape, full_shape) == tuple(full_shape)
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"{name} of shape {mask.shape} does not broadcast to (B, H, Tq, Tk) = {tuple(full_shape)}")
    return mask


def check_rng(module: Module, rng: object, dropout: float) -> None:
    """Training with dropout draws random masks: the caller passes the generator explicitly."""
    if rng is not None and not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator or None, got {type(rng).__name__}")
    if rng is None and module.training and dropout > 0:
        raise ValueError(f"the model is in training mode with dropout {dropout}: pass rng="
                         "np.random.default_rng(seed), or call .eval() for inference")


def make_rng(rng: np.random.Generator | int) -> np.random.Generator:
    """A Generator from a Generator or an int seed."""
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        return np.random.default_rng(int(rng))
    raise TypeError(f"rng must be a numpy.random.Generator or an int seed, got {type(rng).__name__}")
