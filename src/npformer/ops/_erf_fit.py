"""Derives the erf coefficients used in ``activations.py``; run ``python -m npformer.ops._erf_fit``.

Not imported by the library. It needs ``mpmath`` (reference values to 50 digits) and prints
the tables that ``activations.py`` holds, so anyone can regenerate and check them.

float32, one formula for all x:
    erf(x) = x * P(u) / Q(u),  u = min(x^2, 16),  clipped to [-1, 1] (erf(4) = 1 - 1.5e-8 rounds to 1).
    P degree 5, Q degree 5, Q(0) = 1: a rational fit to erf(x)/x on [0, 4], relative error,
    by linearised least squares (Sanathanan-Koerner re-weighting) then Lawson re-weighting
    towards the minimax fit. (activations.py then divides P and Q by Q's leading coefficient.)

float64, two pieces:
    |x| < 1:   erf(x) = x * S(u), u = x^2, S the degree-12 Chebyshev interpolant of erf(x)/x
               on u in [0, 1] (an entire function: its Chebyshev coefficients fall below 1e-17).
    |x| >= 1:  erfc(z) = exp(-z^2) * F(s) / z with F(z) = z exp(z^2) erfc(z), which goes to
               1/sqrt(pi) as z -> inf, interpolated by Chebyshev in y = (z - 3) / (z + 3)
               (y in [-1/2, 1) for z in [1, inf)), degree 24, summed with Clenshaw in
               s = 2 (y + 1/2) / (3/2) - 1 = 1 - 8 / (z + 3).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

K_MAP = 3.0          # the float64 tail maps z in [1, inf) to y = (z - K) / (z + K)
DEG_SMALL = 12       # float64 |x| < 1 polynomial degree in u = x^2
DEG_TAIL = 24        # float64 tail Chebyshev degree (coefficients below 2e-19 after it)
RATIONAL = (5, 5)    # float32 numerator, denominator degrees


def _mp() -> Any:
    import mpmath
    mpmath.mp.dps = 50
    return mpmath


def chebyshev_interpolant(f: Callable[[Any], Any], deg: int) -> list:
    """Chebyshev coefficients c_0..c_deg of the interpolant of f on [-1, 1], in mpmath."""
    mp = _mp()
    n = deg + 1
    nodes = [mp.cos(mp.pi * (j + mp.mpf(1) / 2) / n) for j in range(n)]
    values = [f(s) for s in nodes]
    coef = [2 * mp.fsum(values[j] * mp.cos(mp.pi * k * (j + mp.mpf(1) / 2) / n) for j in range(n)) / n
            for k in range(n)]
    coef[0] /= 2
    return coef


def small_polynomial() -> list:
    """Monomial coefficients s_0..s_12 of S(u) ~ erf(sqrt(u))/sqrt(u) on u in [0, 1]."""
    mp = _mp()

    def f(s: Any) -> Any:                                   # s in [-1, 1] -> u = (s + 1) / 2
        u = (s + 1) / 2
        if u == 0:
            return 2 / mp.sqrt(mp.pi)
        x = mp.sqrt(u)
        return mp.erf(x) / x

    cheb = chebyshev_interpolant(f, DEG_SMALL)
    # T_k(2u - 1) expanded in powers of u, exactly in mpmath
    mono = [mp.mpf(0)] * (DEG_SMALL + 1)
    t_prev, t_cur = [mp.mpf(1)], [mp.mpf(-1), mp.mpf(2)]   # T_0, T_1 in u
    for k, c in enumerate(cheb):
        t = t_prev if k == 0 else t_cur
        if k >= 2:
            nxt = [mp.mpf(0)] * (k + 1)                    # T_k = 2 (2u - 1) T_{k-1} - T_{k-2}
            for i, a in enumerate(t_cur):
                nxt[i + 1] += 4 * a
                nxt[i] -= 2 * a
            for i, a in enumerate(t_prev):
                nxt[i] -= a
            t_prev, t_cur = t_cur, nxt
            t = nxt
        for i, a in enumerate(t):
            mono[i] += c * a
    return [float(m) for m in mono]


def tail_chebyshev() -> tuple:
    """Chebyshev coefficients of F(z) = z exp(z^2) erfc(z) in s, where y = (z-K)/(z+K)
    runs over [y0, 1] and s = 2 (y - y0) / (1 - y0) - 1 over [-1, 1]. Returns (coef, y0)."""
    mp = _mp()
    y0 = (1 - K_MAP) / (1 + K_MAP)

    def f(s: Any) -> Any:
        y = y0 + (s + 1) * (1 - y0) / 2
        if y >= 1:
            return 1 / mp.sqrt(mp.pi)
        z = K_MAP * (1 + y) / (1 - y)
        return z * mp.exp(z * z) * mp.erfc(z)

    return [float(c) for c in chebyshev_interpolant(f, DEG_TAIL)], y0


def rational_float32(iters: int = 30, lawson: int = 80) -> tuple:
    """Monomial coefficients (P, Q) with erf(x) ~ x P(x^2) / Q(x^2) on [0, 4], Q(0) = 1."""
    mp = _mp()
    m, n = RATIONAL
    x = 2.0 * (1.0 - np.cos(np.linspace(0.0, np.pi, 3000)))          # (N,) dense near 0 and 4
    x[0] = 1e-6
    g = np.array([float(mp.erf(mp.mpf(v)) / mp.mpf(v)) for v in x])   # (N,) erf(x) / x
    u = x * x
    s = (2.0 * u - 16.0) / 16.0                                        # u in [0, 16] -> [-1, 1]
    tp = np.polynomial.chebyshev.chebvander(s, m)                      # (N, m+1)
    tq = np.polynomial.chebyshev.chebvander(s, n)                      # (N, n+1)
    q_prev, w = np.ones_like(u), np.ones_like(u)
    best = None
    for it in range(iters + lawson):
        wt = w / (g * np.abs(q_prev))                  # relative error, linearised about q_prev
        a_mat = np.hstack([tp, -g[:, None] * tq[:, 1:]]) * wt[:, None]
        c, *_ = np.linalg.lstsq(a_mat, g * wt, rcond=None)
        pc, qc = c[: m + 1], np.concatenate([[1.0], c[m + 1:]])
        p_val, q_prev = tp @ pc, tq @ qc
        err = (p_val / q_prev - g) / g
        if it >= iters:                                # Lawson: weight up where the error is large
            w = w * np.sqrt(np.abs(err))
            w /= w.max()
        e = np.abs(err).max()
        if best is None or e < best[0]:
            best = (e, pc, qc)
    assert best is not None                            # iters + lawson >= 1 rounds ran
    e, pc, qc = best
    cheb = np.polynomial.Chebyshev
    p_mono = cheb(pc, domain=[0.0, 16.0]).convert(kind=np.polynomial.Polynomial).coef
    q_mono = cheb(qc, domain=[0.0, 16.0]).convert(kind=np.polynomial.Polynomial).coef
    return p_mono / q_mono[0], q_mono / q_mono[0], e


def main() -> None:
    p, q, e = rational_float32()
    print(f"# float32 rational, fit relative error {e:.2e}")
    print("_P32 =", [float(v) for v in p])
    print("_Q32 =", [float(v) for v in q])
    print("_S64 =", small_polynomial())
    coef, y0 = tail_chebyshev()
    print(f"# tail: K = {K_MAP}, y0 = {y0}, last coefficients {coef[-3:]}")
    print("_T64 =", coef)


if __name__ == "__main__":
    main()
