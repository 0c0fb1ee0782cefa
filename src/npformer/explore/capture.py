"""Read what every attention op of a model computed, from the caches of one eval-mode forward.

Nothing here re-runs attention: q, k, v, the weights and the scale are the very arrays the one block
(``nn/sublayer.py``, ``MultiHeadAttention.forward``) put in its caches, read with
``MultiHeadAttention.attention_parts``. The mask the op used is not cached; each model builds it
the same way (key padding, and causal for a decoder's self-attention), so ``capture`` rebuilds it and
``check_parts`` recomputes the weights with ``ops.attention_forward`` from q, k, the mask and the
scale and compares them with the cached ones: what the page shows is what the model computed.

    groups = capture(kind, model, cache, masks)   # {"encoder self": GroupParts, ...}

Dimension legend: L layers, H heads, Tq query and Tk key positions, D head size.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..nn import MultiHeadAttention
from ..ops import attention_forward


@dataclass
class GroupParts:
    """One attention kind of one input (batch item 0), stacked over layers."""
    q: np.ndarray                 # (L, H, Tq, D)
    k: np.ndarray                 # (L, H, Tk, D)
    v: np.ndarray                 # (L, H, Tk, D)
    weights: np.ndarray           # (L, H, Tq, Tk), before attention dropout (none in eval mode)
    scale: float                  # 1 / sqrt(D), as the op used it
    mask: np.ndarray | None       # (Tq, Tk) bool, True = may attend; None: nothing masked
    self_attention: bool          # queries and keys are the same tokens (rollout applies)


def _layer_sublayers(layer_cache, names: tuple[str, ...]) -> dict:
    """An EncoderLayer/DecoderLayer cache is one ``SublayerCache`` per sub-layer, attention first; ``.fn``
    is F's own cache (as ``EncoderLayer.attention_weights`` reads it)."""
    return {name: layer_cache[i].fn for i, name in enumerate(names)}


def stack_attention_caches(stack_cache, cross: bool = False) -> list[dict]:
    """One dict per layer of an Encoder/Decoder stack cache: {"self": MHA cache[, "cross": MHA cache]}."""
    layer_caches, _ = stack_cache
    return [_layer_sublayers(c, ("self", "cross") if cross else ("self",)) for c in layer_caches]


# model kind -> cache -> {group name: (stack cache, "self" | "cross")}; each mirrors the model's own
# ``attention_weights(cache)``, which reads the same caches
STACKS = {
    "transformer": lambda cache: {"encoder self": (cache[0][1], False, "self"),
                                  "decoder self": (cache[1][1], True, "self"),
                                  "decoder cross": (cache[1][1], True, "cross")},
    "decoder_lm": lambda cache: {"self": (cache[1], False, "self")},
    "classifier": lambda cache: {"self": (cache[1], False, "self")},
    "vit": lambda cache: {"self": (cache[1], False, "self")},
    "vla": lambda cache: {"self": (cache[2], False, "self")},
    "action_lm": lambda cache: {"self": (cache[2], False, "self")},
    "bert": lambda cache: {"self": (cache[1], False, "self")},
}


def group_parts(stack_cache, cross_stack: bool, which: str, mask: np.ndarray | None, index: int = 0) -> GroupParts:
    """Stack the attention parts of one kind ("self" or "cross") over the layers, for batch item ``index``."""
    parts = [MultiHeadAttention.attention_parts(layer[which])
             for layer in stack_attention_caches(stack_cache, cross_stack)]
    q, k, v, w = (np.stack([p[i][index] for p in parts]) for i in range(4))   # (L, H, T*, *)
    scale = float(parts[0][4])
    if mask is not None:
        mask = np.broadcast_to(np.asarray(mask, dtype=bool), w.shape[-2:]).copy()   # (Tq, Tk)
        if mask.all():
            mask = None
    return GroupParts(q, k, v, w, scale, mask, which == "self")


def capture(kind: str, cache, masks: dict[str, np.ndarray | None], index: int = 0) -> dict[str, GroupParts]:
    """Every attention group of a model's forward cache (see ``STACKS`` for the kinds). ``masks``: group name
    -> the (Tq, Tk) boolean mask the model applied for batch item ``index`` (None: nothing masked). The
    weights recomputed from the parts must equal the cached ones (``check_parts``)."""
    if kind not in STACKS:
        raise ValueError(f"no attention capture for model kind {kind!r}; known: {', '.join(sorted(STACKS))}")
    out = {}
    for name, (stack_cache, cross_stack, which) in STACKS[kind](cache).items():
        if name not in masks:
            raise ValueError(f"masks has no entry for group {name!r}")
        out[name] = check_parts(name, group_parts(stack_cache, cross_stack, which, masks[name], index))
    return out


def recompute_weights(g: GroupParts) -> np.ndarray:
    """The weights (L, H, Tq, Tk) from q, k, the mask and the scale, by ``ops.attention_forward``."""
    _, w, _ = attention_forward(g.q, g.k, g.v, mask=g.mask, scale=g.scale)
    return w


def check_parts(name: str, g: GroupParts) -> GroupParts:
    """Raise unless the recomputed weights equal the cached ones (same arithmetic: to float rounding)."""
    w = recompute_weights(g)
    tol = 1e-5 if g.q.dtype == np.float32 else 1e-12
    if w.shape != g.weights.shape or not np.allclose(w, g.weights, rtol=0, atol=tol):
        err = float(np.abs(w - g.weights).max()) if w.shape == g.weights.shape else "shape"
        raise RuntimeError(f"{name}: weights recomputed from the cached q, k and mask differ from the "
                           f"model's ({err}); the mask given for this group is not the one the model used")
    return g


def causal(t: int) -> np.ndarray:
    """(T, T) bool, True where query i may read key j <= i."""
    return np.tri(t, t, dtype=bool)
