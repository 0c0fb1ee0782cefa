"""Exercises 1, 2, 6, 11 and 12: softmax, attention, causal_mask, softmax_backward and attention_backward,
each with its cases and its known mistakes (``Spec``, ``checks.py``); every mistake names its family
(``families.py``)."""
from __future__ import annotations

import math

import numpy as np

from ..ops import attention_forward, causal_mask, softmax_backward
from .checks import Mistake, Spec, as64, make_case
from .references import _attention, _attention_grads, _masked, _normal, _nothing, _rng, _softmax

# -- 1. softmax ----------------------------------------------------------------------------------------

def _softmax_cases(dtype):
    ref = lambda x: {"y": _softmax(x)}                                 # noqa: E731
    rng = _rng(1)
    cases = [make_case(ref, (_normal(rng, s, 2.0),), dtype) for s in ((2, 3, 5), (1, 1, 7), (4,), (3, 1), (1, 6))]
    big = 800.0 + _normal(rng, (2, 6), 100.0)                          # exp overflows: float64 past 709
    cases.append(make_case(ref, (big,), dtype, note="scores around 800", tags={"large"}))
    far = np.array([[1000.0], [0.0], [-1500.0]]) + _normal(rng, (3, 4), 2.0)   # float64's exp underflows past -745
    cases.append(make_case(ref, (far,), dtype, note="row maxima 1,000 and more apart"))
    return cases


def _whole_array_max(x):
    """exp(x - x.max()) normalised per row: a row far below the largest underflows to 0 / 0."""
    with np.errstate(invalid="ignore", divide="ignore"):
        e = np.exp(x - x.max())
        return {"y": e / e.sum(axis=-1, keepdims=True)}


def _overflowed(got, case):
    return "large" in case.tags and not np.isfinite(got["y"]).all()


