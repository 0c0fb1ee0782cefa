"""The GELU twins, exact (erf) and tanh, forward and backward, each fused with the bias add:
one pass over x (and dy).

Mirrors ``ops/activations.py`` ``gelu_forward``/``gelu_backward`` and
``gelu_tanh_forward``/``gelu_tanh_backward`` (with their ``bias``); pinned by tests/ops/test_twins.py
(test_gelu_twin).

- float32, exact GELU: the twin evaluates the reference's own fitted erf, operation for operation:
  Phi(x) = min(1/2 + x Pg(u) / Qg(u), 1), u = min(x^2, 32), with the reference's float32
  coefficients (``_PG32``, ``_QG32``), and below x = -2 sqrt(2) the reference's erfc tail
  (``_TAIL32``, times exp(-x^2 / 2), over 2z), redone for the few elements below the cut: 64
  elements at a time, a branch-free loop writes y and Phi, a second counts the elements below the
  cut, and only a sub-block that holds one is scanned again, element by element (a scan of every
  row, element by element, took most of the forward's time); exp is ``_simd.exp32``.
- Work is split in tasks of at most ``SEG`` elements of a row, so a single long row (a 1-D
  array) spreads over the threads too.
- float32, tanh form: the reference's formula in the same order, tanh from ``_simd.tanh32``.
- float64: Phi = erfc(-x / sqrt(2)) / 2 from the C library's erfc (numba's ``math.erfc``), and
  ``math.tanh``: one element at a time (no vector math library here), within 1e-12 of the
  reference's own float64 erf.
The constants travel in an array of x's dtype, so that no float64 constant promotes float32 work.
Dimension legend: R rows, C features (the bias's length); everything else is elementwise.
"""
from __future__ import annotations

import math

import numpy as np
from numba import prange, types
from numba.core.extending import overload, register_jitable

from .. import _erf_tables as ref
from ..kernels import Kernel
from ._simd import exp32, tanh

RSQRT2 = 1.0 / math.sqrt(2.0)
RSQRT2PI = 1.0 / math.sqrt(2.0 * math.pi)
TANH_C = math.sqrt(2.0 / math.pi)
TANH_A = 0.044715
F32 = np.float32
_PG = tuple(F32(c) for c in ref._PG32)               # the reference's float32 coefficients
_QG = tuple(F32(c) for c in ref._QG32)
_TAIL = tuple(F32(c) for c in ref._TAIL32)
_QG_MONIC = bool(ref._QG32[-1] == 1)
_PG_MONIC = bool(ref._PG32[-1] == 1)
_TAIL_MONIC = bool(ref._TAIL32[-1] == 1)
_CUT = F32(ref._GELU_TAIL32)
# per-dtype constants, in this order, indexed in the kernels
CONSTS = (0.5, 1.0, TANH_A, TANH_C, 3.0 * TANH_A, RSQRT2PI, -0.5)
HALF, ONE, TA, TC, TA3, R2PI, MHALF = range(len(CONSTS))


def _horner(u, coef, monic):  # type: ignore[no-untyped-def]
    """The reference's ``_horner`` (numpy's in-place steps, in this order) on one element."""
    raise NotImplementedError


def _phi(x, k):  # type: ignore[no-untyped-def]
    """(x Phi(x), Phi(x)) in x's precision."""
    raise NotImplementedError


@overload(_horner)
def _horner_ov(u, coef, monic):  # type: ignore[no-untyped-def]
    def impl(u, coef, monic):  # type: ignore[no-untyped-def]
        n = len(coef)
        out = u + coef[n - 2] if monic else u * coef[n - 1] + coef[n - 2]
        for k in range(n - 3, -1, -1):
            out = out * u + coef[k]
        return out
    return impl


@overload(_phi)
def _phi_ov(x, k):  # type: ignore[no-untyped-def]
    if x == types.float32:
        def phi32(x, k):  # type: ignore[no-untyped-def]
            u = min(x * x, F32(32.0)) if x == x else x               # np.minimum keeps NaN
            p = _horner(u, _PG, _PG_MONIC)
            q = _horner(u, _QG, _QG_MONIC)
            c = min((x * p) / q + F32(0.5), F32(1.0))                # large x: Phi = 1 exactly
            return x * c, c
        return phi32

    def phi64(x, k):  # type: ignore[no-untyped-def]
        cdf = 0.5 * math.erfc(-x * RSQRT2)
        return x * cdf, cdf
    return phi64


def _tail(x):  # type: ignore[no-untyped-def]
    """(the cut, Phi(x)): for float32, -2 sqrt(2) and the reference's ``_normal_cdf_tail32``; for
    float64, -inf (no tail pass) and Phi as ``_phi``."""
    raise NotImplementedError


@overload(_tail)
def _tail_ov(x):  # type: ignore[no-untyped-def]
    if x == types.float32:
        def tail32(x):  # type: ignore[no-untyped-def]
            z = x * F32(-RSQRT2)                                     # z = -x / sqrt(2), s = 1 - 8 / (z + 3)
            s = F32(1.0) - F32(8.0) / (z + F32(3.0))
            f = _horner(s, _TAIL, _TAIL_MONIC)
            f = f * exp32((x * x) * F32(-0.5))
            return _CUT, f / (z + z)
        return tail32
    return lambda x: (-np.inf, 0.5 * math.erfc(-x * RSQRT2))


SEG = 4096      # elements of a row per parallel task: a long row (a 1-D array) still splits among threads
SUB = 64        # elements per tail check: the rare tail is redone only in the sub-blocks that hold one


