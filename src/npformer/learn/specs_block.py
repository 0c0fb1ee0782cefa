"""Exercises 3 to 10: split_heads, merge_heads, layer_norm, positional_encoding, multi_head_attention,
feed_forward and encoder_block, each with its cases and its known mistakes (``Spec``, ``checks.py``);
every mistake names its family (``families.py``)."""
from __future__ import annotations

import math

import numpy as np

from ..nn import merge_heads, split_heads
from ..ops import causal_mask, sinusoidal_positions
from .builton import BuiltOn, _block_on, _mha_on
from .checks import Mistake, Spec, make_case
from .references import (
    _block,
    _ffn,
    _interleaved_merge,
    _interleaved_split,
    _layer_norm,
    _mha,
    _normal,
    _rng,
)

# -- 3. split_heads / merge_heads ------------------------------------------------------------------------

def _split_cases(dtype):
    ref = lambda x, h: {"heads": split_heads(x, h)}                    # noqa: E731
    rng = _rng(3)
    return [make_case(ref, (_normal(rng, s), h), dtype)
            for s, h in (((2, 3, 8), 2), ((1, 5, 12), 3), ((2, 1, 8), 4), ((1, 4, 6), 1))]


def _merge_cases(dtype):
    ref = lambda x: {"merged": merge_heads(x)}                         # noqa: E731
    rng = _rng(4)
    return [make_case(ref, (_normal(rng, s),), dtype) for s in ((2, 2, 3, 4), (1, 3, 5, 2), (2, 4, 1, 3), (1, 1, 4, 5))]


