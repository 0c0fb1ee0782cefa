"""ReLU and exact GELU, gelu(x) = x * Phi(x) = 0.5 x (1 + erf(x / sqrt(2))), with our own erf.

Dimension legend: any shape; everything is elementwise.

Why our own erf: numpy has none, and a per-element Python call costs more than all the
matrix products of a BERT-sized encoder. The coefficients come from
``python -m npformer.ops._erf_fit``, which derives them again from reference values.

- float32: erf(x) = x P(u) / Q(u), u = min(x^2, 16), clipped to [-1, 1]: one rational formula
  for every x, no exp, no branch, evaluated in cache-sized blocks with in-place ufuncs and
  float32 constants only (nothing is upcast to float64). Error below 5e-7 (the rational's own
  is 2.5e-8; the rest is float32 rounding in the two polynomials).
  GELU folds the 1/sqrt(2) and the halving into the coefficients. For x < -2 sqrt(2), where
  1 + erf cancels and |x| multiplies the rounding, Phi is recomputed from the erfc tail.
- float64: |x| < 1 uses a degree-12 polynomial in x^2; |x| >= 1 uses
  erfc(z) = exp(-z^2) F(z) / z with F a degree-24 Chebyshev series in s = 1 - 8 / (z + 3),
  which keeps the relative accuracy of erfc in the far tail (Phi(x) for x << 0).
- The GELU backward, Phi(x) + x phi(x), reuses the Phi that the forward cached.

With numba (``ops/kernels.py``) the four GELU functions run the compiled twins of
``ops/fused/activations.py`` (one pass, the bias add fused in; tests/ops/test_twins.py).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from . import kernels, parallel
from ._erf_tables import _GELU_TAIL32, _P, _P32, _PG32, _Q, _Q32, _QG32, _S64, _T64, _TAIL32  # noqa: F401

# elements per block: large enough that the ~25 ufunc calls per block cost little next to the
# arithmetic, small enough that its half-dozen 128 KiB arrays stay in the L2/L3 caches
_BLOCK = 32768
_RSQRT2 = 1.0 / math.sqrt(2.0)
_RSQRT2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _horner(out: np.ndarray, u: np.ndarray, coef: np.ndarray) -> np.ndarray:
    """out = sum_k coef[k] u^k, in place, in u's dtype (coef must already have that dtype)."""
    if coef[-1] == 1:
        np.add(u, coef[-2], out=out)                              # monic: skip the multiply by 1
    else:
        np.multiply(u, coef[-1], out=out)
        out += coef[-2]
    for c in coef[-3::-1]:
        out *= u
        out += c
    return out


class _Scratch32:
    """float32 work blocks, and constant blocks: numpy's minimum/maximum take their fast
    SIMD loop only when both operands are arrays (with a scalar they are ~4x slower)."""

    def __init__(self, n: int, k: int, u_max: float) -> None:
        m = min(n, _BLOCK)
        self.work = [np.empty(m, dtype=np.float32) for _ in range(k)]
        self.u_max = np.full(m, u_max, dtype=np.float32)     # clamp for u = x^2
        self.one = np.ones(m, dtype=np.float32)
        self.minus_one = np.full(m, -1.0, dtype=np.float32)


def _odd_rational32(x: np.ndarray, out: np.ndarray, s: _Scratch32, pc: np.ndarray, qc: np.ndarray) -> None:
    """out = x P(u) / Q(u), u = min(x^2, u_max), for one float32 block of length <= _BLOCK."""
    m = x.size
    u, p, q = (w[:m] for w in s.work[:3])
    np.multiply(x, x, out=u)
    np.minimum(u, s.u_max[:m], out=u)   # NaN stays NaN; past the clamp, x P/Q only grows
    _horner(p, u, pc)
    _horner(q, u, qc)
    np.multiply(x, p, out=out)
    out /= q


def _blocks(n: int) -> Iterator[slice]:
    for start in range(0, n, _BLOCK):
        yield slice(start, min(start + _BLOCK, n))


def _one_span(fn: Callable[..., None], n: int, row_size: int, *args: Any) -> None:
    """``parallel.map_rows``'s call for a small array: fn on all of it, on this thread."""
    fn(slice(0, n), *args)


def _span_blocks(span: slice) -> Iterator[slice]:
    for start in range(span.start, span.stop, _BLOCK):
        yield slice(start, min(start + _BLOCK, span.stop))


