"""The twelve exercises of ``npformer learn``, in the lesson's order, each with its contract, one hint,
the workbook's stub, a plain-NumPy reference solution, and its grading (``checks.py``).

Expected values come from npformer's own verified ops in float64 (``ops.softmax_forward``,
``ops.attention_forward``, ``ops.layernorm_forward``, ``nn.split_heads``...); every known mistake is
the same op with that one mistake put in, so a diagnosis names it only when the learner's numbers are
the mistake's numbers. Dimension legend: B batch, H heads, T / Tq / Tk positions, E model width,
D = E / H head size, Dv value size, F feed-forward width.
"""
from __future__ import annotations

import copy
import functools
import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..nn import merge_heads, split_heads
from ..ops import (
    attention_backward,
    attention_forward,
    causal_mask,
    layernorm_forward,
    sinusoidal_positions,
    softmax_backward,
    softmax_forward,
)
from ..ops.attention import additive_mask
from .checks import Case, Mistake, Spec, Verdict, as64, close, judge, make_case, section_title
from .texts import CONTRACTS, SOLUTIONS
from .trial import LocalTrials
from .wire import ChannelBroken

__all__ = ["EXERCISES", "Exercise", "Verdict", "section_title"]


@dataclass(frozen=True)
class Exercise:
    """One exercise: its function's name and signature, the lesson section it practises, the stub's
    contract and hint, the stub's and the reference solution's source, and its grading: ``cases()`` (run by
    the learner's code, ``trial.py``), ``judge(trials)`` (the verdict on what they gave, ``checks.py``) and
    ``grade(fn)``, both in this process."""
    name: str
    signature: str
    section: int
    contract: str
    hint: str
    stub: str
    solution: str
    spec: Spec = field(repr=False, compare=False)

    def cases(self) -> tuple[Case, ...]:
        """Every case of every dtype, in grading order (built once per process)."""
        return _cases(self.name)

    def judge(self, trials) -> Verdict:
        """The verdict on ``trials.run(name)``'s outcomes; ``trials`` also runs the helpers of ``built_on``."""
        explain = None
        if self.spec.built_on is not None:
            built_on = self.spec.built_on
            explain = lambda index, case, got: built_on.explain(trials, self.name, index, case, got)  # noqa: E731
        return judge(self.spec, self.cases(), trials.run(self.name), explain)

    def compose(self, fn, index: int, theirs) -> np.ndarray:
        """The correct composition of case ``index`` on ``fn``'s helpers named in ``theirs`` (in the child)."""
        return self.spec.built_on.compose(fn, theirs, self.cases()[index])

    def grade(self, fn) -> Verdict:
        """Grade ``fn`` on every case, in this process; exceptions ``fn`` raises propagate unchanged."""
        if not callable(fn):
            raise TypeError(f"fn must be a function, got {type(fn).__name__}")
        return self.judge(LocalTrials(EXERCISES, {self.name: fn}, catch=False))


@functools.cache
def _cases(name: str) -> tuple[Case, ...]:
    spec = EXERCISES[name].spec
    return tuple(c for dtype in spec.dtypes for c in spec.cases(np.dtype(dtype) if dtype is not None else None))


def _stub(signature: str, contract: str, hint: str) -> str:
    body = "\n".join(("    " + line).rstrip() for line in contract.strip("\n").split("\n"))
    name = signature.split("(")[0]
    return (f"def {signature}:\n    \"\"\"{body.lstrip()}\n\n    Hint: {hint}\n    \"\"\"\n"
            f"    raise NotImplementedError(\"{name}\")\n")


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _normal(rng, shape, scale=1.0):
    return rng.normal(size=shape) * scale


# -- references (float64, npformer's ops) and their known-wrong variants ----------------------------------

def _softmax(x, axis=-1):
    if axis is None:
        y, _ = softmax_forward(x.reshape(-1))                         # (N,) one softmax over everything
        return y.reshape(x.shape)
    y, _ = softmax_forward(np.moveaxis(x, axis, -1))
    return np.moveaxis(y, -1, axis)


