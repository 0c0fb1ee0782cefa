"""Wrong solutions, one mistake each, as a learner would write them, with the words their diagnosis must
contain. ``LISTED``: the issue's list of mistakes that must each be named. ``MORE``: mistakes the
grader also names. ``OTHER``: mistakes it does not know, which must still fail."""
from __future__ import annotations

import math

import numpy as np


def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _split(x, n_heads):
    b, t, e = x.shape
    return x.reshape(b, t, n_heads, e // n_heads).transpose(0, 2, 1, 3)


def _merge(x):
    b, h, t, d = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, t, h * d)


def _attention(q, k, v, mask=None, scale=None, kt=False, fill=-np.inf, blocked_is_true=False):
    scale = q.dtype.type(1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    scores = (q @ (k.T if kt else np.swapaxes(k, -1, -2))) * scale
    if mask is not None:
        scores = np.where(mask, fill, scores) if blocked_is_true else np.where(mask, scores, fill)
    m = scores.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    e = np.exp(scores - m)
    s = e.sum(axis=-1, keepdims=True)
    w = e / np.where(s > 0, s, 1)
    return w @ v, w


def _mha(x, p, n_heads, mask=None, head_scale=True, project_out=True):
    q, k, v = (_split(x @ p["w_" + n] + p["b_" + n], n_heads) for n in "qkv")
    e = x.shape[-1]
    out, _ = _attention(q, k, v, mask, scale=None if head_scale else 1 / math.sqrt(e))
    merged = _merge(out)
    return merged @ p["w_o"] + p["b_o"] if project_out else merged


def _ln(x, gamma, beta, eps=1e-5):
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps) * gamma + beta


def _ffn(x, p):
    return np.maximum(x @ p["w_1"] + p["b_1"], 0) @ p["w_2"] + p["b_2"]


# -- softmax ---------------------------------------------------------------------------------------------

def softmax_no_max(x):
    e = np.exp(x)
    return e / e.sum(axis=-1, keepdims=True)


def softmax_axis_0(x):
    return _softmax(x, axis=0)


def softmax_whole_array(x):
    e = np.exp(x - x.max())
    return e / e.sum()


# -- attention -------------------------------------------------------------------------------------------

def attention_unscaled(q, k, v, mask=None):
    return _attention(q, k, v, mask, scale=1.0)


def attention_by_d(q, k, v, mask=None):
    return _attention(q, k, v, mask, scale=1 / q.shape[-1])


def attention_by_sqrt_dv(q, k, v, mask=None):
    return _attention(q, k, v, mask, scale=1 / math.sqrt(v.shape[-1]))


def attention_k_dot_t(q, k, v, mask=None):
    return _attention(q, k, v, mask, kt=True)                         # the lesson's 2-D code, on batches


def attention_mask_ignored(q, k, v, mask=None):
    return _attention(q, k, v)


def attention_mask_backwards(q, k, v, mask=None):
    return _attention(q, k, v, mask, blocked_is_true=True)


def attention_nan_row(q, k, v, mask=None):
    scores = (q @ np.swapaxes(k, -1, -2)) / q.dtype.type(math.sqrt(q.shape[-1]))
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))          # -inf - (-inf) = NaN on an empty row
    w = e / e.sum(axis=-1, keepdims=True)
    return w @ v, w


def attention_big_negative(q, k, v, mask=None):
    return _attention(q, k, v, mask, fill=q.dtype.type(-1e9))


# -- split / merge, layer norm, positions, causal mask ---------------------------------------------------

def split_heads_no_transpose(x, n_heads):
    b, t, e = x.shape
    return x.reshape(b, n_heads, t, e // n_heads)


def merge_heads_no_transpose(x):
    b, h, t, d = x.shape
    return x.reshape(b, t, h * d)


def layer_norm_eps_outside(x, gamma, beta, eps=1e-5):
    return (x - x.mean(-1, keepdims=True)) / (x.std(-1, keepdims=True) + eps) * gamma + beta


def layer_norm_unbiased(x, gamma, beta, eps=1e-5):
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, ddof=1, keepdims=True) + eps) * gamma + beta


