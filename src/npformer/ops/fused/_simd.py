"""Element functions for the twins that LLVM can vectorize: exp and tanh in float32 without a
vector math library (numba's llvmlite often comes without SVML, and then ``math.exp`` is one call
per element), and a row's sums and max.

- ``exp(x)``: float32 x -> ``exp32``; float64 -> ``math.exp`` (the C library's, within 1e-12 of
  numpy's: float64 stays exact, and scalar).
- ``exp32``: Cody-Waite reduction x = n ln2 + r, |r| <= ln2 / 2, with ln2 split in two so that
  n ln2_hi is exact; exp(r) by its Taylor polynomial to degree 7 (the dropped term is below 2e-9 of
  the result, under float32's rounding); 2^n formed from its bits (``_f32_from_bits``: an LLVM
  bitcast, no memory). No branch: x is clamped, and x below -87.33 (where 2^n would leave the normal
  range) gives exactly 0, as numpy's exp underflows to 0 there or to a subnormal below 1.2e-38;
  x above 88.376 gives inf (2^128), where exp is within a factor 2 of float32's largest value (the
  twins take exp of values <= 0, and tanh's overflow gives 1 as it should).
  Measured error against float64 exp over N(0, 10^2) samples: 2.5e-7 at most, 3e-8 per tensor.
- ``tanh(x)``: float32 -> 1 - 2 / (exp32(2|x|) + 1) with x's sign (exact 0 at 0; absolute error
  about 6e-8 near 0); float64 -> ``math.tanh``.
- ``row_sum``, ``row_dot``, ``row_sq_dev``, ``row_dots_weighted``: float64 sums of a row, vectorized
  (reassociation allowed in these functions alone), one order for any thread count; ``row_max``:
  a running max, or eight, without an allocation.
"""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core.extending import intrinsic, overload, register_jitable

F32 = np.float32
_LOG2E = F32(1.4426950408889634)
_LN2_HI = F32(0.693359375)                 # 8 significant bits: n * _LN2_HI is exact for |n| <= 2^16
_LN2_LO = F32(-2.1219444005469057e-4)      # ln 2 - _LN2_HI
_HI = F32(88.72283)                        # exp(_HI) is float32's largest finite value, about
_LO = F32(-87.33654)                       # exp(_LO) is its smallest normal value
_INV = tuple(F32(1.0 / math.factorial(k)) for k in range(8))


@intrinsic
def _f32_from_bits(typingctx, bits):       # type: ignore[no-untyped-def]
    """The float32 whose bits are the low 32 of the integer ``bits``."""
    if not isinstance(bits, types.Integer):
        return None

    def codegen(context, builder, sig, args):  # type: ignore[no-untyped-def]
        v = args[0]
        width = int(getattr(bits, "bitwidth"))  # noqa: B009 (numba's Integer type; not in its stubs)
        if width > 32:
            v = builder.trunc(v, ir.IntType(32))
        elif width < 32:
            v = builder.sext(v, ir.IntType(32))
        return builder.bitcast(v, ir.FloatType())

    return types.float32(bits), codegen


@register_jitable
def exp32(x):  # type: ignore[no-untyped-def]
    c = min(max(x, _LO), _HI)
    n = np.floor(c * _LOG2E + F32(0.5))
    r = c - n * _LN2_HI
    r = r - n * _LN2_LO
    p = _INV[7] * r + _INV[6]
    p = p * r + _INV[5]
    p = p * r + _INV[4]
    p = p * r + _INV[3]
    p = p * r + _INV[2]
    p = p * r + _INV[1]
    p = p * r + _INV[0]
    e = p * _f32_from_bits((np.int32(n) + np.int32(127)) << np.int32(23))  # type: ignore[call-arg]
    return e if x >= _LO else F32(0.0)


@register_jitable
def tanh32(x):  # type: ignore[no-untyped-def]
    a = abs(x)
    t = F32(1.0) - F32(2.0) / (exp32(a + a) + F32(1.0))
    return t if x >= F32(0.0) else -t


def exp(x: float) -> float:
    """exp in x's precision (see the module docstring); a placeholder outside compiled code."""
    return math.exp(x)


def tanh(x: float) -> float:
    return math.tanh(x)