SOFTMAX = Spec(("x",), ("y",), _softmax_cases, (
    Mistake("exp overflowed to inf, giving inf or NaN: subtract each row's max before exp; "
            "softmax(x - max) = softmax(x), and the largest exp is then 1", 1, shows=_overflowed,
            family="numerics"),
    Mistake("Normalised over the wrong axis: every row along the LAST axis must sum to 1; take the max and "
            "the sum with axis=-1, keepdims=True", 1, wrong=lambda x: {"y": _softmax(x, 0)}, family="wrong axis"),
    Mistake("Normalised over the wrong axis: every row along the LAST axis must sum to 1, not the columns",
            1, wrong=lambda x: {"y": _softmax(x, -2)} if x.ndim > 1 else {"y": _softmax(x)}, family="wrong axis"),
    Mistake("Normalised over the whole array at once: every row along the LAST axis must sum to 1 on its own "
            "(axis=-1, keepdims=True)", 1, wrong=lambda x: {"y": _softmax(x, None)}, family="wrong axis"),
    Mistake("A row far below the largest underflowed to 0 / 0: subtract each row's max, not the whole array's "
            "(x.max(axis=-1, keepdims=True))", 1, wrong=_whole_array_max, family="wrong axis"),
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
    nothing = _nothing(q, v)
    if k.ndim < 3:
        return nothing
    try:
        scores = np.matmul(q, k.T)                                     # (?, ?, ?) not (..., Tq, Tk)
    except ValueError:
        return nothing
    return _attention(q, k, v, mask, scores=scores) if scores.shape == q.shape[:-1] + k.shape[-2:-1] else nothing


ATTENTION = Spec(("q", "k", "v", "mask"), ("out", "weights"), _attention_cases, (
    Mistake("A query row with no allowed key gave NaN (exp(-inf) = 0 everywhere, then 0 / 0): give that row "
            "all-zero weights and a zero output", 1, shows=_nan_on_empty_row, family="numerics"),
    Mistake("A query row with no allowed key got equal weights: a large negative number in place of -inf still "
            "lets it attend; the contract wants all-zero weights and a zero output there", 1,
            shows=_uniform_on_empty_row, family="numerics"),
    Mistake("The scores are not scaled: divide q k^T by sqrt(d), d = q.shape[-1]", 2,
            wrong=lambda q, k, v, mask=None: _attention(q, k, v, mask, scale=1.0), family="missing term"),
    Mistake("The scores are divided by d instead of sqrt(d)", 2,
            wrong=lambda q, k, v, mask=None: _attention(q, k, v, mask, scale=1 / q.shape[-1]), family="doubled term"),
    Mistake("The scores are divided by sqrt of v's size: the scale is 1/sqrt(d) with d = q.shape[-1], the size "
            "of the query and key vectors", 2,
            wrong=lambda q, k, v, mask=None: _attention(q, k, v, mask, scale=1 / math.sqrt(v.shape[-1])),
            family="wrong operand"),
    Mistake("k.T reverses EVERY axis of a batched k, it is right only for the lesson's 2-D arrays: swap only "
            "the last two, np.swapaxes(k, -1, -2)", 1, wrong=_kt, family="wrong axis"),
    Mistake("The softmax runs over the queries (axis -2): each query's weights over the keys, the LAST axis, "
            "must sum to 1", 1, wrong=lambda q, k, v, mask=None: _masked(q, k, v, mask, "queries"),
            family="wrong axis"),
    Mistake("The mask is ignored: blocked keys must get weight 0 (set their scores to -inf before the softmax)",
            1, wrong=lambda q, k, v, mask=None: _attention(q, k, v), family="missing term"),
    Mistake("The mask is read backwards: True means the query MAY attend to that key, False means blocked", 1,
            wrong=lambda q, k, v, mask=None: _attention(q, k, v, None if mask is None else ~mask), family="swapped"),
    Mistake("The mask was added as 0/1 numbers (scores + mask), which blocks nothing: a blocked key's score must "
            "be -inf, np.where(mask, scores, -np.inf)", 1,
            wrong=lambda q, k, v, mask=None: _masked(q, k, v, mask, "add"), family="wrong constant"),
    Mistake("The mask is applied after the softmax (w * mask), so the allowed weights no longer sum to 1: set "
            "blocked scores to -inf before the softmax", 1,
            wrong=lambda q, k, v, mask=None: _masked(q, k, v, mask, "after"), family="step order"),
    Mistake("The mask is transposed: mask[..., i, j] says whether query i may read key j; use it as given", 1,
            wrong=lambda q, k, v, mask=None: _masked(q, k, v, mask, "transposed"), family="swapped"),
), section=1)


def _mask_cases(dtype):
    ref = lambda t: {"mask": causal_mask(t, t)}                        # noqa: E731
    return [make_case(ref, (t,), dtype) for t in (4, 1, 7)]


CAUSAL_MASK = Spec(("T",), ("mask",), _mask_cases, (
    Mistake("The diagonal is excluded: a token may attend to itself, so mask[i, i] is True", 1,
            wrong=lambda t: {"mask": np.tri(t, k=-1, dtype=bool)}, family="off by one"),
    Mistake("One key too many: query i may read keys 0 to i, not i + 1 (np.tri(T, dtype=bool), k=0)", 1,
            wrong=lambda t: {"mask": np.tri(t, k=1, dtype=bool)}, family="off by one"),
    Mistake("The mask is reversed: True marks the keys a query MAY read, at or before its own position", 1,
            wrong=lambda t: {"mask": ~np.tri(t, dtype=bool)}, family="swapped"),
    Mistake("The mask is transposed: it keeps the diagonal, but row i must allow the keys at or before "
            "position i (the lower triangle, np.tril), not after it", 1,
            wrong=lambda t: {"mask": np.tri(t, dtype=bool).T}, family="swapped"),
), section=1, dtypes=(bool,))


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
            wrong=lambda dy, y: {"dx": dy * y * (1 - y)}, family="missing term"),
    Mistake("dx = y * dy leaves out the term every output shares: dx = y * (dy - sum(dy * y, axis=-1, "
            "keepdims=True))", 1, wrong=lambda dy, y: {"dx": y * dy}, family="missing term"),
    Mistake("dx has the wrong sign: dx = y * (dy - sum(dy * y)), not y * (sum(dy * y) - dy)", 1,
            wrong=lambda dy, y: {"dx": -softmax_backward(dy, y)}, family="swapped"),
    Mistake("The sum runs over the whole array: sum(dy * y) is one number per row, over the last axis "
            "(axis=-1, keepdims=True)", 1, wrong=lambda dy, y: {"dx": y * (dy - (dy * y).sum())},
            family="wrong axis"),
), section=1, beyond=True, fd=_softmax_backward_fd)

ATTENTION_BACKWARD = Spec(("dout", "q", "k", "v", "weights"), ("dq", "dk", "dv"), _attention_backward_cases, (
    Mistake("dq and dk are wrong: the 1/sqrt(d) scale of the scores is missing from their gradient", 2,
            wrong=lambda *a: _attention_grads(*a, scale_dq=False, scale_dk=False), family="missing term"),
    Mistake("dq is wrong: the 1/sqrt(d) scale of the scores is missing from its gradient", 2,
            wrong=lambda *a: _attention_grads(*a, scale_dq=False), family="missing term"),
    Mistake("dk is wrong: the 1/sqrt(d) scale of the scores is missing from its gradient", 2,
            wrong=lambda *a: _attention_grads(*a, scale_dk=False), family="missing term"),
), section=1, beyond=True, fd=_attention_backward_fd)
