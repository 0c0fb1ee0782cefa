"""More wrong solutions, one mistake each, as a learner would write them: the issue's second list (each
one common and, before, told only "The values are wrong") and the rest of each mistake's family (wrong
axis, wrong operand, off by one, a missing or doubled term, swapped parameters, a wrong constant) in
every exercise where it can occur. ``FAMILIES``: (exercise, wrong function, words its diagnosis must
contain)."""
from __future__ import annotations

import math

import numpy as np
from wrong_solutions import _attention, _attention_grads, _ffn, _ln, _merge, _mha, _softmax, _split


def _scores(q, k):
    return (q @ np.swapaxes(k, -1, -2)) / q.dtype.type(math.sqrt(q.shape[-1]))


# -- softmax ---------------------------------------------------------------------------------------------

def softmax_whole_array_max(x):
    e = np.exp(x - x.max())
    return e / e.sum(axis=-1, keepdims=True)


def softmax_over_columns(x):
    return _softmax(x, axis=-2) if x.ndim > 1 else _softmax(x)


# -- attention -------------------------------------------------------------------------------------------

def attention_additive_01_mask(q, k, v, mask=None):
    scores = _scores(q, k)
    if mask is not None:
        scores = scores + mask
    w = _softmax(scores)
    return w @ v, w


def attention_mask_after_softmax(q, k, v, mask=None):
    w = _softmax(_scores(q, k))
    if mask is not None:
        w = w * mask
    return w @ v, w


def attention_softmax_over_queries(q, k, v, mask=None):
    scores = _scores(q, k)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    w = np.nan_to_num(_softmax(scores, axis=-2))
    return w @ v, w


# -- split / merge heads ---------------------------------------------------------------------------------