def _gelu32_span(span: slice, flat: np.ndarray, y: np.ndarray, cdf: np.ndarray, tail: np.ndarray) -> None:
    """The float32 GELU forward of flat[span] into y, cdf (Phi) and tail (x below _GELU_TAIL32)."""
    s = _Scratch32(span.stop - span.start, 3, u_max=32.0)         # x^2 / 2 clamped at 4^2, as in erf
    with np.errstate(over="ignore"):
        for sl in _span_blocks(span):
            xs, cs = flat[sl], cdf[sl]
            _odd_rational32(xs, cs, s, _PG32, _QG32)              # Phi - 1/2
            cs += np.float32(0.5)
            np.minimum(cs, s.one[: cs.size], out=cs)              # large x: Phi = 1 exactly
            np.multiply(xs, cs, out=y[sl])
            np.less(xs, _GELU_TAIL32, out=tail[sl])               # large -x: redone by the caller


def _gelu32_backward_span(span: slice, xf: np.ndarray, cf: np.ndarray, dyf: np.ndarray, dx: np.ndarray) -> None:
    """dx[span] = dy (Phi(x) + x phi(x)), float32, in cache-sized blocks."""
    t = np.empty(min(span.stop - span.start, _BLOCK), dtype=np.float32)   # scratch block
    c = np.float32(_RSQRT2PI)
    with np.errstate(over="ignore", under="ignore"):
        for sl in _span_blocks(span):
            xs, ts = xf[sl], t[: sl.stop - sl.start]
            np.multiply(xs, xs, out=ts)
            ts *= np.float32(-0.5)
            np.exp(ts, out=ts)                                    # exp(-x^2 / 2)
            ts *= xs
            ts *= c                                               # x phi(x)
            ts += cf[sl]
            np.multiply(ts, dyf[sl], out=dx[sl])


def _erf32(x: np.ndarray) -> np.ndarray:
    flat = np.ascontiguousarray(x).reshape(-1)                    # (N,)
    out = np.empty_like(flat)                                     # (N,)
    s = _Scratch32(flat.size, 3, u_max=16.0)                      # erf(4) = 1 - 1.5e-8 rounds to 1
    with np.errstate(over="ignore"):
        for sl in _blocks(flat.size):
            o = out[sl]
            _odd_rational32(flat[sl], o, s, _P32, _Q32)
            np.minimum(o, s.one[: o.size], out=o)                 # saturate at exactly +-1
            np.maximum(o, s.minus_one[: o.size], out=o)
    return out.reshape(x.shape)


def _normal_cdf_tail32(x: np.ndarray) -> np.ndarray:
    """Phi(x) = erfc(z) / 2, z = -x / sqrt(2), for float32 x <= -sqrt(2), with relative accuracy:
    erfc(z) = exp(-z^2) F(z) / z, F the float64 tail series cut at degree 9 (the dropped terms
    are below 1e-8 of F) and expanded in powers of s for an in-place Horner in float32."""
    z = x * np.float32(-_RSQRT2)                                  # (n,) >= 1
    f = np.float32(8.0) / (z + np.float32(3.0))                   # (n,)
    np.subtract(np.float32(1.0), f, out=f)                        # s = 1 - 8 / (z + 3), in [-1, 1]
    _horner(f, f.copy(), _TAIL32)                                 # F(z) = z exp(z^2) erfc(z)
    with np.errstate(under="ignore", over="ignore"):
        e = np.exp((x * x) * np.float32(-0.5))                    # exp(-z^2), z^2 = x^2 / 2 exactly
    f *= e
    f /= z + z
    return f


def _erf_small64(x: np.ndarray) -> np.ndarray:
    """erf(x) for |x| < 1, float64."""
    return x * _horner(np.empty_like(x), x * x, _S64)


def _erfc_tail64(z: np.ndarray, z2: np.ndarray | None = None) -> np.ndarray:
    """erfc(z) for z >= 1 (or inf), float64, relative accuracy kept in the far tail.
    ``z2`` may pass z^2 computed more exactly than z * z (Phi passes x^2 / 2)."""
    s = 1.0 - 8.0 / (z + 3.0)                                     # in [-1, 1]
    two_s = 2.0 * s
    b1, b2 = np.zeros_like(z), np.zeros_like(z)
    for c in _T64[:0:-1]:                                         # Clenshaw: b_k = c_k + 2 s b_{k+1} - b_{k+2}
        b2 *= -1.0
        b2 += two_s * b1
        b2 += c
        b1, b2 = b2, b1
    f = s * b1
    f -= b2
    f += _T64[0]                                                  # z exp(z^2) erfc(z)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        return np.exp(-(z * z if z2 is None else z2)) * f / z


