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
Each batch is reduced to what is measured, (copies, K) numbers, before the next one runs, and its size
is chosen so that one batched forward holds at most about ``CHUNK_SCORES`` numbers.

The knock-outs of one input do at most ``WORK_BUDGET`` head x position x layer units of work: one
knock-out costs a forward over every attention group's query positions and layers. Past the budget,
the heads are knocked out in order (group, layer, head) while it lasts; the rest are skipped, their
numbers NaN (decisions -1), and the payload's ``skipped`` says which and why (docs/explorer.md).

Beside the effect, each head gets an attention score for the target: its weight, in the target's query
row, on the ``TOP_KEYS`` keys with the highest gradient-weighted relevance (``relevance.py``) for the
target. The page ranks the heads both ways; the Spearman correlation of the two rankings (ties by
average rank) says whether attention predicted importance here.

The knock-outs' noise floor, per target: the same full forward run once in float32 and once in float64
(``in_dtype``), and the gap between the two measures (the log-odds, or 1 - the cosine of the two vectors).
An effect below it is rounding, not the head; when every effect is below it the page ranks nothing.
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
CHUNK_SCORES = 1 << 25                  # numbers one batched forward holds (copies x (attention scores, activations
                                        # and output of one copy)), at most
WORK_BUDGET = 1 << 18                   # heads knocked out x query positions x layers of one forward, per input
SCORES_PER_WEIGHT = 3                   # (Tq, Tk) arrays a forward holds per head: scores, weights, softmax's
ACTIVATIONS_PER_Q = 24                  # a block's activations per number of q (norms, q/k/v, FFN's 4E twice, ...)

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


@contextlib.contextmanager
def in_dtype(model, dtype):
    """Within the block, every parameter of ``model`` is a ``dtype`` copy; the original arrays (the same
    objects) are put back after it, so nothing outside sees a change."""
    saved = [(mod, k, v) for _, mod in model.modules() for k, v in mod.params.items()]
    copies: dict[int, np.ndarray] = {}                              # one copy per array: a shared one stays shared
    try:
        for mod, k, v in saved:
            mod.params[k] = copies.setdefault(id(v), v.astype(dtype))
        yield
    finally:
        for mod, k, v in saved:
            mod.params[k] = v


def noise_floor(model, run: Callable[[int], np.ndarray], measure: Callable[[np.ndarray], dict[str, np.ndarray]],
                vectors: bool) -> np.ndarray:
    """(K,) the gap, per target, between the full forward in float32 and in float64 on the same input: the
    log-odds' absolute difference, or (``vectors``) 1 - the cosine of the two target vectors."""
    with in_dtype(model, np.float32):
        lo = run(1)[0]
    with in_dtype(model, np.float64):
        hi = run(1)[0]
    if vectors:
        return np.abs(1.0 - vector_measures(lo, hi)["cosine"])
    return np.abs(measure(lo)["logodds"] - measure(hi)["logodds"])


def units_of(shapes: dict[str, tuple[int, int]]) -> list[tuple[str, int, int]]:
    """Every (group, layer, head) of ``shapes`` (group -> (L, H)), in the order they are knocked out."""
    return [(g, layer, h) for g, (n_layers, n_heads) in shapes.items() for layer in range(n_layers)
            for h in range(n_heads)]


