"""Three correct solutions of every exercise, each in its own style, written apart from the reference
solutions and from npformer's ops: ``LOOPS`` (Python loops over rows, computed in float64 and cast
back), ``EINSUM`` (np.einsum, in the input's dtype) and ``MATMUL`` (the @ operator with a
multiplicative mask and float32 kept by explicit casts)."""
from __future__ import annotations

import math

import numpy as np

# -- loops, float64 inside ------------------------------------------------------------------------------

def _rows(x):
    """(view of x as rows of its last axis (N, C), function putting rows back into x's shape)."""
    flat = x.reshape(-1, x.shape[-1])
    return flat, lambda rows: np.asarray(rows).reshape(x.shape[:-1] + (np.asarray(rows).shape[-1],))


def loops_softmax(x):
    flat, back = _rows(x.astype(np.float64))
    out = []
    for row in flat:
        m = max(row)
        e = [math.exp(v - m) for v in row]
        s = sum(e)
        out.append([v / s for v in e])
    return back(out).astype(x.dtype)


def _loops_attention_2d(q, k, v, allowed):
    tq, tk = q.shape[0], k.shape[0]
    w = np.zeros((tq, tk))
    for i in range(tq):
        scores = [float(np.dot(q[i], k[j])) / math.sqrt(q.shape[1]) for j in range(tk)]
        keep = [j for j in range(tk) if allowed[i, j]]
        if not keep:
            continue
        m = max(scores[j] for j in keep)
        for j in keep:
            w[i, j] = math.exp(scores[j] - m)
        w[i] /= w[i].sum()
    return w @ v, w


def loops_attention(q, k, v, mask=None):
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    tq, tk = q.shape[-2], k.shape[-2]
    allowed = np.broadcast_to(np.ones((tq, tk), bool) if mask is None else mask, lead + (tq, tk))
    out = np.zeros(lead + (tq, v.shape[-1]))
    w = np.zeros(lead + (tq, tk))
    for idx in np.ndindex(*lead):
        out[idx], w[idx] = _loops_attention_2d(q[idx].astype(np.float64), k[idx].astype(np.float64),
                                               v[idx].astype(np.float64), allowed[idx])
    return out.astype(q.dtype), w.astype(q.dtype)


def loops_split_heads(x, n_heads):
    b, t, e = x.shape
    d = e // n_heads
    out = np.empty((b, n_heads, t, d), x.dtype)
    for h in range(n_heads):
        out[:, h] = x[:, :, h * d:(h + 1) * d]
    return out


def loops_merge_heads(x):
    return np.concatenate([x[:, h] for h in range(x.shape[1])], axis=-1)


def loops_layer_norm(x, gamma, beta, eps=1e-5):
    flat, back = _rows(x.astype(np.float64))
    out = []
    for row in flat:
        mean = sum(row) / len(row)
        var = sum((v - mean) ** 2 for v in row) / len(row)
        out.append([(v - mean) / math.sqrt(var + eps) for v in row])
    return (back(out) * gamma.astype(np.float64) + beta.astype(np.float64)).astype(x.dtype)


def loops_positional_encoding(T, d):
    pe = np.zeros((T, d))
    for p in range(T):
        for i in range(d // 2):
            angle = p / 10000 ** (2 * i / d)
            pe[p, 2 * i], pe[p, 2 * i + 1] = math.sin(angle), math.cos(angle)
    return pe


def loops_causal_mask(T):
    return np.array([[j <= i for j in range(T)] for i in range(T)], dtype=bool).reshape(T, T)


def loops_multi_head_attention(x, params, n_heads, mask=None):
    p = {k: v.astype(np.float64) for k, v in params.items()}
    x64 = x.astype(np.float64)
    q, k, v = (loops_split_heads(x64 @ p["w_" + n] + p["b_" + n], n_heads) for n in "qkv")
    out, _ = loops_attention(q, k, v, mask)
    return (loops_merge_heads(out) @ p["w_o"] + p["b_o"]).astype(x.dtype)


def loops_feed_forward(x, params):
    p = {k: v.astype(np.float64) for k, v in params.items()}
    h = x.astype(np.float64) @ p["w_1"] + p["b_1"]
    h = np.array([max(v, 0.0) for v in h.ravel()]).reshape(h.shape)
    return (h @ p["w_2"] + p["b_2"]).astype(x.dtype)


def loops_encoder_block(x, params, n_heads, mask=None):
    h = loops_layer_norm(x + loops_multi_head_attention(x, params["attn"], n_heads, mask), **params["ln_1"])
    return loops_layer_norm(h + loops_feed_forward(h, params["ffn"]), **params["ln_2"])


def loops_softmax_backward(dy, y):
    fy, back = _rows(y.astype(np.float64))
    fdy, _ = _rows(dy.astype(np.float64))
    out = []
    for r_dy, r_y in zip(fdy, fy, strict=True):
        n = len(r_y)
        # the full Jacobian, J[i, j] = y_i (delta_ij - y_j), one row at a time
        out.append([sum(r_dy[i] * r_y[i] * ((i == j) - r_y[j]) for i in range(n)) for j in range(n)])
    return back(out).astype(y.dtype)


def loops_attention_backward(dout, q, k, v, weights):
    scale = 1 / math.sqrt(q.shape[-1])
    f = [a.astype(np.float64) for a in (dout, q, k, v, weights)]
    dq, dk, dv = (np.zeros(a.shape) for a in (q, k, v))
    for idx in np.ndindex(*q.shape[:-2]):
        g, qq, kk, vv, w = (a[idx] for a in f)
        dv[idx] = w.T @ g
        dw = g @ vv.T
        ds = np.array([[w[i, j] * (dw[i, j] - float(dw[i] @ w[i])) for j in range(w.shape[1])]
                       for i in range(w.shape[0])]).reshape(w.shape) * scale
        dq[idx], dk[idx] = ds @ kk, ds.T @ qq
    return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype)