def layer_norm_fixed_eps(x, gamma, beta, eps=1e-5):
    return _ln(x, gamma, beta)


def _pe(T, d, even, odd, two_i=True):
    i = np.arange(d // 2)
    angle = np.arange(T)[:, None] / 10000.0 ** ((2 * i if two_i else i) / d)
    pe = np.zeros((T, d))
    pe[:, 0::2], pe[:, 1::2] = even(angle), odd(angle)
    return pe


def positional_encoding_swapped(T, d):
    return _pe(T, d, np.cos, np.sin)


def positional_encoding_halves(T, d):
    angle = np.arange(T)[:, None] / 10000.0 ** (np.arange(0, d, 2) / d)
    return np.concatenate([np.sin(angle), np.cos(angle)], axis=1)


def positional_encoding_exponent_i(T, d):
    return _pe(T, d, np.sin, np.cos, two_i=False)


def causal_mask_no_diagonal(T):
    return np.tril(np.ones((T, T), dtype=bool), k=-1)


def causal_mask_reversed(T):
    return np.triu(np.ones((T, T), dtype=bool), k=1)


# -- multi-head attention, feed-forward, block ------------------------------------------------------------

def mha_scale_by_e(x, params, n_heads, mask=None):
    return _mha(x, params, n_heads, mask, head_scale=False)


def mha_no_output_projection(x, params, n_heads, mask=None):
    return _mha(x, params, n_heads, mask, project_out=False)


def mha_torch_layout(x, params, n_heads, mask=None):
    p = {k: (v.T if v.ndim == 2 else v) for k, v in params.items()}
    return _mha(x, p, n_heads, mask)


def feed_forward_no_relu(x, params):
    return (x @ params["w_1"] + params["b_1"]) @ params["w_2"] + params["b_2"]


def feed_forward_relu_twice(x, params):
    return np.maximum(_ffn(x, params), 0)


def encoder_block_pre_ln(x, params, n_heads, mask=None):
    h = x + _mha(_ln(x, **params["ln_1"]), params["attn"], n_heads, mask)
    return h + _ffn(_ln(h, **params["ln_2"]), params["ffn"])


def encoder_block_no_residual(x, params, n_heads, mask=None):
    h = _ln(_mha(x, params["attn"], n_heads, mask), **params["ln_1"])
    return _ln(_ffn(h, params["ffn"]), **params["ln_2"])


# -- backward ---------------------------------------------------------------------------------------------

def softmax_backward_diagonal(dy, y):
    return dy * y * (1 - y)


def softmax_backward_sign(dy, y):
    return y * ((dy * y).sum(-1, keepdims=True) - dy)


def _attention_grads(dout, q, k, v, weights, scale_dq=True, scale_dk=True, softmax_dk=True):
    scale = q.dtype.type(1 / math.sqrt(q.shape[-1]))
    dv = np.swapaxes(weights, -1, -2) @ dout
    dw = dout @ np.swapaxes(v, -1, -2)
    ds = weights * (dw - (dw * weights).sum(-1, keepdims=True))
    dq = (ds * scale if scale_dq else ds) @ k
    dk_from = (ds if softmax_dk else dw)
    dk = np.swapaxes(dk_from * scale if scale_dk else dk_from, -1, -2) @ q
    return dq, dk, dv


def attention_backward_dq_unscaled(dout, q, k, v, weights):
    return _attention_grads(dout, q, k, v, weights, scale_dq=False)


def attention_backward_unscaled(dout, q, k, v, weights):
    return _attention_grads(dout, q, k, v, weights, scale_dq=False, scale_dk=False)


def attention_backward_dk_skips_softmax(dout, q, k, v, weights):
    return _attention_grads(dout, q, k, v, weights, softmax_dk=False)


def attention_backward_dv_untransposed(dout, q, k, v, weights):
    dq, dk, dv = _attention_grads(dout, q, k, v, weights)
    return dq, dk, dv * np.asarray(1.5, dv.dtype)


# (exercise, wrong function, words the diagnosis must contain)
LISTED = [
    ("softmax", softmax_no_max, ["overflow", "subtract each row's max"]),
    ("softmax", softmax_axis_0, ["wrong axis"]),
    ("attention", attention_unscaled, ["not scaled", "sqrt(d)", "section 2"]),
    ("attention", attention_by_d, ["divided by d instead of sqrt(d)", "section 2"]),
    ("attention", attention_k_dot_t, ["k.T", "swapaxes"]),
    ("attention", attention_mask_ignored, ["mask is ignored"]),
    ("attention", attention_mask_backwards, ["mask is read backwards", "True means"]),
    ("attention", attention_nan_row, ["NaN", "no allowed key"]),
    ("layer_norm", layer_norm_eps_outside, ["eps is outside the square root"]),
    ("layer_norm", layer_norm_unbiased, ["unbiased"]),
    ("split_heads", split_heads_no_transpose, ["mixes tokens and heads", "transpose"]),
    ("positional_encoding", positional_encoding_swapped, ["sin and cos are swapped"]),
    ("causal_mask", causal_mask_no_diagonal, ["diagonal is excluded"]),
    ("multi_head_attention", mha_scale_by_e, ["1/sqrt(E)", "sqrt(E/H)", "section 2"]),
    ("multi_head_attention", mha_no_output_projection, ["output projection is left out"]),
    ("softmax_backward", softmax_backward_diagonal, ["dx is wrong", "diagonal"]),
    ("softmax_backward", softmax_backward_sign, ["dx has the wrong sign"]),
    ("attention_backward", attention_backward_dq_unscaled, ["dq is wrong", "right: dk, dv"]),
    ("attention_backward", attention_backward_unscaled, ["dq and dk are wrong"]),
    ("attention_backward", attention_backward_dk_skips_softmax, ["gradient with respect to k is wrong",
                                                                  "wrong: dk, right: dq, dv"]),
    ("attention_backward", attention_backward_dv_untransposed, ["gradient with respect to v is wrong",
                                                                 "wrong: dv, right: dq, dk"]),
]

MORE = [
    ("softmax", softmax_whole_array, ["whole array"]),
    ("attention", attention_big_negative, ["large negative number"]),
    ("attention", attention_by_sqrt_dv, ["sqrt of v's size"]),
    ("layer_norm", layer_norm_fixed_eps, ["eps argument is ignored"]),
    ("merge_heads", merge_heads_no_transpose, ["mixes tokens and heads"]),
    ("positional_encoding", positional_encoding_halves, ["interleaves"]),
    ("positional_encoding", positional_encoding_exponent_i, ["i instead of 2i"]),
    ("causal_mask", causal_mask_reversed, ["reversed"]),
    ("multi_head_attention", mha_torch_layout, ["x @ w.T"]),
    ("feed_forward", feed_forward_no_relu, ["ReLU is missing"]),
    ("feed_forward", feed_forward_relu_twice, ["after the second layer"]),
    ("encoder_block", encoder_block_pre_ln, ["pre-LN"]),
    ("encoder_block", encoder_block_no_residual, ["residual connections are missing"]),
]


def _layer_norm_beta_twice(x, gamma, beta, eps=1e-5):
    return _ln(x, gamma, 2 * beta, eps)


def _split_heads_reversed(x, n_heads):
    return _split(x, n_heads)[:, ::-1]                               # the heads in reverse order


def _attention_third_scale(q, k, v, mask=None):
    return _attention(q, k, v, mask, scale=1 / (3 * math.sqrt(q.shape[-1])))


def _pe_odd_exponent(T, d):
    angle = np.arange(T)[:, None] / 10000.0 ** ((np.arange(0, d, 2) + 1) / d)
    pe = np.zeros((T, d))
    pe[:, 0::2], pe[:, 1::2] = np.sin(angle), np.cos(angle)
    return pe


OTHER = [
    ("layer_norm", _layer_norm_beta_twice),
    ("split_heads", _split_heads_reversed),
    ("attention", _attention_third_scale),
    ("positional_encoding", _pe_odd_exponent),
]