SPLIT_HEADS = Spec(("x", "n_heads"), ("heads",), _split_cases, (
    Mistake("Reshaped straight to (B, H, T, E/H): that mixes tokens and heads. Reshape to (B, T, H, E/H), "
            "then transpose to (B, H, T, E/H)", 3,
            wrong=lambda x, h: {"heads": x.reshape(x.shape[0], h, x.shape[1], x.shape[2] // h)}, family="layout"),
    Mistake("The heads are interleaved: reshape(B, T, E/H, H) gives head h every H-th feature; head h owns the "
            "E/H features in a row from h * E/H, so reshape to (B, T, H, E/H), then transpose", 3,
            wrong=lambda x, h: {"heads": _interleaved_split(x, h)}, family="layout"),
), section=3)

MERGE_HEADS = Spec(("x",), ("merged",), _merge_cases, (
    Mistake("Reshaped straight to (B, T, E): that mixes tokens and heads. Transpose (B, H, T, D) to "
            "(B, T, H, D) first, then reshape", 3,
            wrong=lambda x: {"merged": x.reshape(x.shape[0], x.shape[2], -1)}, family="layout"),
    Mistake("The heads are interleaved: head h's D features go in a row at h * D, so transpose (B, H, T, D) to "
            "(B, T, H, D), not (B, T, D, H), then reshape", 3,
            wrong=lambda x: {"merged": _interleaved_merge(x)}, family="layout"),
), section=3)


# -- 4. layer_norm --------------------------------------------------------------------------------------

def _ln_cases(dtype):
    rng = _rng(5)

    def args(shape, scale, shift):
        c = shape[-1]
        return _normal(rng, shape, scale) + shift, 1 + _normal(rng, c, 0.2), _normal(rng, c, 0.2)

    return [
        make_case(_layer_norm, args((2, 3, 8), 2.0, 1.0), dtype),
        make_case(_layer_norm, args((1, 1, 16), 1.0, 0.0), dtype, note="T = 1"),
        make_case(_layer_norm, args((4, 6), 0.01, 0.0), dtype, note="small variance (about 1e-4)"),
        make_case(_layer_norm, (*args((2, 5, 4), 1.0, -3.0), 1e-3), dtype, note="eps=1e-3"),
    ]


def _ln_eps_outside(x, gamma, beta, eps=1e-5):
    xc = x - x.mean(axis=-1, keepdims=True)                            # (..., C)
    return {"y": xc / (x.std(axis=-1, keepdims=True) + eps) * gamma + beta}


def _ln_unbiased(x, gamma, beta, eps=1e-5):
    xc = x - x.mean(axis=-1, keepdims=True)                            # (..., C)
    return {"y": xc / np.sqrt(x.var(axis=-1, ddof=1, keepdims=True) + eps) * gamma + beta}


LAYER_NORM = Spec(("x", "gamma", "beta", "eps"), ("y",), _ln_cases, (
    Mistake("eps is outside the square root, (x - mean) / (std + eps), as in the lesson's toy; the paper and "
            "PyTorch divide by sqrt(var + eps)", 3, wrong=_ln_eps_outside, family="step order"),
    Mistake("The variance is the unbiased one (divided by C - 1): layer norm uses the biased variance, "
            "divided by C (np.var's default, ddof=0)", 3, wrong=_ln_unbiased, family="off by one"),
    Mistake("The eps argument is ignored: use the eps the caller passes, 1e-5 is only its default", 3,
            wrong=lambda x, gamma, beta, eps=1e-5: _layer_norm(x, gamma, beta), family="wrong constant"),
    Mistake("Normalised over the wrong axis: the mean and variance are each token's, over the LAST axis "
            "(axis=-1, keepdims=True)", 3, wrong=lambda x, g, b, eps=1e-5: _layer_norm(x, g, b, eps, 0),
            family="wrong axis"),
    Mistake("Normalised over the wrong axis: the mean and variance are each token's, over the LAST axis, not "
            "the positions", 3, wrong=lambda x, g, b, eps=1e-5: _layer_norm(x, g, b, eps, -2 if x.ndim > 1 else -1),
            family="wrong axis"),
    Mistake("Normalised over the wrong axis: the mean and variance are each token's, over the LAST axis, not the "
            "whole array's", 3, wrong=lambda x, g, b, eps=1e-5: _layer_norm(x, g, b, eps, None), family="wrong axis"),
    Mistake("gamma and beta are not applied: scale the normalised x by gamma, then add beta", 3,
            wrong=lambda x, g, b, eps=1e-5: _layer_norm(x, np.ones_like(g), np.zeros_like(b), eps),
            family="missing term"),
    Mistake("beta is not added: y = (x - mean) / sqrt(var + eps) * gamma + beta", 3,
            wrong=lambda x, g, b, eps=1e-5: _layer_norm(x, g, np.zeros_like(b), eps), family="missing term"),
    Mistake("gamma is not applied: y = (x - mean) / sqrt(var + eps) * gamma + beta", 3,
            wrong=lambda x, g, b, eps=1e-5: _layer_norm(x, np.ones_like(g), b, eps), family="missing term"),
    Mistake("gamma and beta are swapped: gamma scales, beta shifts, y = x_hat * gamma + beta", 3,
            wrong=lambda x, g, b, eps=1e-5: _layer_norm(x, b, g, eps), family="swapped"),
), section=3)


# -- 5. positional_encoding, 6. causal_mask ---------------------------------------------------------------

def _pe_cases(dtype):
    ref = lambda t, d: {"pe": sinusoidal_positions(t, d, np.float64)}  # noqa: E731
    return [make_case(ref, (t, d), None) for t, d in ((6, 8), (1, 4), (50, 16), (3, 2))]


def _pe_swapped(t, d):
    pos = np.arange(t)[:, None] / np.power(10000.0, np.arange(0, d, 2) / d)   # (T, d/2)
    out = np.empty((t, d))
    out[:, 0::2], out[:, 1::2] = np.cos(pos), np.sin(pos)
    return {"pe": out}


def _pe_other(t, d, base=10000.0, start=0):
    """The sinusoids with another ``base`` or positions counted from ``start``."""
    pos = np.arange(start, start + t)[:, None] / np.power(base, np.arange(0, d, 2) / d)   # (T, d/2)
    out = np.empty((t, d))
    out[:, 0::2], out[:, 1::2] = np.sin(pos), np.cos(pos)
    return {"pe": out}


def _pe_halves(t, d):
    pe = sinusoidal_positions(t, d, np.float64)                        # (T, d)
    return {"pe": np.concatenate([pe[:, 0::2], pe[:, 1::2]], axis=1)}


def _pe_exponent_i(t, d):
    pos = np.arange(t)[:, None] / np.power(10000.0, np.arange(d // 2) / d)   # (T, d/2)
    out = np.empty((t, d))
    out[:, 0::2], out[:, 1::2] = np.sin(pos), np.cos(pos)
    return {"pe": out}


POSITIONAL_ENCODING = Spec(("T", "d"), ("pe",), _pe_cases, (
    Mistake("sin and cos are swapped: sin goes on the even dimensions 2i, cos on the odd ones 2i+1", 4,
            wrong=_pe_swapped, family="swapped"),
    Mistake("All the sines come first and all the cosines after: the paper interleaves them, sin on 2i and "
            "cos on 2i+1", 4, wrong=_pe_halves, family="layout"),
    Mistake("The exponent uses i instead of 2i: the frequency of pair i is 1 / 10000^(2i/d)", 4,
            wrong=_pe_exponent_i, family="wrong constant"),
    Mistake("The base is not 10000: the frequency of pair i is 1 / 10000^(2i/d)", 4,
            wrong=lambda t, d: _pe_other(t, d, base=1000.0), family="wrong constant"),
    Mistake("The positions start at 1: row t is position t, np.arange(T), starting at 0", 4,
            wrong=lambda t, d: _pe_other(t, d, start=1), family="off by one"),
), section=4, dtypes=(None,))

# -- 7. multi_head_attention, 8. feed_forward, 9. encoder_block --------------------------------------------

def _mha_params(rng, e):
    p = {f"w_{n}": _normal(rng, (e, e), 1 / math.sqrt(e)) for n in "qkvo"}
    p.update({f"b_{n}": _normal(rng, e, 0.1) for n in "qkvo"})
    return p


def _ffn_params(rng, e, f):
    return {"w_1": _normal(rng, (e, f), 1 / math.sqrt(e)), "b_1": _normal(rng, f, 0.1),
            "w_2": _normal(rng, (f, e), 1 / math.sqrt(f)), "b_2": _normal(rng, e, 0.1)}


def _block_params(rng, e, f):
    ln = lambda: {"gamma": 1 + _normal(rng, e, 0.2), "beta": _normal(rng, e, 0.2)}  # noqa: E731
    return {"attn": _mha_params(rng, e), "ffn": _ffn_params(rng, e, f), "ln_1": ln(), "ln_2": ln()}


def _mha_cases(dtype):
    ref = lambda x, p, h, mask=None: {"out": _mha(x, p, h, mask)}      # noqa: E731
    rng = _rng(7)
    pad = np.array([True, True, False])[None, None, None, :]           # (1, 1, 1, Tk) key padding
    both = causal_mask(4, 4) & np.array([[True] * 4, [True, True, True, False]])[:, None, None, :]   # (B, 1, T, T)
    return [
        make_case(ref, (_normal(rng, (2, 4, 8)), _mha_params(rng, 8), 2), dtype, note="E = 8, H = 2"),
        make_case(ref, (_normal(rng, (1, 1, 6)), _mha_params(rng, 6), 3), dtype, note="T = 1"),
        make_case(ref, (_normal(rng, (2, 5, 12)), _mha_params(rng, 12), 4, causal_mask(5, 5)), dtype,
                  note="causal mask (5, 5)"),
        make_case(ref, (_normal(rng, (1, 3, 4)), _mha_params(rng, 4), 1, pad), dtype, note="mask (1, 1, 1, 3)"),
        make_case(ref, (_normal(rng, (2, 4, 8)), _mha_params(rng, 8), 2, both), dtype,
                  note="causal and padding mask (B, 1, T, T)"),
    ]


MULTI_HEAD_ATTENTION = Spec(("x", "params", "n_heads", "mask"), ("out",), _mha_cases, (
    Mistake("Each head is scaled by 1/sqrt(E): a head's vectors have size E/H, so divide by sqrt(E/H)", 2,
            wrong=lambda x, p, h, mask=None: {"out": _mha(x, p, h, mask, scale=1 / math.sqrt(x.shape[-1]))},
            family="wrong operand"),
    Mistake("The scores are not scaled: divide each head's q k^T by sqrt(E/H)", 2,
            wrong=lambda x, p, h, mask=None: {"out": _mha(x, p, h, mask, scale=1.0)}, family="missing term"),
    Mistake("The output projection is left out: after merging the heads, apply x @ w_o + b_o", 3,
            wrong=lambda x, p, h, mask=None: {"out": _mha(x, p, h, mask, project_out=False)}, family="missing term"),
    Mistake("The weights are applied as x @ w.T (PyTorch's layout): the contract says x @ w + b", 3,
            wrong=lambda x, p, h, mask=None: {"out": _mha(x, p, h, mask, transposed=True)}, family="swapped"),
    Mistake("The weights multiply k (w @ k): each head's output is w @ v", 3,
            wrong=lambda x, p, h, mask=None: {"out": _mha(x, p, h, mask, value="k")}, family="wrong operand"),
    Mistake("The heads are interleaved: head h owns the E/H features in a row from h * E/H; split with "
            "reshape(B, T, H, E/H), merge back the same way", 3,
            wrong=lambda x, p, h, mask=None: {"out": _mha(x, p, h, mask, interleaved=True)}, family="layout"),
    Mistake("The mask is ignored: pass it to the attention of every head", 3,
            wrong=lambda x, p, h, mask=None: {"out": _mha(x, p, h)}, family="missing term"),
), section=3, built_on=BuiltOn("multi-head attention", ("split_heads", "attention", "merge_heads"), _mha_on))


def _ffn_cases(dtype):
    ref = lambda x, p: {"y": _ffn(x, p)}                               # noqa: E731
    rng = _rng(8)
    return [make_case(ref, (_normal(rng, s), _ffn_params(rng, s[-1], f)), dtype)
            for s, f in (((2, 3, 8), 16), ((1, 1, 4), 6), ((3, 8), 5))]


FEED_FORWARD = Spec(("x", "params"), ("y",), _ffn_cases, (
    Mistake("The ReLU is missing: relu(x @ w_1 + b_1) before the second layer", 3,
            wrong=lambda x, p: {"y": _ffn(x, p, relu_1=False)}, family="missing term"),
    Mistake("A ReLU is applied after the second layer too: only the hidden layer has one", 3,
            wrong=lambda x, p: {"y": _ffn(x, p, relu_2=True)}, family="doubled term"),
    Mistake("The first bias is missing: relu(x @ w_1 + b_1)", 3,
            wrong=lambda x, p: {"y": _ffn(x, p, bias_1=False)}, family="missing term"),
    Mistake("The second bias is missing: h @ w_2 + b_2", 3,
            wrong=lambda x, p: {"y": _ffn(x, p, bias_2=False)}, family="missing term"),
), section=3)


def _block_cases(dtype):
    ref = lambda x, p, h, mask=None: {"out": _block(x, p, h, mask)}    # noqa: E731
    rng = _rng(9)
    return [
        make_case(ref, (_normal(rng, (2, 3, 8)), _block_params(rng, 8, 16), 2), dtype, note="E = 8, H = 2, F = 16"),
        make_case(ref, (_normal(rng, (1, 1, 4)), _block_params(rng, 4, 8), 1), dtype, note="T = 1"),
        make_case(ref, (_normal(rng, (1, 4, 6)), _block_params(rng, 6, 12), 3, causal_mask(4, 4)), dtype,
                  note="causal mask (4, 4)"),
    ]


ENCODER_BLOCK = Spec(("x", "params", "n_heads", "mask"), ("out",), _block_cases, (
    Mistake("This is the pre-LN block (normalise, sub-layer, add): the paper's block adds the residual first "
            "and normalises after, layer_norm(x + sublayer(x))", 3,
            wrong=lambda x, p, h, mask=None: {"out": _block(x, p, h, mask, pre_ln=True)}, family="step order"),
    Mistake("The residual connections are missing: add each sub-layer's input back, layer_norm(x + sublayer(x))",
            3, wrong=lambda x, p, h, mask=None: {"out": _block(x, p, h, mask, residual=False)},
            family="missing term"),
    Mistake("The feed-forward's residual is the block's input x: it is the attention sub-layer's output h, "
            "layer_norm(h + feed_forward(h))", 3,
            wrong=lambda x, p, h, mask=None: {"out": _block(x, p, h, mask, ffn_keeps_x=True)}, family="wrong operand"),
    Mistake("ln_1 and ln_2 are swapped: ln_1 follows the attention, ln_2 the feed-forward", 3,
            wrong=lambda x, p, h, mask=None: {"out": _block(x, p, h, mask, swap_norms=True)}, family="swapped"),
    Mistake("The mask is ignored: pass it to the multi-head attention", 3,
            wrong=lambda x, p, h, mask=None: {"out": _block(x, p, h)}, family="missing term"),
), section=3, built_on=BuiltOn("encoder block", ("multi_head_attention", "layer_norm", "feed_forward"), _block_on))