def _attention(q, k, v, mask=None, scale=None, scores=None):
    """npformer's attention, or with one mistake: another ``scale``, or the given raw ``scores`` (q k^T
    computed wrongly) in place of q k^T."""
    if scores is None:
        out, w, _ = attention_forward(q, k, v, mask=mask, scale=scale)
        return {"out": out, "weights": w}
    s = scores * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))   # (..., Tq, Tk)
    if mask is not None:
        s = s + additive_mask(mask, s.dtype)
    w = _softmax(s)                                                    # (..., Tq, Tk)
    return {"out": np.matmul(w, v), "weights": w}


def _layer_norm(x, gamma, beta, eps=1e-5):
    return {"y": layernorm_forward(x, gamma, beta, eps)[0]}


def _mha(x, params, n_heads, mask=None, scale=None, project_out=True, transposed=False):
    """Multi-head self-attention from npformer's split_heads, attention and merge_heads."""
    p = {k: (v.T if transposed and v.ndim == 2 else v) for k, v in params.items()}
    q, k, v = (split_heads(x @ p[f"w_{n}"] + p[f"b_{n}"], n_heads) for n in "qkv")   # (B, H, T, D) each
    d = x.shape[-1] // n_heads
    out, _, _ = attention_forward(q, k, v, mask=mask, scale=scale if scale is not None else 1 / math.sqrt(d))
    merged = merge_heads(out)                                          # (B, T, E)
    return merged @ p["w_o"] + p["b_o"] if project_out else merged


def _ffn(x, params, relu_1=True, relu_2=False):
    h = x @ params["w_1"] + params["b_1"]                              # (..., F)
    h = np.maximum(h, 0) if relu_1 else h
    y = h @ params["w_2"] + params["b_2"]                              # (..., E)
    return np.maximum(y, 0) if relu_2 else y


def _ln(x, p):
    return layernorm_forward(x, p["gamma"], p["beta"], 1e-5)[0]


def _block(x, params, n_heads, mask=None, pre_ln=False, residual=True):
    keep = x if residual else 0
    if pre_ln:
        h = x + _mha(_ln(x, params["ln_1"]), params["attn"], n_heads, mask)
        return h + _ffn(_ln(h, params["ln_2"]), params["ffn"])
    h = _ln(keep + _mha(x, params["attn"], n_heads, mask), params["ln_1"])
    keep = h if residual else 0
    return _ln(keep + _ffn(h, params["ffn"]), params["ln_2"])


# -- an exercise built on earlier ones, wrong only because one of them is ----------------------------------

def _mha_on(helpers, x, params, n_heads, mask=None):
    """The correct multi-head attention, calling ``helpers`` (exercise name -> function) for its steps."""
    q, k, v = (helpers["split_heads"](x @ params[f"w_{n}"] + params[f"b_{n}"], n_heads) for n in "qkv")
    out, _ = helpers["attention"](q, k, v, mask)                      # (B, H, T, D)
    return helpers["merge_heads"](out) @ params["w_o"] + params["b_o"]  # (B, T, E)


def _block_on(helpers, x, params, n_heads, mask=None):
    """The correct post-LN encoder block, calling ``helpers`` for its steps."""
    ln = helpers["layer_norm"]
    h = ln(x + helpers["multi_head_attention"](x, params["attn"], n_heads, mask), **params["ln_1"])
    return ln(h + helpers["feed_forward"](h, params["ffn"]), **params["ln_2"])   # (B, T, E)


_CORRECT_HELPERS = {      # the exercises' contracts, from npformer's ops
    "split_heads": split_heads,
    "merge_heads": merge_heads,
    "attention": lambda q, k, v, mask=None: attention_forward(q, k, v, mask=mask)[:2],   # (out, weights)
    "layer_norm": lambda x, gamma, beta, eps=1e-5: layernorm_forward(x, gamma, beta, eps)[0],
    "feed_forward": _ffn,
    "multi_head_attention": _mha,
}