def knocked_out(model, kind: str, shapes: dict[str, tuple[int, int]], run: Callable[[int], np.ndarray],
                measure: Callable[[np.ndarray], dict[str, np.ndarray]], per_copy: int,
                n_units: int | None = None) -> dict[str, np.ndarray]:
    """``run(n)``: the model's forward on n copies of the input, returning what is measured, (n, ...);
    ``measure``: that output -> {name: (n, K)}. Returns {name: (U, K)} for the first ``n_units`` (all when
    None) of ``units_of(shapes)``, each copy run with that one head zeroed. Each batch is measured before
    the next runs, so no knocked-out output outlives its batch. ``per_copy``: the numbers one copy's
    forward holds, to size the batches."""
    units = units_of(shapes)[:n_units]
    chunk = max(1, min(len(units), CHUNK_SCORES // max(1, per_copy)))
    parts: list[dict[str, np.ndarray]] = []
    for start in range(0, len(units), chunk):
        part = units[start:start + chunk]
        masks: dict[str, np.ndarray] = {}
        for row, (g, layer, h) in enumerate(part):
            m = masks.setdefault(module_name(kind, g, layer), np.ones((len(part), shapes[g][1]), dtype=model.dtype))
            m[row, h] = 0                                           # copy `row` loses head h of this module
        with heads_masked(model, masks):
            parts.append(measure(run(len(part))))
    if not parts:
        return {}
    return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}


def skipped_json(shapes: dict[str, tuple[int, int]], n_done: int, per_head: int, positions: str) -> dict | None:
    """The payload's "skipped" (docs/EXPLORE_FORMAT.md): None when every head was knocked out, else which
    heads were not (every unit from ``first`` on, in order) and one line saying why."""
    units = units_of(shapes)
    if n_done >= len(units):
        return None
    g, layer, h = units[n_done]
    done = ("none of them" if n_done == 0 else
            f"the first {n_done:,} ({units[0][0]} L0\u00b7H0 to {units[n_done - 1][0]} "
            f"L{units[n_done - 1][1]}\u00b7H{units[n_done - 1][2]})")
    note = (f"{len(units) - n_done:,} of the {len(units):,} heads were not knocked out, from {g} "
            f"L{layer}\u00b7H{h} on: each knock-out is one forward over {positions} ({per_head:,} position x layer "
            f"units), and the knock-outs of one input stop at {WORK_BUDGET:,} head x position x layer units, "
            f"so {done} were.")
    return {"count": len(units) - n_done, "total": len(units), "first": {"group": g, "layer": layer, "head": h},
            "work_per_head": per_head, "budget": WORK_BUDGET, "note": note}


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


def positions_text(groups: dict) -> str:
    """One forward's positions x layers in words, e.g. "15 positions x 1,024 layers" (per group when several)."""
    parts = [f"{p.weights.shape[2]:,} positions x {p.weights.shape[0]:,} layers"
             + (f" ({g})" if len(groups) > 1 else "") for g, p in groups.items()]
    return " + ".join(parts)


def knockout_json(model, kind: str, groups: dict, run: Callable[[int], np.ndarray], targets: list,
                  relevance: dict[str, dict[str, np.ndarray]], names: list[str],
                  queries: dict[str, list], vectors: bool = False, labels: list[str] | None = None) -> dict:
    """The page's "knockout" entry of one input (docs/EXPLORE_FORMAT.md). ``groups``: name -> GroupParts
    (capture.py); ``run`` as for ``knocked_out``, returning logits (n, P, V) or, with ``vectors``, target
    vectors (n, K, E); ``targets``: the K ``targets.Target``s, named ``names``; ``relevance``: group -> target
    name -> (Tq, Tk); ``queries``: group -> the K query rows (None: the mean of all rows); ``labels``: each
    id's text, for the page to name a decision (characters; cells and classes are their numbers)."""
    shapes = {g: parts.weights.shape[:2] for g, parts in groups.items()}
    units = units_of(shapes)
    # one forward's work: every group's query positions x layers (a knock-out is one forward)
    per_head = sum(int(p.weights.shape[0] * p.weights.shape[2]) for p in groups.values())
    n_done = min(len(units), WORK_BUDGET // max(1, per_head))
    full = run(1)[0]
    per_copy = full.size + sum(int(SCORES_PER_WEIGHT * p.weights.size + ACTIVATIONS_PER_Q * p.q.size)
                               for p in groups.values())
    if vectors:
        def measure(out):
            return vector_measures(out, full)
        f = measure(full)
        full_json = {"value": f["value"].tolist()}
    else:
        slots, ids = [t.slot for t in targets], [t.id for t in targets]

        def measure(out):
            return logit_measures(out, slots, ids)
        f = measure(full)
        full_json = {"logit": f["logit"].tolist(), "prob": f["prob"].tolist(), "decision": f["decision"].tolist()}
    floor = noise_floor(model, run, measure, vectors)              # (K,)
    k = knocked_out(model, kind, shapes, run, measure, per_copy, n_done)
    n_k = len(names)
    stored: dict[str, np.ndarray] = {}
    for name in (("value", "cosine") if vectors else ("logit", "prob", "decision")):
        fill = -1 if name == "decision" else np.nan
        stored[name] = np.full((len(units), n_k), fill, dtype=np.int64 if name == "decision" else np.float64)
        if n_done:
            stored[name][:n_done] = k[name]
    if vectors:
        effect = 1.0 - stored["cosine"]                             # (U, K); NaN where skipped
    else:
        effect = np.full((len(units), n_k), np.nan)
        if n_done:
            effect[:n_done] = f["logodds"] - k["logodds"]           # (U, K)
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
        done = (np.arange(u.start, u.stop) < n_done).reshape(n_layers, n_heads)   # (L, H) knocked out
        entry.update(effect=encode_array(eff, "f32"), attention=encode_array(attention, "f32"),
                     keys=np.stack(keys).tolist(), queries=list(queries[g]),
                     spearman=[spearman(attention[..., i][done], eff[..., i][done]) if done.sum() > 1 else None
                               for i in range(len(names))])
        out_groups[g] = entry
    out: dict[str, Any] = {"measure": "cosine" if vectors else "log-probability", "top_keys": TOP_KEYS,
                           "full": full_json, "groups": out_groups,
                           "noise_floor": [float(x) for x in floor],
                           "skipped": skipped_json(shapes, n_done, per_head, positions_text(groups))}
    if labels is not None:
        out["labels"] = list(labels)
    return out