# -- einsum, in the input's dtype ------------------------------------------------------------------------

def einsum_softmax(x):
    z = x - np.max(x, axis=-1, keepdims=True)
    e = np.exp(z)
    return e / np.einsum("...i->...", e)[..., None]


def einsum_attention(q, k, v, mask=None):
    s = np.einsum("...qd,...kd->...qk", q, k) / q.dtype.type(math.sqrt(q.shape[-1]))
    if mask is not None:
        s = np.where(mask, s, q.dtype.type(-np.inf))
    m = np.max(s, axis=-1, keepdims=True)
    e = np.exp(s - np.where(m == -np.inf, q.dtype.type(0), m))
    total = np.einsum("...k->...", e)[..., None]
    w = np.divide(e, total, out=np.zeros_like(e), where=total > 0)
    return np.einsum("...qk,...kd->...qd", w, v), w


def einsum_split_heads(x, n_heads):
    b, t, e = x.shape
    return np.einsum("bthd->bhtd", x.reshape(b, t, n_heads, e // n_heads))


def einsum_merge_heads(x):
    b, h, t, d = x.shape
    return np.ascontiguousarray(np.einsum("bhtd->bthd", x)).reshape(b, t, h * d)


def einsum_layer_norm(x, gamma, beta, eps=1e-5):
    c = x.shape[-1]
    xc = x - np.einsum("...c->...", x)[..., None] / x.dtype.type(c)
    var = np.einsum("...c,...c->...", xc, xc)[..., None] / x.dtype.type(c)
    return np.einsum("...c,c->...c", xc / np.sqrt(var + x.dtype.type(eps)), gamma) + beta


def einsum_positional_encoding(T, d):
    freq = np.exp(-np.log(10000.0) * np.arange(0, d, 2) / d)        # 1 / 10000^(2i/d)
    angle = np.einsum("p,i->pi", np.arange(T, dtype=np.float64), freq)
    return np.stack([np.sin(angle), np.cos(angle)], axis=-1).reshape(T, d)


def einsum_causal_mask(T):
    pos = np.arange(T)
    return pos[None, :] <= pos[:, None]


def einsum_multi_head_attention(x, params, n_heads, mask=None):
    proj = {n: np.einsum("bte,ef->btf", x, params["w_" + n]) + params["b_" + n] for n in "qkvo" if n != "o"}
    q, k, v = (einsum_split_heads(proj[n], n_heads) for n in "qkv")
    out, _ = einsum_attention(q, k, v, mask)
    return np.einsum("bte,ef->btf", einsum_merge_heads(out), params["w_o"]) + params["b_o"]


def einsum_feed_forward(x, params):
    h = np.einsum("...e,ef->...f", x, params["w_1"]) + params["b_1"]
    h = h * (h > 0)
    return np.einsum("...f,fe->...e", h, params["w_2"]) + params["b_2"]


def einsum_encoder_block(x, params, n_heads, mask=None):
    h = einsum_layer_norm(x + einsum_multi_head_attention(x, params["attn"], n_heads, mask), **params["ln_1"])
    return einsum_layer_norm(h + einsum_feed_forward(h, params["ffn"]), **params["ln_2"])


def einsum_softmax_backward(dy, y):
    return y * dy - y * np.einsum("...i,...i->...", dy, y)[..., None]


def einsum_attention_backward(dout, q, k, v, weights):
    dv = np.einsum("...qk,...qd->...kd", weights, dout)
    dw = np.einsum("...qd,...kd->...qk", dout, v)
    ds = einsum_softmax_backward(dw, weights) / q.dtype.type(math.sqrt(q.shape[-1]))
    return np.einsum("...qk,...kd->...qd", ds, k), np.einsum("...qk,...qd->...kd", ds, q), dv


# -- matmul, multiplicative mask, explicit casts ---------------------------------------------------------

def matmul_softmax(x):
    shifted = x - x.max(-1)[..., np.newaxis]
    e = np.exp(shifted)
    return (e * (1 / e.sum(-1))[..., np.newaxis]).astype(x.dtype)


def matmul_attention(q, k, v, mask=None):
    s = (q @ k.swapaxes(-1, -2)) * q.dtype.type(1 / np.sqrt(q.shape[-1]))
    keep = np.ones(s.shape, dtype=q.dtype) if mask is None else np.broadcast_to(mask, s.shape).astype(q.dtype)
    low = np.where(keep > 0, s, np.inf).min(-1, keepdims=True)
    low = np.where(np.isfinite(low), low, 0)                        # a row with no allowed key
    s = np.where(keep > 0, s, low)                                   # masked scores: finite, then zeroed below
    e = np.exp(s - s.max(-1, keepdims=True)) * keep
    total = e.sum(-1, keepdims=True)
    w = e / np.maximum(total, np.finfo(q.dtype).tiny)
    return w @ v, w


def matmul_split_heads(x, n_heads):
    b, t, e = x.shape
    return np.stack(np.split(x, n_heads, axis=-1), axis=1)


def matmul_merge_heads(x):
    b, h, t, d = x.shape
    return np.moveaxis(x, 1, 2).reshape(b, t, h * d)


def matmul_layer_norm(x, gamma, beta, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    sigma2 = ((x - mu) ** 2).mean(-1, keepdims=True)
    return ((x - mu) * (1 / np.sqrt(sigma2 + eps)).astype(x.dtype)) * gamma + beta


def matmul_positional_encoding(T, d):
    pe = np.empty((T, d), dtype=np.float32)
    pos = np.arange(T)[:, None]
    pe[:, ::2] = np.sin(pos / np.power(10000, np.arange(0, d, 2) / d))
    pe[:, 1::2] = np.cos(pos / np.power(10000, np.arange(0, d, 2) / d))
    return pe


def matmul_causal_mask(T):
    return np.tril(np.ones((T, T))) == 1


def matmul_multi_head_attention(x, params, n_heads, mask=None):
    b, t, e = x.shape
    w = np.concatenate([params["w_q"], params["w_k"], params["w_v"]], axis=1)     # (E, 3E)
    bias = np.concatenate([params["b_q"], params["b_k"], params["b_v"]])
    q, k, v = np.split(x @ w + bias, 3, axis=-1)
    heads = [matmul_split_heads(a, n_heads) for a in (q, k, v)]
    out, _ = matmul_attention(*heads, mask)
    return matmul_merge_heads(out) @ params["w_o"] + params["b_o"]


def matmul_feed_forward(x, params):
    return np.clip(x @ params["w_1"] + params["b_1"], 0, None) @ params["w_2"] + params["b_2"]


def matmul_encoder_block(x, params, n_heads, mask=None):
    a = matmul_multi_head_attention(x, params["attn"], n_heads, mask)
    h = matmul_layer_norm(x + a, params["ln_1"]["gamma"], params["ln_1"]["beta"])
    return matmul_layer_norm(h + matmul_feed_forward(h, params["ffn"]), params["ln_2"]["gamma"], params["ln_2"]["beta"])


def matmul_softmax_backward(dy, y):
    return (dy - (dy * y).sum(-1)[..., None]) * y


def matmul_attention_backward(dout, q, k, v, weights):
    dscores = matmul_softmax_backward(dout @ v.swapaxes(-1, -2), weights) / q.dtype.type(np.sqrt(q.shape[-1]))
    return dscores @ k, dscores.swapaxes(-1, -2) @ q, weights.swapaxes(-1, -2) @ dout


NAMES = ("softmax", "attention", "split_heads", "merge_heads", "layer_norm", "positional_encoding", "causal_mask",
         "multi_head_attention", "feed_forward", "encoder_block", "softmax_backward", "attention_backward")
STYLES = {style: {name: globals()[f"{style}_{name}"] for name in NAMES} for style in ("loops", "einsum", "matmul")}