@dataclass(frozen=True)
class BuiltOn:
    """For an exercise whose code calls earlier exercises (``uses``): when the learner's output is what the
    correct ``build(helpers, *args)`` gives with the learner's own failing helpers in place of the correct
    ones, say that the fault is in those helpers. The learner's helpers are the functions of those names
    next to theirs (the workbook's module, or the notebook's namespace). ``explain`` runs in the parent and
    asks ``trials`` to run the helpers and the composition; ``compose`` is what the child runs for it."""
    what: str
    uses: tuple[str, ...]
    build: Callable

    def explain(self, trials, exercise: str, index: int, case: Case, got: dict) -> tuple[str, int] | None:
        failing = [n for n in self.uses if _fails_its_check(trials, exercise, n)]
        if not failing:
            return None
        try:
            built = trials.compose(exercise, index, failing)
        except ChannelBroken:
            raise
        except Exception:                   # their helper cannot even run here: nothing to claim
            return None
        (name,) = got
        if not (built.is_array and built.exact and built.data is not None and built.data.dtype.kind == "f"
                and built.shape == got[name].shape and close(got[name], built.data.astype(np.float64), case.dtype)):
            return None
        names = " and ".join(failing)
        which = "which fails its own check" if len(failing) == 1 else "which fail their own checks"
        return (f"This matches a correct {self.what} built on your {names}, {which}: fix {names} first",
                EXERCISES[failing[0]].section)

    def compose(self, fn, theirs, case: Case) -> np.ndarray:
        mine = getattr(fn, "__globals__", None) or {}
        helpers = {n: mine[n] if n in theirs else _CORRECT_HELPERS[n] for n in self.uses}
        with np.errstate(all="ignore"):
            return self.build(helpers, *copy.deepcopy(case.args))


def _fails_its_check(trials, exercise: str, helper: str) -> bool:
    """Whether the learner's ``helper`` (next to their ``exercise``) fails that exercise's own check (an
    exception counts as not failing: it is no wrong number to explain)."""
    spec = EXERCISES[helper]
    try:
        return judge(spec.spec, spec.cases(), trials.run(exercise, helper)).status == "fail"
    except ChannelBroken:
        raise
    except Exception:
        return False


def _attention_grads(dout, q, k, v, weights, *, scale_dq=True, scale_dk=True):
    scale = 1 / math.sqrt(q.shape[-1])
    dq, dk, dv = attention_backward(dout, (q, k, v, weights, None, scale))
    return {"dq": dq if scale_dq else dq / scale, "dk": dk if scale_dk else dk / scale, "dv": dv}


# -- 1. softmax ----------------------------------------------------------------------------------------

def _softmax_cases(dtype):
    ref = lambda x: {"y": _softmax(x)}                                 # noqa: E731
    rng = _rng(1)
    cases = [make_case(ref, (_normal(rng, s, 2.0),), dtype) for s in ((2, 3, 5), (1, 1, 7), (4,), (3, 1), (1, 6))]
    big = 800.0 + _normal(rng, (2, 6), 100.0)                          # exp overflows: float64 past 709
    cases.append(make_case(ref, (big,), dtype, note="scores around 800", tags={"large"}))
    return cases


def _overflowed(got, case):
    return "large" in case.tags and not np.isfinite(got["y"]).all()