def _erf64(x: np.ndarray) -> np.ndarray:
    out = np.empty_like(x)
    small = np.abs(x) < 1.0                                       # NaN goes to the tail branch and stays NaN
    out[small] = _erf_small64(x[small])
    xb = x[~small]
    out[~small] = np.copysign(1.0 - _erfc_tail64(np.abs(xb)), xb)
    return out


def _normal_cdf64(x: np.ndarray) -> np.ndarray:
    """Phi(x) = erfc(-x / sqrt(2)) / 2, float64, accurate relative to Phi also for x << 0."""
    z = x * -_RSQRT2
    out = np.empty_like(x)
    small = np.abs(z) < 1.0
    out[small] = 1.0 - _erf_small64(z[small])
    zb, xb = z[~small], x[~small]
    tail = _erfc_tail64(np.abs(zb), 0.5 * (xb * xb))
    out[~small] = np.where(zb > 0, tail, 2.0 - tail)
    out *= 0.5
    return out


def erf(x: np.ndarray) -> np.ndarray:
    """erf elementwise, float32 -> float32 (error < 5e-7), float64 -> float64 (relative error < 1e-15)."""
    if x.dtype == np.float32:
        return _erf32(x)
    if x.dtype == np.float64:
        return _erf64(x)
    raise TypeError(f"erf needs float32 or float64, got dtype {x.dtype}")