def split_heads_interleaved(x, n_heads):
    b, t, e = x.shape
    return np.moveaxis(x.reshape(b, t, e // n_heads, n_heads), -1, 1)


def merge_heads_interleaved(x):
    b, h, t, d = x.shape
    return np.moveaxis(x, 1, -1).reshape(b, t, d * h)


# -- layer norm ------------------------------------------------------------------------------------------

def layer_norm_axis_0(x, gamma, beta, eps=1e-5):
    return (x - x.mean(0, keepdims=True)) / np.sqrt(x.var(0, keepdims=True) + eps) * gamma + beta


def layer_norm_over_positions(x, gamma, beta, eps=1e-5):
    axis = -2 if x.ndim > 1 else -1
    return (x - x.mean(axis, keepdims=True)) / np.sqrt(x.var(axis, keepdims=True) + eps) * gamma + beta


def layer_norm_whole_array(x, gamma, beta, eps=1e-5):
    return (x - x.mean()) / np.sqrt(x.var() + eps) * gamma + beta


def layer_norm_no_gamma_beta(x, gamma, beta, eps=1e-5):
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps)


def layer_norm_no_beta(x, gamma, beta, eps=1e-5):
    return _ln(x, gamma, np.zeros_like(beta), eps)


def layer_norm_no_gamma(x, gamma, beta, eps=1e-5):
    return _ln(x, np.ones_like(gamma), beta, eps)


def layer_norm_gamma_beta_swapped(x, gamma, beta, eps=1e-5):
    return _ln(x, beta, gamma, eps)


# -- positions, causal mask ------------------------------------------------------------------------------

def positional_encoding_base_1000(T, d):
    angle = np.arange(T)[:, None] / 1000.0 ** (np.arange(0, d, 2) / d)
    pe = np.zeros((T, d))
    pe[:, 0::2], pe[:, 1::2] = np.sin(angle), np.cos(angle)
    return pe


def positional_encoding_from_1(T, d):
    angle = np.arange(1, T + 1)[:, None] / 10000.0 ** (np.arange(0, d, 2) / d)
    pe = np.zeros((T, d))
    pe[:, 0::2], pe[:, 1::2] = np.sin(angle), np.cos(angle)
    return pe


def causal_mask_one_up(T):
    return np.tri(T, k=1, dtype=bool)


def causal_mask_transposed(T):
    return np.tri(T, dtype=bool).T


# -- multi-head attention, feed-forward, block ------------------------------------------------------------

def mha_w_at_k(x, params, n_heads, mask=None):
    q, k, v = (_split(x @ params["w_" + n] + params["b_" + n], n_heads) for n in "qkv")
    _, w = _attention(q, k, v, mask)
    return _merge(w @ k) @ params["w_o"] + params["b_o"]


def mha_interleaved_heads(x, params, n_heads, mask=None):
    q, k, v = (split_heads_interleaved(x @ params["w_" + n] + params["b_" + n], n_heads) for n in "qkv")
    out, _ = _attention(q, k, v, mask)
    return merge_heads_interleaved(out) @ params["w_o"] + params["b_o"]


def mha_unscaled(x, params, n_heads, mask=None):
    q, k, v = (_split(x @ params["w_" + n] + params["b_" + n], n_heads) for n in "qkv")
    out, _ = _attention(q, k, v, mask, scale=1.0)
    return _merge(out) @ params["w_o"] + params["b_o"]


def mha_mask_ignored(x, params, n_heads, mask=None):
    return _mha(x, params, n_heads)


def feed_forward_no_b_1(x, params):
    return np.maximum(x @ params["w_1"], 0) @ params["w_2"] + params["b_2"]


def feed_forward_no_b_2(x, params):
    return np.maximum(x @ params["w_1"] + params["b_1"], 0) @ params["w_2"]


def encoder_block_ffn_residual_from_input(x, params, n_heads, mask=None):
    h = _ln(x + _mha(x, params["attn"], n_heads, mask), **params["ln_1"])
    return _ln(x + _ffn(h, params["ffn"]), **params["ln_2"])


def encoder_block_norms_swapped(x, params, n_heads, mask=None):
    h = _ln(x + _mha(x, params["attn"], n_heads, mask), **params["ln_2"])
    return _ln(h + _ffn(h, params["ffn"]), **params["ln_1"])


def encoder_block_mask_ignored(x, params, n_heads, mask=None):
    h = _ln(x + _mha(x, params["attn"], n_heads), **params["ln_1"])
    return _ln(h + _ffn(h, params["ffn"]), **params["ln_2"])


# -- backward ---------------------------------------------------------------------------------------------

def softmax_backward_y_dy(dy, y):
    return y * dy


def softmax_backward_sum_whole_array(dy, y):
    return y * (dy - (dy * y).sum())


def attention_backward_dk_unscaled(dout, q, k, v, weights):
    return _attention_grads(dout, q, k, v, weights, scale_dk=False)


FAMILIES = [
    ("softmax", softmax_over_columns, ["not the columns"]),
    ("layer_norm", layer_norm_over_positions, ["not the positions"]),
    ("attention_backward", attention_backward_dk_unscaled, ["dk is wrong", "scale"]),
    ("softmax", softmax_whole_array_max, ["subtract each row's max, not the whole array's"]),
    ("attention", attention_additive_01_mask, ["-inf"]),
    ("attention", attention_mask_after_softmax, ["after the softmax"]),
    ("attention", attention_softmax_over_queries, ["over the queries"]),
    ("split_heads", split_heads_interleaved, ["interleaved"]),
    ("merge_heads", merge_heads_interleaved, ["interleaved"]),
    ("layer_norm", layer_norm_axis_0, ["wrong axis"]),
    ("layer_norm", layer_norm_whole_array, ["wrong axis"]),
    ("layer_norm", layer_norm_no_gamma_beta, ["gamma and beta"]),
    ("layer_norm", layer_norm_no_beta, ["beta is not added"]),
    ("layer_norm", layer_norm_no_gamma, ["gamma is not applied"]),
    ("layer_norm", layer_norm_gamma_beta_swapped, ["swapped"]),
    ("positional_encoding", positional_encoding_base_1000, ["10000"]),
    ("positional_encoding", positional_encoding_from_1, ["starting at 0"]),
    ("causal_mask", causal_mask_one_up, ["One key too many"]),
    ("causal_mask", causal_mask_transposed, ["transposed", "keeps the diagonal"]),
    ("multi_head_attention", mha_w_at_k, ["w @ v"]),
    ("multi_head_attention", mha_interleaved_heads, ["interleaved"]),
    ("multi_head_attention", mha_unscaled, ["not scaled"]),
    ("multi_head_attention", mha_mask_ignored, ["mask is ignored"]),
    ("feed_forward", feed_forward_no_b_1, ["b_1"]),
    ("feed_forward", feed_forward_no_b_2, ["b_2"]),
    ("encoder_block", encoder_block_ffn_residual_from_input, ["feed-forward's residual"]),
    ("encoder_block", encoder_block_norms_swapped, ["ln_1 and ln_2 are swapped"]),
    ("encoder_block", encoder_block_mask_ignored, ["mask is ignored"]),
    ("softmax_backward", softmax_backward_y_dy, ["y * dy"]),
    ("softmax_backward", softmax_backward_sum_whole_array, ["whole array"]),
]