SOFTMAX = Spec(("x",), ("y",), _softmax_cases, (
    Mistake("exp overflowed to inf, giving inf or NaN: subtract each row's max before exp; "
            "softmax(x - max) = softmax(x), and the largest exp is then 1", 1, shows=_overflowed),
    Mistake("Normalised over the wrong axis: every row along the LAST axis must sum to 1; take the max and "
            "the sum with axis=-1, keepdims=True", 1, wrong=lambda x: {"y": _softmax(x, 0)}),
    Mistake("Normalised over the wrong axis: every row along the LAST axis must sum to 1, not the columns",
            1, wrong=lambda x: {"y": _softmax(x, -2)} if x.ndim > 1 else {"y": _softmax(x)}),
    Mistake("Normalised over the whole array at once: every row along the LAST axis must sum to 1 on its own "
            "(axis=-1, keepdims=True)", 1, wrong=lambda x: {"y": _softmax(x, None)}),
), section=1)


# -- 2. attention --------------------------------------------------------------------------------------

def _mixed_mask(rng, shape):
    """A boolean mask where every query row has at least one allowed and one blocked key."""
    m = rng.random(shape) < 0.5
    m[..., 0], m[..., -1] = True, False
    return m


def _attention_cases(dtype):
    ref = lambda q, k, v, mask=None: _attention(q, k, v, mask)         # noqa: E731
    rng = _rng(2)

    def qkv(lead, tq, tk, d, dv):
        return _normal(rng, (*lead, tq, d)), _normal(rng, (*lead, tk, d)), _normal(rng, (*lead, tk, dv))

    blocked = _mixed_mask(rng, (2, 1, 4, 6))
    blocked[0, 0, 1] = False                                           # query 1 of batch 0 reads nothing
    return [
        # B = Tk = D: k.T on a 3-D k gives scores of the right shape and wrong values, so it can be named
        make_case(ref, qkv((4,), 3, 4, 4, 5), dtype, note="3-D, no mask"),
        make_case(ref, (*qkv((2, 1), 3, 5, 16, 7), _mixed_mask(rng, (3, 5))), dtype,
                  note="each query row has allowed and blocked keys"),
        make_case(ref, (*qkv((2, 3), 4, 6, 8, 8), blocked), dtype,
                  note="query row 1 of batch 0 has no allowed key", tags={"empty row"}),
        make_case(ref, qkv((1, 1), 1, 1, 8, 3), dtype, note="Tq = Tk = 1"),
        make_case(ref, (*qkv((), 5, 5, 8, 8), causal_mask(5, 5)), dtype, note="2-D, causal mask"),
        make_case(ref, (*qkv((1, 2), 1, 3, 4, 2), np.array([[True, False, True]])), dtype, note="mask (1, 3)"),
    ]


def _empty_rows(case):
    mask = case.args[3]
    shape = case.expected["weights"].shape
    return ~np.broadcast_to(mask, shape).any(axis=-1)                  # (..., Tq) rows with no allowed key


def _nan_on_empty_row(got, case):
    if "empty row" not in case.tags:
        return False
    empty = _empty_rows(case)
    return bool(np.isnan(got["weights"][empty]).any() or np.isnan(got["out"][empty]).any())


def _uniform_on_empty_row(got, case):
    if "empty row" not in case.tags:
        return False
    empty = _empty_rows(case)
    tk = got["weights"].shape[-1]
    return bool(np.allclose(got["weights"][empty], 1 / tk, rtol=1e-4, atol=0))


def _kt(q, k, v, mask=None):
    """The lesson's 2-D ``q @ k.T`` on batched input; where it cannot give this case's shape the learner's
    code raised already, so the variant matches nothing (NaN)."""
    nothing = {"out": np.full(q.shape[:-1] + v.shape[-1:], np.nan)}
    if k.ndim < 3:
        return nothing
    try:
        scores = np.matmul(q, k.T)                                     # (?, ?, ?) not (..., Tq, Tk)
    except ValueError:
        return nothing
    return _attention(q, k, v, mask, scores=scores) if scores.shape == q.shape[:-1] + k.shape[-2:-1] else nothing