def relu_forward(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Returns (y, cache). Large arrays: the same on row blocks (ops/parallel.py)."""
    if parallel.blocked(x):
        y = np.empty_like(x)                                      # (...)
        n = x.shape[-1]
        parallel.map_rows(_relu_block, x.size // n, n, x.reshape(-1, n), y.reshape(-1, n))
        return y, x
    return np.maximum(x, x.dtype.type(0)), x


def _relu_block(rows: slice, x2: np.ndarray, y2: np.ndarray) -> None:
    np.maximum(x2[rows], x2.dtype.type(0), out=y2[rows])


def relu_backward(dy: np.ndarray, cache: np.ndarray) -> np.ndarray:
    """dx = dy where x > 0, else 0. A multiply by the boolean mask: numpy's ``where`` with a scalar
    takes a loop several times slower. (An inf or NaN in dy where x <= 0 gives NaN, not 0.)"""
    x = cache
    if parallel.blocked(dy, x):
        dx = np.empty_like(dy)                                    # (...)
        n = dy.shape[-1]
        parallel.map_rows(_relu_backward_block, dy.size // n, n, dy.reshape(-1, n), x.reshape(-1, n),
                          dx.reshape(-1, n))
        return dx
    return dy * (x > 0)                                           # (...) dy's dtype


def _relu_backward_block(rows: slice, dy2: np.ndarray, x2: np.ndarray, dx2: np.ndarray) -> None:
    np.multiply(dy2[rows], x2[rows] > 0, out=dx2[rows])


def gelu_forward(x: np.ndarray, bias: np.ndarray | None = None) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """Exact (erf) GELU, y = x Phi(x). Returns (y, cache); the cache holds (x, Phi(x)).
    bias (C,): y = gelu(x + bias), the cache then holds x + bias (the twin fuses the add)."""
    if x.dtype in kernels.FLOATS and x.ndim > 0 and kernels.twins("gelu_forward", x.size, x.dtype):
        from .fused import activations as twin  # the compiled twin (numba, on first use)
        kernels.record("gelu_forward", "numba")
        return twin.gelu_forward(x, bias, False)
    kernels.record("gelu_forward", "numpy")
    if bias is not None:
        x = x + bias                                              # (..., C)
    if x.dtype == np.float64:
        cdf = _normal_cdf64(x)                                    # (...)
        return x * cdf, (x, cdf)
    if x.dtype != np.float32:
        raise TypeError(f"gelu needs float32 or float64, got dtype {x.dtype}")
    flat = np.ascontiguousarray(x).reshape(-1)                    # (N,)
    y = np.empty_like(flat)                                       # (N,)
    cdf = np.empty_like(flat)                                     # (N,) Phi(x), kept for the backward
    tail = np.empty(flat.shape, dtype=bool)                       # (N,) x below _GELU_TAIL32
    # large arrays, several threads: spans of the same blocks on each (ops/parallel.py), the same bits
    spans = parallel.map_rows if parallel.blocked(flat) else _one_span
    spans(_gelu32_span, flat.size, 1, flat, y, cdf, tail)
    idx = np.flatnonzero(tail)                                    # (n,) few for typical activations
    if idx.size:
        xt = flat[idx]                                            # (n,)
        cdf[idx] = ct = _normal_cdf_tail32(xt)
        y[idx] = xt * ct
    return y.reshape(x.shape), (flat.reshape(x.shape), cdf.reshape(x.shape))


def gelu_backward(dy: np.ndarray, cache: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """dx = dy (Phi(x) + x phi(x)), phi the standard normal density; reuses the forward's Phi."""
    x, cdf = cache
    if x.dtype in kernels.FLOATS and x.ndim > 0 and kernels.twins("gelu_backward", x.size, x.dtype):
        from .fused import activations as twin
        kernels.record("gelu_backward", "numba")
        return twin.gelu_backward(dy, cache, False)
    kernels.record("gelu_backward", "numpy")
    if x.dtype == np.float64:
        return dy * (cdf + x * np.exp(-0.5 * (x * x)) * _RSQRT2PI)
    xf = x.reshape(-1)                                            # contiguous: the forward made it so
    cf = cdf.reshape(-1)
    dyf = np.ascontiguousarray(dy).reshape(-1)                    # (N,)
    dx = np.empty_like(xf)                                        # (N,)
    spans = parallel.map_rows if parallel.blocked(xf) else _one_span
    spans(_gelu32_backward_span, xf.size, 1, xf, cf, dyf, dx)
    return dx.reshape(x.shape)


# -- GELU, tanh approximation (Hendrycks & Gimpel 2016, section 2; GPT-2's "gelu_new") ----------
#   gelu_tanh(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2 / pi) (x + 0.044715 x^3)
_TANH_C = math.sqrt(2.0 / math.pi)
_TANH_A = 0.044715


def gelu_tanh_forward(x: np.ndarray, bias: np.ndarray | None = None
                      ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """GELU's tanh approximation, elementwise, in x's dtype (float32 or float64).
    Returns (y, cache); the cache holds (x, tanh(u)). bias (C,): of x + bias, as ``gelu_forward``."""
    if x.dtype not in (np.float32, np.float64):
        raise TypeError(f"gelu_tanh needs float32 or float64, got dtype {x.dtype}")
    if x.ndim > 0 and kernels.twins("gelu_tanh_forward", x.size, x.dtype):
        from .fused import activations as twin
        kernels.record("gelu_tanh_forward", "numba")
        return twin.gelu_forward(x, bias, True)
    kernels.record("gelu_tanh_forward", "numpy")
    if bias is not None:
        x = x + bias                                              # (..., C)
    k = x.dtype.type                                              # constants in x's dtype: no upcast
    t = x * x                                                     # (...) x^2
    t *= k(_TANH_A)
    t += k(1.0)
    t *= x
    t *= k(_TANH_C)                                               # u = c (x + a x^3)
    np.tanh(t, out=t)                                             # (...) tanh(u), kept for the backward
    y = t + k(1.0)                                                # (...)
    y *= x
    y *= k(0.5)
    return y, (x, t)


def gelu_tanh_backward(dy: np.ndarray, cache: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """dx = dy (0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 a x^2)), t = tanh(u), the forward's:
    the product rule on 0.5 x (1 + tanh(u)), with d tanh(u) / du = 1 - t^2 and du/dx = c (1 + 3 a x^2)."""
    x, t = cache
    if x.dtype in kernels.FLOATS and x.ndim > 0 and kernels.twins("gelu_tanh_backward", x.size, x.dtype):
        from .fused import activations as twin
        kernels.record("gelu_tanh_backward", "numba")
        return twin.gelu_backward(dy, cache, True)
    kernels.record("gelu_tanh_backward", "numpy")
    k = x.dtype.type
    du = x * x                                                    # (...)
    du *= k(3.0 * _TANH_A)
    du += k(1.0)
    du *= k(_TANH_C)                                              # du/dx
    sech2 = t * t                                                 # (...)
    np.subtract(k(1.0), sech2, out=sech2)                         # 1 - t^2
    du *= sech2
    du *= x
    du += t
    du += k(1.0)
    du *= k(0.5)                                                  # dy/dx
    du *= dy
    return du
