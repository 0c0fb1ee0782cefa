"""Wrong solutions that fail on a shape, as a learner would write them: one returns its outputs in the
wrong order, one reduces where it meant an elementwise function, two add axes to the mask, one of them
in a helper of its own. ``SHAPES``: (exercise, wrong function, words its report must contain)."""
from __future__ import annotations

import math

import numpy as np


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def attention_returns_w_out(q, k, v, mask=None):
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    w = _softmax(scores)
    return w, w @ v


def feed_forward_max_not_maximum(x, params):
    h = np.max(x @ params["w_1"] + params["b_1"], 0)
    return h @ params["w_2"] + params["b_2"]


def attention_mask_adds_axes(q, k, v, mask=None):
    scores = q @ np.swapaxes(k, -1, -2) / q.dtype.type(math.sqrt(q.shape[-1]))
    if mask is not None:
        mask = mask[None, None]                       # (1, 1, Tq, Tk) for (B, H, Tq, Tk)
        scores = np.where(mask, scores, -np.inf)
    m = scores.max(axis=-1, keepdims=True)
    e = np.exp(scores - np.where(np.isfinite(m), m, 0))
    s = e.sum(axis=-1, keepdims=True)
    w = e / np.where(s > 0, s, 1)
    return w @ v, w


def split_heads(x, n_heads):
    b, t, e = x.shape
    return x.reshape(b, t, n_heads, e // n_heads).transpose(0, 2, 1, 3)


def merge_heads(x):
    b, h, t, d = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, t, h * d)


def attention_transposed_mask(q, k, v, mask=None):
    scores = q @ np.swapaxes(k, -1, -2) / q.dtype.type(math.sqrt(q.shape[-1]))
    if mask is not None:
        scores = np.where(mask.T, scores, -np.inf)
    w = _softmax(scores)
    return w @ v, w


def multi_head_attention(x, params, n_heads, mask=None):
    q, k, v = (split_heads(x @ params["w_" + n] + params["b_" + n], n_heads) for n in "qkv")
    scores = q @ np.swapaxes(k, -1, -2) / x.dtype.type(math.sqrt(q.shape[-1]))
    if mask is not None and mask.ndim > 2:
        mask = mask[:, None]                          # a batched mask (B, T, T) gets its head axis
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    w = np.exp(scores - scores.max(axis=-1, keepdims=True))
    w = w / w.sum(axis=-1, keepdims=True)
    out = merge_heads(w @ v)
    return out @ params["w_o"] + params["b_o"]


SHAPES = [
    ("attention", attention_transposed_mask, ["np.where(mask.T, scores, -np.inf)", "transposed", "mask (3, 5)"]),
    ("attention", attention_returns_w_out, ["wrong order", "(out, weights)"]),
    ("feed_forward", feed_forward_max_not_maximum, ["lost", "np.maximum"]),
    ("attention", attention_mask_adds_axes, ["more axes", "mask"]),
    ("multi_head_attention", multi_head_attention, [
        "out = merge_heads(w @ v) passed x (1, 1, 1, 3, 4) float64 to merge_heads", "b, h, t, d = x.shape",
        "mask (1, 1, 1, 3)", "4 axes, it got 5"]),
]
