"""Head knock-outs: does this head matter for this output?

A head is knocked out by zeroing its slice of the merged heads, the columns h*D .. (h+1)*D of
Concat(head_1..head_H) before the output projection W_o (``MultiHeadAttention.head_mask``). The model then
runs forward again, teacher-forced on its own output (the same input ids as the explained forward), and
the target is measured:

    logit models (dates, copy, text, digits, tabletop)   the target's logit and probability, and the
        decision at its position (the argmax: the character, class, pick or place cell); the effect is
        the drop in the target's log-odds, log(p / (1 - p)) = z_c - logsumexp_{j != c} z_j (nats), full
        minus knocked out: the log-probability's drop would vanish (to float noise) for a target the
        model is sure of, p = 1 - 1e-11, while its log-odds still say how far it moved
    MiniLM                                               the target vector ([CLS] or mean-pooled): its
        length, and the cosine with the full model's; the effect is 1 - cosine

Each knock-out is one forward pass; they run batched, several copies of the input at once, each copy
with its own head zeroed (``head_mask`` of shape (B, H)), which gives the same numbers as one pass per head.

Beside the effect, each head gets an attention score for the target: its weight, in the target's query
row, on the ``TOP_KEYS`` keys with the highest gradient-weighted relevance (``relevance.py``) for the
target. The page ranks the heads both ways; the Spearman correlation of the two rankings (ties by
average rank) says whether attention predicted importance here.
Dimension legend: U knock-outs, L layers, H heads, K targets, P output positions, V vocabulary, E width.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import numpy as np

from ..nn import MultiHeadAttention
from .arrays import encode_array

TOP_KEYS = 3                            # the keys most relevant to the target, whose weight a head is scored by
CHUNK_SCORES = 1 << 23                  # attention scores (copies x L x H x Tq x Tk) of one batched forward, at most

# model kind -> attention group -> (the stack's name in the model, the attention's name in a layer)
MODULES = {
    "transformer": {"encoder self": ("encoder", "self_attn"), "decoder self": ("decoder", "self_attn"),
                    "decoder cross": ("decoder", "multihead_attn")},
    "decoder_lm": {"self": ("blocks", "self_attn")},
    "vit": {"self": ("encoder", "self_attn")},
    "vla": {"self": ("encoder", "self_attn")},
    "action_lm": {"self": ("encoder", "self_attn")},
    "bert": {"self": ("encoder", "self_attn")},
}


def module_name(kind: str, group: str, layer: int) -> str:
    """The dotted name of one layer's attention module of a group, e.g. "decoder.layers.1.multihead_attn"."""
    stack, attn = MODULES[kind][group]
    return f"{stack}.layers.{layer}.{attn}"


@contextlib.contextmanager
def heads_masked(model, masks: dict[str, np.ndarray]):
    """Within the block, module ``name`` of ``model`` multiplies its heads' outputs by ``masks[name]``
    ((H,) or (B, H) of 0/1); the others run as they are."""
    mods = dict(model.modules())
    for name in masks:
        if not isinstance(mods.get(name), MultiHeadAttention):
            raise KeyError(f"{name!r} is no attention module of the model")
    try:
        for name, m in masks.items():
            mods[name].head_mask = m
        yield
    finally:
        for name in masks:
            mods[name].__dict__.pop("head_mask", None)              # back to the class default, None