ATTENTION = Spec(("q", "k", "v", "mask"), ("out", "weights"), _attention_cases, (
    Mistake("A query row with no allowed key gave NaN (exp(-inf) = 0 everywhere, then 0 / 0): give that row "
            "all-zero weights and a zero output", 1, shows=_nan_on_empty_row),
    Mistake("A query row with no allowed key got equal weights: a large negative number in place of -inf still "
            "lets it attend; the contract wants all-zero weights and a zero output there", 1,
            shows=_uniform_on_empty_row),
    Mistake("The scores are not scaled: divide q k^T by sqrt(d), d = q.shape[-1]", 2,
            wrong=lambda q, k, v, mask=None: _attention(q, k, v, mask, scale=1.0)),
    Mistake("The scores are divided by d instead of sqrt(d)", 2,
            wrong=lambda q, k, v, mask=None: _attention(q, k, v, mask, scale=1 / q.shape[-1])),
    Mistake("The scores are divided by sqrt of v's size: the scale is 1/sqrt(d) with d = q.shape[-1], the size "
            "of the query and key vectors", 2,
            wrong=lambda q, k, v, mask=None: _attention(q, k, v, mask, scale=1 / math.sqrt(v.shape[-1]))),
    Mistake("k.T reverses EVERY axis of a batched k, it is right only for the lesson's 2-D arrays: swap only "
            "the last two, np.swapaxes(k, -1, -2)", 1, wrong=_kt),
    Mistake("The mask is ignored: blocked keys must get weight 0 (set their scores to -inf before the softmax)",
            1, wrong=lambda q, k, v, mask=None: _attention(q, k, v)),
    Mistake("The mask is read backwards: True means the query MAY attend to that key, False means blocked", 1,
            wrong=lambda q, k, v, mask=None: _attention(q, k, v, None if mask is None else ~mask)),
), section=1)


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
            wrong=lambda x, h: {"heads": x.reshape(x.shape[0], h, x.shape[1], x.shape[2] // h)}),
), section=3)

MERGE_HEADS = Spec(("x",), ("merged",), _merge_cases, (
    Mistake("Reshaped straight to (B, T, E): that mixes tokens and heads. Transpose (B, H, T, D) to "
            "(B, T, H, D) first, then reshape", 3,
            wrong=lambda x: {"merged": x.reshape(x.shape[0], x.shape[2], -1)}),
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
            "PyTorch divide by sqrt(var + eps)", 3, wrong=_ln_eps_outside),
    Mistake("The variance is the unbiased one (divided by C - 1): layer norm uses the biased variance, "
            "divided by C (np.var's default, ddof=0)", 3, wrong=_ln_unbiased),
    Mistake("The eps argument is ignored: use the eps the caller passes, 1e-5 is only its default", 3,
            wrong=lambda x, gamma, beta, eps=1e-5: _layer_norm(x, gamma, beta)),
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
            wrong=_pe_swapped),
    Mistake("All the sines come first and all the cosines after: the paper interleaves them, sin on 2i and "
            "cos on 2i+1", 4, wrong=_pe_halves),
    Mistake("The exponent uses i instead of 2i: the frequency of pair i is 1 / 10000^(2i/d)", 4,
            wrong=_pe_exponent_i),
), section=4, dtypes=(None,))


def _mask_cases(dtype):
    ref = lambda t: {"mask": causal_mask(t, t)}                        # noqa: E731
    return [make_case(ref, (t,), dtype) for t in (4, 1, 7)]


CAUSAL_MASK = Spec(("T",), ("mask",), _mask_cases, (
    Mistake("The diagonal is excluded: a token may attend to itself, so mask[i, i] is True", 1,
            wrong=lambda t: {"mask": np.tri(t, k=-1, dtype=bool)}),
    Mistake("The mask is reversed: True marks the keys a query MAY read, at or before its own position", 1,
            wrong=lambda t: {"mask": ~np.tri(t, dtype=bool)}),
    Mistake("The mask is reversed and misses the diagonal: True marks the keys at or before the query's "
            "position", 1, wrong=lambda t: {"mask": ~np.tri(t, k=-1, dtype=bool)}),
), section=1, dtypes=(bool,))


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
    return [
        make_case(ref, (_normal(rng, (2, 4, 8)), _mha_params(rng, 8), 2), dtype, note="E = 8, H = 2"),
        make_case(ref, (_normal(rng, (1, 1, 6)), _mha_params(rng, 6), 3), dtype, note="T = 1"),
        make_case(ref, (_normal(rng, (2, 5, 12)), _mha_params(rng, 12), 4, causal_mask(5, 5)), dtype,
                  note="causal mask (5, 5)"),
        make_case(ref, (_normal(rng, (1, 3, 4)), _mha_params(rng, 4), 1, pad), dtype, note="mask (1, 1, 1, 3)"),
    ]