@overload(exp)
def _exp(x):  # type: ignore[no-untyped-def]
    if x == types.float32:
        return lambda x: exp32(x)
    return lambda x: math.exp(x)


@overload(tanh)
def _tanh(x):  # type: ignore[no-untyped-def]
    if x == types.float32:
        return lambda x: tanh32(x)
    return lambda x: math.tanh(x)


def as_dtype_of(v: float, a: np.ndarray) -> float:
    """v in the dtype of the array a (float32 or float64); a placeholder outside compiled code."""
    return float(a.dtype.type(v))


@overload(as_dtype_of)
def _as_dtype_of(v, a):  # type: ignore[no-untyped-def]
    if a.dtype == types.float32:
        return lambda v, a: np.float32(v)
    return lambda v, a: np.float64(v)


# Row sums: one compiled function each, with only reassociation allowed (and the sign of a zero), so that
# LLVM vectorizes the float64 accumulation; the kernels call these same functions on every thread, so a
# row's sum has one order for any thread count (numpy's own sums are pairwise, in another order).
_REASSOC = {"reassoc", "nsz"}


def _jit(**options):  # type: ignore[no-untyped-def]
    """njit with numba's cache on disk, or without it where no cache directory is writable (the kernels
    that call these then warn once, ``kernels._compile``)."""
    def wrap(fn):  # type: ignore[no-untyped-def]
        try:
            return njit(cache=True, **options)(fn)
        except RuntimeError:
            return njit(cache=False, **options)(fn)
    return wrap


@_jit(fastmath=_REASSOC)
def row_sum(a, lo, hi):  # type: ignore[no-untyped-def]
    """sum(a[lo:hi]) in float64."""
    s = 0.0
    for j in range(lo, hi):
        s += a[j]
    return s


@_jit(fastmath=_REASSOC)
def row_dot(a, b, lo, hi):  # type: ignore[no-untyped-def]
    """sum(a[lo:hi] * b[lo:hi]) in float64, each product in float64."""
    s = 0.0
    for j in range(lo, hi):
        s += np.float64(a[j]) * b[j]
    return s


@_jit(fastmath=_REASSOC)
def row_sq_dev(a, mean):  # type: ignore[no-untyped-def]
    """sum((a - mean)^2) over the row a, in float64 (mean float64): layer norm's variance."""
    s = 0.0
    for j in range(a.size):
        d = a[j] - mean
        s += d * d
    return s


@_jit(fastmath=_REASSOC)
def row_dots_weighted(dy, w, h):  # type: ignore[no-untyped-def]
    """(sum(d), sum(d h)) in float64 over the row, d = dy w in the row's dtype: layer norm's backward."""
    s1 = 0.0
    s2 = 0.0
    for j in range(dy.size):
        d = dy[j] * w[j]
        s1 += d
        s2 += d * h[j]
    return s1, s2


@_jit(fastmath={"nnan", "nsz"})
def row_max(a, lo, hi):  # type: ignore[no-untyped-def]
    """max(a[lo:hi]) in a's dtype, hi > lo, exact in any order: a row of fewer than 48 one running max,
    which LLVM vectorizes; a longer one eight running maxima. No array is allocated (sixteen maxima in an
    array allocated per call cost short rows most of their time). Compiled assuming no NaN: a NaN in the
    row goes on to the exp pass, whose sum it makes NaN."""
    if hi - lo < 48:
        m = a[lo]
        for j in range(lo + 1, hi):
            m = max(m, a[j])
        return m
    m0 = m1 = m2 = m3 = m4 = m5 = m6 = m7 = a[lo]
    nb = (hi - lo) // 8
    for b in range(nb):
        p = lo + 8 * b
        m0, m1, m2, m3 = max(m0, a[p]), max(m1, a[p + 1]), max(m2, a[p + 2]), max(m3, a[p + 3])
        m4, m5, m6, m7 = max(m4, a[p + 4]), max(m5, a[p + 5]), max(m6, a[p + 6]), max(m7, a[p + 7])
    m = max(max(max(m0, m1), max(m2, m3)), max(max(m4, m5), max(m6, m7)))
    for j in range(lo + 8 * nb, hi):
        m = max(m, a[j])
    return m