def knocked_out(model, kind: str, shapes: dict[str, tuple[int, int]], run: Callable[[int], np.ndarray],
                scores_per_copy: int) -> tuple[np.ndarray, np.ndarray]:
    """``run(n)`` is the model's forward on n copies of the input, returning what is measured, (n, ...).
    Returns (full (...), knocked (U, ...)) with U = every (group, layer, head) in ``shapes`` order (group ->
    (L, H)), each copy run with that one head zeroed. ``scores_per_copy``: the attention scores one copy
    makes (sum of L * H * Tq * Tk), to size the batches."""
    units = [(g, layer, h) for g, (n_layers, n_heads) in shapes.items() for layer in range(n_layers)
             for h in range(n_heads)]
    chunk = max(1, min(len(units), CHUNK_SCORES // max(1, scores_per_copy)))
    full = run(1)[0]
    parts = []
    for start in range(0, len(units), chunk):
        part = units[start:start + chunk]
        masks: dict[str, np.ndarray] = {}
        for row, (g, layer, h) in enumerate(part):
            m = masks.setdefault(module_name(kind, g, layer), np.ones((len(part), shapes[g][1]), dtype=model.dtype))
            m[row, h] = 0                                           # copy `row` loses head h of this module
        with heads_masked(model, masks):
            parts.append(run(len(part)))
    return full, np.concatenate(parts)


def logsumexp(x: np.ndarray) -> np.ndarray:
    """log sum_j exp(x_j) over the last axis, in float64 (-inf entries count zero)."""
    x = np.asarray(x, dtype=np.float64)
    m = x.max(axis=-1, keepdims=True)
    return (m + np.log(np.exp(x - m).sum(axis=-1, keepdims=True)))[..., 0]


def logit_measures(logits: np.ndarray, slots, ids) -> dict[str, np.ndarray]:
    """logits (..., P, V) -> for the K targets (slot, id): logit, prob, log-odds (z_c - logsumexp of the
    others), decision (the argmax at the target's position), each (..., K)."""
    slots, ids = np.asarray(slots), np.asarray(ids)
    at = np.asarray(logits)[..., slots, :]                          # (..., K, V)
    logp = at - logsumexp(at)[..., None]                            # (..., K, V) log-softmax
    pick = np.broadcast_to(ids[:, None], at.shape[:-1] + (1,))     # (..., K, 1)
    z = np.take_along_axis(at, pick, axis=-1)[..., 0].astype(np.float64)          # (..., K)
    others = np.array(at, dtype=np.float64)                                       # (..., K, V)
    np.put_along_axis(others, pick, -np.inf, axis=-1)
    return {"logit": z, "logodds": z - logsumexp(others),
            "prob": np.exp(np.take_along_axis(logp, pick, axis=-1)[..., 0]), "decision": at.argmax(axis=-1)}



def vector_measures(vectors: np.ndarray, full: np.ndarray) -> dict[str, np.ndarray]:
    """vectors (..., K, E), full (K, E) -> value (the length) and cosine with the full model's, each (..., K)."""
    v, f = np.asarray(vectors, dtype=np.float64), np.asarray(full, dtype=np.float64)
    norm = np.linalg.norm(v, axis=-1)
    return {"value": norm, "cosine": (v * f).sum(-1) / np.maximum(norm * np.linalg.norm(f, axis=-1), 1e-300)}


def attention_score(weights: np.ndarray, relevance: np.ndarray, query: int | None,
                    top: int = TOP_KEYS) -> tuple[np.ndarray, np.ndarray]:
    """weights (L, H, Tq, Tk), relevance (Tq, Tk) of one target -> (scores (L, H), keys (top,)): the keys with
    the highest relevance in the target's query row (the mean of the rows when ``query`` is None; ties to
    the earlier key), and each head's weight on them in that row, summed."""
    w, r = np.asarray(weights, dtype=np.float64), np.asarray(relevance, dtype=np.float64)
    row_r = r.mean(axis=0) if query is None else r[query]           # (Tk,)
    keys = np.argsort(-row_r, kind="stable")[:top]                  # (top,)
    row_w = w.mean(axis=2) if query is None else w[:, :, query]     # (L, H, Tk)
    return row_w[..., keys].sum(axis=-1), keys


def average_ranks(x) -> np.ndarray:
    """1-based ranks of x from the smallest, ties sharing the mean of the ranks they span."""
    x = np.asarray(x, dtype=np.float64).ravel()
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    sorted_x = x[order]
    start = 0
    for end in range(1, len(x) + 1):
        if end == len(x) or sorted_x[end] != sorted_x[start]:
            ranks[order[start:end]] = (start + end + 1) / 2.0       # mean of start+1 .. end
            start = end
    return ranks


def spearman(a, b) -> float | None:
    """Spearman's rho of two score lists: Pearson's correlation of their average ranks; None when one of
    them ranks every item equal (no order to compare)."""
    ra, rb = average_ranks(a), average_ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    den = np.sqrt((ra * ra).sum() * (rb * rb).sum())
    return None if den == 0 else float((ra * rb).sum() / den)


def knockout_json(model, kind: str, groups: dict, run: Callable[[int], np.ndarray], targets: list,
                  relevance: dict[str, dict[str, np.ndarray]], names: list[str],
                  queries: dict[str, list], vectors: bool = False, labels: list[str] | None = None) -> dict:
    """The page's "knockout" entry of one input (docs/EXPLORE_FORMAT.md). ``groups``: name -> GroupParts
    (capture.py); ``run`` as for ``knocked_out``, returning logits (n, P, V) or, with ``vectors``, target
    vectors (n, K, E); ``targets``: the K ``targets.Target``s, named ``names``; ``relevance``: group -> target
    name -> (Tq, Tk); ``queries``: group -> the K query rows (None: the mean of all rows); ``labels``: each
    id's text, for the page to name a decision (characters; cells and classes are their numbers)."""
    shapes = {g: parts.weights.shape[:2] for g, parts in groups.items()}
    per_copy = sum(int(np.prod(p.weights.shape)) for p in groups.values())
    full, knocked = knocked_out(model, kind, shapes, run, per_copy)
    if vectors:
        f, k = vector_measures(full, full), vector_measures(knocked, full)
        effect = 1.0 - k["cosine"]                                  # (U, K)
        full_json = {"value": f["value"].tolist()}
        stored = {"value": k["value"], "cosine": k["cosine"]}
    else:
        slots, ids = [t.slot for t in targets], [t.id for t in targets]
        f, k = logit_measures(full, slots, ids), logit_measures(knocked, slots, ids)
        effect = f["logodds"] - k["logodds"]                        # (U, K)
        full_json = {"logit": f["logit"].tolist(), "prob": f["prob"].tolist(), "decision": f["decision"].tolist()}
        stored = {"logit": k["logit"], "prob": k["prob"], "decision": k["decision"]}
    out_groups, start = {}, 0
    for g, (n_layers, n_heads) in shapes.items():
        u = slice(start, start + n_layers * n_heads)
        start = u.stop
        scores, keys = zip(*(attention_score(groups[g].weights, relevance[g][name], queries[g][i])
                             for i, name in enumerate(names)), strict=True)
        # ranked as stored (float32), so the page's ranks and these correlations read the same numbers
        attention = np.stack(scores, axis=-1).astype(np.float32)     # (L, H, K)
        eff = effect[u].reshape(n_layers, n_heads, -1).astype(np.float32)  # (L, H, K)
        entry: dict[str, Any] = {name: encode_array(v[u].reshape(n_layers, n_heads, -1),
                                                    "i32" if name == "decision" else "f32")
                                 for name, v in stored.items()}
        entry.update(effect=encode_array(eff, "f32"), attention=encode_array(attention, "f32"),
                     keys=np.stack(keys).tolist(), queries=list(queries[g]),
                     spearman=[spearman(attention[..., i], eff[..., i]) for i in range(len(names))])
        out_groups[g] = entry
    out: dict[str, Any] = {"measure": "cosine" if vectors else "log-probability", "top_keys": TOP_KEYS,
                           "full": full_json, "groups": out_groups}
    if labels is not None:
        out["labels"] = list(labels)
    return out

