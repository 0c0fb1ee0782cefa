"""Synthetic explorer payloads (docs/EXPLORE_FORMAT.md) whose numbers are real: q, k, v are random
float32 arrays, the weights are npformer's ``attention_forward`` on them, and rollout is computed
here in NumPy. They have the shapes of each model kind (an encoder-decoder's three groups, a causal
LM, a ViT with its image, a VLA with words, patches and actions, MiniLM's 6 x 12 heads), so the
page's tests need no trained run; the tests on real models use ``npformer.explore.payload``.
"""
from __future__ import annotations

import base64

import numpy as np

from npformer.explore.payload import decode_array, encode_array
from npformer.ops import attention_forward, causal_mask

DTYPES = {"f32": "<f4", "f16": "<f2", "i32": "<i4", "u8": "u1"}


def encode(a: np.ndarray, dtype: str) -> dict:
    """An array as the payload stores it; "u8" with ``scale`` for maps in [0, 1]."""
    a = np.asarray(a)
    out = {"dtype": dtype, "shape": list(a.shape)}
    if dtype == "u8" and a.dtype != np.uint8 and a.dtype != bool:
        a = np.round(np.clip(a, 0, 1) * 255)
        out["scale"] = 1 / 255
    out["b64"] = base64.b64encode(np.ascontiguousarray(a.astype(DTYPES[dtype])).tobytes()).decode("ascii")
    return out


def decode(a: dict) -> np.ndarray:
    """The inverse of ``encode`` and of the payload builder's ``encode_array`` (codec included)."""
    return decode_array(a)


def rollout(weights: np.ndarray) -> np.ndarray:
    """Abnar & Zuidema 2020: per layer the head-mean attention plus the identity, rows renormalised,
    multiplied through the layers. weights (L, H, T, T) -> (L, T, T), entry l after layer l."""
    L, _, T, _ = weights.shape
    a = weights.mean(axis=1) + np.eye(T)                            # (L, T, T)
    a = a / a.sum(axis=-1, keepdims=True)
    out, acc = [], np.eye(T)
    for layer in range(L):
        acc = a[layer] @ acc                                        # (T, T)
        out.append(acc)
    return np.stack(out)


def stats(weights: np.ndarray) -> dict:
    """Per layer and head: mean row entropy, mean |i - j| weighted, mean weight on key 0."""
    _, _, Tq, Tk = weights.shape
    ent = -(weights * np.log(np.where(weights > 0, weights, 1))).sum(-1).mean(-1)     # (L, H)
    dist = (weights * np.abs(np.arange(Tq)[:, None] - np.arange(Tk)[None, :])).sum(-1).mean(-1)
    first = weights[..., 0].mean(-1)
    return {"entropy": ent.tolist(), "distance": dist.tolist(), "first": first.tolist()}


def make_group(rng, name, L, H, q_tokens, k_tokens, D, mask=None, bias=None, kinds=None,
               self_attention=True, targets=(), with_weights=False, sharp=2.0, compress=None):
    """One GROUP: random q, k, v; the weights npformer's attention gives them. q, k and v use the
    payload builder's "zlib-shuffle4" codec when ``compress`` (default: over 1 MiB together, as it does)."""
    Tq, Tk = len(q_tokens), len(k_tokens)
    q = (rng.standard_normal((L, H, Tq, D)) * sharp).astype(np.float32)     # (L, H, Tq, D)
    k = rng.standard_normal((L, H, Tk, D)).astype(np.float32)               # (L, H, Tk, D)
    v = rng.standard_normal((L, H, Tk, D)).astype(np.float32)               # (L, H, Tk, D)
    _, w, _ = attention_forward(q, k, v, mask=mask, bias=bias)              # (L, H, Tq, Tk)
    if compress is None:
        compress = q.nbytes + k.nbytes + v.nbytes > 1 << 20
    g = {
        "name": name, "n_layers": L, "n_heads": H, "head_dim": D,
        "query_tokens": list(q_tokens), "key_tokens": list(k_tokens),
        "token_kinds": kinds or {"query": ["word"] * Tq, "key": ["word"] * Tk},
        "q": encode_array(q, "f32", compress), "k": encode_array(k, "f32", compress),
        "v": encode_array(v, "f32", compress),
        "scale": float(1 / np.sqrt(D)),
        "mask": None if mask is None else encode(mask.astype(np.uint8), "u8"),
        "bias": None if bias is None else encode(bias, "f32"),
        "weights": encode(w, "u8") if with_weights else None,
        "rollout": encode(rollout(w.astype(np.float64)), "u8") if self_attention else None,
        "relevance": None, "stats": stats(w.astype(np.float64)),
    }
    if targets:
        rel = {}
        for t in targets:
            r = np.abs(rng.standard_normal((Tq, Tk)))                        # (Tq, Tk), stand-in values
            rel[t["name"]] = encode(r / r.sum(-1, keepdims=True), "f16")
        g["relevance"] = rel
    return g, (q, k, v, mask, bias, w)