@register_jitable
def _span(task, nseg, c):  # type: ignore[no-untyped-def]
    """Task ``task`` of a (R, C) array cut in ``nseg`` tasks a row: (row, first column, columns)."""
    i = task // nseg
    lo = (task - i * nseg) * SEG
    return i, lo, min(c, lo + SEG) - lo


def _forward(x: np.ndarray, bias: np.ndarray, tanh_form: bool, k: np.ndarray, y: np.ndarray, h: np.ndarray,
             aux: np.ndarray) -> None:
    # x, y, h, aux (R, C); bias (C,) or (0,) for none; k: CONSTS in x's dtype. h = x + bias (kept
    # for the backward; not written without a bias, when it is x itself);
    # aux = Phi(h) (exact) or tanh(u) (tanh form)
    r, c = x.shape
    has_bias = bias.size > 0
    nseg = (c + SEG - 1) // SEG
    for task in prange(r * nseg):
        i, lo, m = _span(task, nseg, c)
        xi, yi, ai = x[i, lo:lo + m], y[i, lo:lo + m], aux[i, lo:lo + m]   # views indexed from 0: LLVM vectorizes
        if has_bias:
            hi, bi = h[i, lo:lo + m], bias[lo:lo + m]
            for j in range(m):
                hi[j] = xi[j] + bi[j]
            xi = hi
        if tanh_form:                                      # the reference's steps, in its order
            for j in range(m):
                v = xi[j]
                t = tanh((((v * v) * k[TA] + k[ONE]) * v) * k[TC])
                ai[j] = t
                yi[j] = ((t + k[ONE]) * v) * k[HALF]
        else:
            cut = _tail(xi[0])[0]                          # the reference's tail, below x = -2 sqrt(2)
            for s0 in range(0, m, SUB):
                xs, ys, as_ = xi[s0:s0 + SUB], yi[s0:s0 + SUB], ai[s0:s0 + SUB]
                for j in range(xs.size):                   # no branch: vectorized
                    yv, cdf = _phi(xs[j], k)
                    as_[j] = cdf
                    ys[j] = yv
                below = 0
                for j in range(xs.size):                   # a count alone: vectorized
                    below += xs[j] < cut
                if below:                                  # few sub-blocks: redo their tail elements
                    for j in range(xs.size):
                        if xs[j] < cut:
                            cdf = _tail(xs[j])[1]
                            as_[j] = cdf
                            ys[j] = xs[j] * cdf


def _backward(dy: np.ndarray, h: np.ndarray, aux: np.ndarray, tanh_form: bool, k: np.ndarray,
              dx: np.ndarray) -> None:
    r, c = dy.shape
    nseg = (c + SEG - 1) // SEG
    for task in prange(r * nseg):
        i, lo, m = _span(task, nseg, c)
        dyi, hi, ai, dxi = dy[i, lo:lo + m], h[i, lo:lo + m], aux[i, lo:lo + m], dx[i, lo:lo + m]
        if tanh_form:
            for j in range(m):
                w, a = hi[j], ai[j]
                du = (((w * w) * k[TA3] + k[ONE]) * k[TC]) * (k[ONE] - a * a)
                dxi[j] = (((du * w + a) + k[ONE]) * k[HALF]) * dyi[j]
        else:
            for j in range(m):
                w = hi[j]
                dxi[j] = ((_exp(w, k) * w) * k[R2PI] + ai[j]) * dyi[j]


def _exp(w, k):  # type: ignore[no-untyped-def]
    """exp(-w^2 / 2) in w's precision: the float32 reference's steps, or float64's."""
    raise NotImplementedError


@overload(_exp)
def _exp_ov(w, k):  # type: ignore[no-untyped-def]
    if w == types.float32:
        return lambda w, k: exp32((w * w) * k[MHALF])
    return lambda w, k: math.exp(-0.5 * (w * w))


forward_kernel = Kernel(_forward)
backward_kernel = Kernel(_backward)


def _rows(a: np.ndarray) -> np.ndarray:
    c = a.shape[-1] if a.ndim else 1
    return np.ascontiguousarray(a).reshape(-1, max(c, 1))              # (R, C)


def _consts(dtype: np.dtype) -> np.ndarray:
    return np.array(CONSTS, dtype=dtype)


def gelu_forward(x: np.ndarray, bias: np.ndarray | None, tanh_form: bool
                 ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """y = gelu(x + bias), cache (x + bias, Phi or tanh(u)), all in x's dtype and shape."""
    x2 = _rows(x)                                                       # (R, C)
    b = np.empty(0, x.dtype) if bias is None else np.ascontiguousarray(bias, x.dtype)   # (C,) or (0,)
    y, aux = np.empty_like(x2), np.empty_like(x2)                      # (R, C)
    h = x2 if bias is None else np.empty_like(x2)                       # (R, C) x + bias; x itself without one
    forward_kernel(x2, b, tanh_form, _consts(x.dtype), y, h, aux)
    return y.reshape(x.shape), (h.reshape(x.shape), aux.reshape(x.shape))


def gelu_backward(dy: np.ndarray, cache: tuple[np.ndarray, np.ndarray], tanh_form: bool) -> np.ndarray:
    h, aux = cache
    dx = np.empty(h.shape, h.dtype)                                     # (...)
    forward_shape = _rows(h).shape
    dy2 = np.ascontiguousarray(dy, h.dtype).reshape(forward_shape)      # (R, C)
    backward_kernel(dy2, _rows(h), _rows(aux), tanh_form, _consts(h.dtype), dx.reshape(forward_shape))
    return dx