MULTI_HEAD_ATTENTION = Spec(("x", "params", "n_heads", "mask"), ("out",), _mha_cases, (
    Mistake("Each head is scaled by 1/sqrt(E): a head's vectors have size E/H, so divide by sqrt(E/H)", 2,
            wrong=lambda x, p, h, mask=None: {"out": _mha(x, p, h, mask, scale=1 / math.sqrt(x.shape[-1]))}),
    Mistake("The output projection is left out: after merging the heads, apply x @ w_o + b_o", 3,
            wrong=lambda x, p, h, mask=None: {"out": _mha(x, p, h, mask, project_out=False)}),
    Mistake("The weights are applied as x @ w.T (PyTorch's layout): the contract says x @ w + b", 3,
            wrong=lambda x, p, h, mask=None: {"out": _mha(x, p, h, mask, transposed=True)}),
), section=3, built_on=BuiltOn("multi-head attention", ("split_heads", "attention", "merge_heads"), _mha_on))


def _ffn_cases(dtype):
    ref = lambda x, p: {"y": _ffn(x, p)}                               # noqa: E731
    rng = _rng(8)
    return [make_case(ref, (_normal(rng, s), _ffn_params(rng, s[-1], f)), dtype)
            for s, f in (((2, 3, 8), 16), ((1, 1, 4), 6), ((3, 8), 5))]


FEED_FORWARD = Spec(("x", "params"), ("y",), _ffn_cases, (
    Mistake("The ReLU is missing: relu(x @ w_1 + b_1) before the second layer", 3,
            wrong=lambda x, p: {"y": _ffn(x, p, relu_1=False)}),
    Mistake("A ReLU is applied after the second layer too: only the hidden layer has one", 3,
            wrong=lambda x, p: {"y": _ffn(x, p, relu_2=True)}),
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
            wrong=lambda x, p, h, mask=None: {"out": _block(x, p, h, mask, pre_ln=True)}),
    Mistake("The residual connections are missing: add each sub-layer's input back, layer_norm(x + sublayer(x))",
            3, wrong=lambda x, p, h, mask=None: {"out": _block(x, p, h, mask, residual=False)}),
), section=3, built_on=BuiltOn("encoder block", ("multi_head_attention", "layer_norm", "feed_forward"), _block_on))


# -- 10. softmax_backward, attention_backward (beyond the lesson) ------------------------------------------

H_FD = 1e-6


def _fd(f, arrays: dict, name: str, index: tuple) -> float:
    """Central difference of the scalar f(**arrays) in arrays[name][index], all in float64."""
    plus, minus = as64(arrays), as64(arrays)
    plus[name][index] += H_FD
    minus[name][index] -= H_FD
    return (f(**plus) - f(**minus)) / (2 * H_FD)


def _softmax_backward_cases(dtype):
    rng = _rng(10)
    cases = []
    for shape in ((2, 3, 5), (1, 1, 4), (6,), (2, 1)):
        x = _normal(rng, shape, 2.0)
        y = _softmax(x).astype(dtype)
        case = make_case(lambda dy, y: {"dx": softmax_backward(dy, y)}, (_normal(rng, shape), y), dtype,
                         extra={"x": x})
        cases.append(case)
    return cases