def _payload(kind, title, inputs, d_model, H, training=None):
    return {"version": 1, "title": title,
            "model": {"kind": kind, "d_model": d_model, "n_heads": H, "head_dim": d_model // H, "norm": "post"},
            "inputs": inputs, "training": training, "notes": ["synthetic payload: random q, k, v; real attention"]}


def _image(rng, size, patch):
    img = (rng.random((size, size, 3)) * 80).astype(np.uint8)              # (H, W, 3) dark noise
    img[size // 4: size // 2, size // 4: size // 2] = [220, 40, 40]       # a red block
    img[size // 2: 3 * size // 4, size // 2: 7 * size // 8] = [40, 60, 220]
    return img


def build(kind: str, seed: int = 0, n_tokens: int | None = None):
    """(payload, refs): refs[group name] = (q, k, v, mask, bias, weights) as numpy arrays."""
    rng = np.random.default_rng(seed)
    refs = {}
    if kind == "dates":
        src = ["<s>"] + list("12 march 1990") + ["</s>", "<pad>", "<pad>"]
        tgt = ["<s>"] + list("1990-03-12")
        Ts, Tt = len(src), len(tgt)
        pad = np.array([t != "<pad>" for t in src])
        L, H, D = 2, 4, 16
        targets = [{"name": f"{i} (output {c})", "group": "decoder cross", "query": i, "detail": "log p of output " + c}
                   for i, c in list(enumerate(tgt[1:]))[:3]]
        g1, refs["encoder self"] = make_group(rng, "encoder self", L, H, src, src, D, compress=True,
                                              mask=np.broadcast_to(pad, (Ts, Ts)).copy(), with_weights=True)
        g2, refs["decoder self"] = make_group(rng, "decoder self", L, H, tgt, tgt, D, mask=causal_mask(Tt, Tt))
        g3, refs["decoder cross"] = make_group(rng, "decoder cross", L, H, tgt, src, D,
                                               mask=np.broadcast_to(pad, (Tt, Ts)).copy(), self_attention=False,
                                               targets=targets)
        steps = [0, 100, 200, 300, 400]
        tw = np.stack([refs["encoder self"][5] ** (1 + s / 100) for s in steps])          # (S, L, H, T, T)
        tw = tw / tw.sum(-1, keepdims=True)
        training = {"steps": steps, "group": "encoder self", "query_tokens": src, "key_tokens": src,
                    "weights": encode(tw, "u8")}
        inp = {"label": "12 march 1990", "output": "1990-03-12", "targets": targets, "groups": [g1, g2, g3],
               "image": None, "meta": {"beam": 1}}
        return _payload("dates", "dates run (synthetic)", [inp], H * D, H, training), refs
    if kind == "text":
        T = n_tokens or 40
        toks = [chr(97 + (i * 7) % 26) for i in range(T)]
        L, H, D = (4, 4, 32) if T > 100 else (2, 4, 16)
        targets = [{"name": "next after token " + str(T - 1), "group": "self", "query": T - 1, "detail": "log p"}]
        g, refs["self"] = make_group(rng, "self", L, H, toks, toks, D, mask=causal_mask(T, T), targets=targets)
        inp = {"label": "".join(toks), "output": "x", "targets": targets, "groups": [g], "image": None}
        return _payload("text", f"text run (synthetic, {T} tokens)", [inp], H * D, H), refs
    if kind == "minilm":
        T = n_tokens or 24
        toks = ["[CLS]"] + [f"w{i}" for i in range(T - 2)] + ["[SEP]"]
        L, H, D = 6, 12, 32
        targets = [{"name": "[CLS]", "group": "self", "query": 0, "detail": "sentence embedding"}]
        g, refs["self"] = make_group(rng, "self", L, H, toks, toks, D, targets=targets, sharp=1.0)
        inp = {"label": " ".join(toks[1:-1]), "output": "embedding", "targets": targets, "groups": [g], "image": None}
        return _payload("minilm", f"all-MiniLM-L6-v2 (synthetic, {T} pieces)", [inp], 384, H), refs
    if kind in ("digits", "tabletop"):
        size, patch = (28, 4) if kind == "digits" else (64, 8)
        rows = cols = size // patch
        patches = [f"p({r},{c})" for r in range(rows) for c in range(cols)]
        if kind == "digits":
            toks = ["[CLS]"] + patches
            kinds = ["special"] + ["patch"] * len(patches)
            offset, targets = 1, [{"name": "class 7", "group": "self", "query": 0, "detail": "logit of class 7"}]
        else:
            words = "put the red block in the box".split()
            toks = words + patches + ["[PICK]", "[PLACE]"]
            kinds = ["word"] * len(words) + ["patch"] * len(patches) + ["action"] * 2
            offset = len(words)
            targets = [{"name": "pick", "group": "self", "query": len(toks) - 2, "detail": "pick logit"},
                       {"name": "place", "group": "self", "query": len(toks) - 1, "detail": "place logit"}]
        L, H, D = 2, 4, 16
        g, refs["self"] = make_group(rng, "self", L, H, toks, toks, D, kinds={"query": kinds, "key": kinds},
                                     targets=targets)
        image = {"rgb": encode(_image(rng, size, patch), "u8"), "patch": patch, "grid": [rows, cols],
                 "patch_token_offset": offset}
        inp = {"label": "test image 17" if kind == "digits" else "put the red block in the box",
               "output": "7" if kind == "digits" else "pick (2,3) place (5,5)", "targets": targets,
               "groups": [g], "image": image}
        return _payload(kind, kind + " (synthetic)", [inp], H * D, H), refs
    raise ValueError(kind)


KINDS = ("dates", "text", "digits", "tabletop", "minilm")