def _softmax_backward_fd(case, name, index):
    dy = case.args[0].astype(np.float64)
    return _fd(lambda x: float((dy * _softmax(x)).sum()), {"x": case.extra["x"]}, "x", index)


def _attention_backward_cases(dtype):
    rng = _rng(11)
    cases = []
    for lead, tq, tk, d, dv in (((2, 1), 3, 5, 4, 3), ((1, 1), 1, 1, 4, 2), ((), 3, 5, 8, 2), ((2, 3), 4, 4, 8, 8)):
        q, k, v = _normal(rng, (*lead, tq, d)), _normal(rng, (*lead, tk, d)), _normal(rng, (*lead, tk, dv))
        weights = _attention(q, k, v)["weights"]
        cases.append(make_case(_attention_grads, (_normal(rng, (*lead, tq, dv)), q, k, v, weights), dtype))
    return cases


def _attention_backward_fd(case, name, index):
    dout, q, k, v, _ = as64(case.args)

    def loss(q, k, v):
        return float((dout * attention_forward(q, k, v)[0]).sum())
    return _fd(loss, {"q": q, "k": k, "v": v}, name[1:], index)


SOFTMAX_BACKWARD = Spec(("dy", "y"), ("dx",), _softmax_backward_cases, (
    Mistake("dx is wrong: only the diagonal of the Jacobian, y (1 - y) dy, is used; every output depends on "
            "every input, dx = y * (dy - sum(dy * y)) over the last axis", 1,
            wrong=lambda dy, y: {"dx": dy * y * (1 - y)}),
), section=1, beyond=True, fd=_softmax_backward_fd)

ATTENTION_BACKWARD = Spec(("dout", "q", "k", "v", "weights"), ("dq", "dk", "dv"), _attention_backward_cases, (
    Mistake("dq and dk are wrong: the 1/sqrt(d) scale of the scores is missing from their gradient", 2,
            wrong=lambda *a: _attention_grads(*a, scale_dq=False, scale_dk=False)),
    Mistake("dq is wrong: the 1/sqrt(d) scale of the scores is missing from its gradient", 2,
            wrong=lambda *a: _attention_grads(*a, scale_dq=False)),
    Mistake("dk is wrong: the 1/sqrt(d) scale of the scores is missing from its gradient", 2,
            wrong=lambda *a: _attention_grads(*a, scale_dk=False)),
), section=1, beyond=True, fd=_attention_backward_fd)

# -- the table --------------------------------------------------------------------------------------------

_SIGNATURES = (
    ("softmax", "softmax(x)", SOFTMAX),
    ("attention", "attention(q, k, v, mask=None)", ATTENTION),
    ("split_heads", "split_heads(x, n_heads)", SPLIT_HEADS),
    ("merge_heads", "merge_heads(x)", MERGE_HEADS),
    ("layer_norm", "layer_norm(x, gamma, beta, eps=1e-5)", LAYER_NORM),
    ("positional_encoding", "positional_encoding(T, d)", POSITIONAL_ENCODING),
    ("causal_mask", "causal_mask(T)", CAUSAL_MASK),
    ("multi_head_attention", "multi_head_attention(x, params, n_heads, mask=None)", MULTI_HEAD_ATTENTION),
    ("feed_forward", "feed_forward(x, params)", FEED_FORWARD),
    ("encoder_block", "encoder_block(x, params, n_heads, mask=None)", ENCODER_BLOCK),
    ("softmax_backward", "softmax_backward(dy, y)", SOFTMAX_BACKWARD),
    ("attention_backward", "attention_backward(dout, q, k, v, weights)", ATTENTION_BACKWARD),
)

EXERCISES: OrderedDict[str, Exercise] = OrderedDict(
    (name, Exercise(name, signature, spec.section, CONTRACTS[name][0], CONTRACTS[name][1],
                    _stub(signature, *CONTRACTS[name]), SOLUTIONS[name], spec))
    for name, signature, spec in _SIGNATURES)
