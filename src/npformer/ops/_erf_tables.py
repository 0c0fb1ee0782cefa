"""The coefficient tables of the reference's erf and GELU (``activations.py``), derived by
``python -m npformer.ops._erf_fit`` (which prints them again from reference values). Kept apart from
the code so that the GELU's compiled twin (``fused/activations.py``) evaluates the same numbers
without importing the reference module.
"""
from __future__ import annotations

import math

import numpy as np

# erf(x) ~ x P(x^2) / Q(x^2) on [0, 4], float32 path (monomial coefficients, low order first)
_P = np.array([1.128379139387841, 0.19354420385032708, 0.05310163072817995, 0.0038833065495786495,
               0.0002845649459188761, 1.9867876444412443e-06])
_Q = np.array([1.0, 0.5048566408318031, 0.11534964344916243, 0.015207176616225122,
               0.0011855618295602975, 3.742017942345549e-05])
# both divided by Q's leading coefficient: a monic Q saves one operation in its Horner loop
_P32, _Q32 = (_P / _Q[-1]).astype(np.float32), (_Q / _Q[-1]).astype(np.float32)
# GELU folds x / sqrt(2) and the halving into the coefficients:
#   Phi(x) = 1/2 + x Pg(x^2) / Qg(x^2),  Pg(v) = P(v / 2) / (2 sqrt(2)),  Qg(v) = Q(v / 2)
_HALVES = 0.5 ** np.arange(_P.size)
_QG = _Q * _HALVES
_PG32 = (_P * _HALVES / (2.0 * math.sqrt(2.0)) / _QG[-1]).astype(np.float32)
_QG32 = (_QG / _QG[-1]).astype(np.float32)

# erf(x) ~ x S(x^2) for |x| < 1, float64 path
_S64 = np.array([1.1283791670955126, -0.3761263890318375, 0.11283791670954879, -0.026866170645076792,
                 0.0052239776248180145, -0.000854832698083379, 0.0001205533111164271,
                 -1.4925595266831182e-05, 1.6461000484121368e-06, -1.6350312701054695e-07,
                 1.4659775274047436e-08, -1.1372848856791674e-09, 5.957176147748911e-11])
# z exp(z^2) erfc(z) for z >= 1, as sum_k c_k T_k(s), s = 1 - 8 / (z + 3)
_T64 = np.array([0.5270327699645345, 0.058438373634075017, -0.028760006767845146, 0.00942338429719674,
                 -0.0023281563723139085, 0.00043730093384926333, -5.8303544643230866e-05,
                 4.043114560930833e-06, 2.70898072771642e-07, -9.965420547129235e-08,
                 5.899419235825997e-09, 1.3859802863792783e-09, -2.3156333271134693e-10,
                 -1.5604196875242842e-11, 6.283638983525688e-12, 1.2178727055545244e-13,
                 -1.675299253132468e-13, 3.133338733100231e-16, 4.754423145067738e-15,
                 -2.4579812533503456e-17, -1.457110946967939e-16, -1.1938974202344695e-18,
                 4.7420740223191815e-18, 1.7658458492867937e-19, -1.6333279562106657e-19])
# the same series cut at degree 9 and written in powers of s, for the float32 GELU tail
_TAIL32 = np.polynomial.chebyshev.cheb2poly(_T64[:10]).astype(np.float32)

# float32 GELU: below this x, Phi(x) < 0.0024 is recomputed from the erfc tail, since 1 + erf
# cancels there and the rational's rounding (up to 4e-7 in erf) would be multiplied by |x|.
_GELU_TAIL32 = np.float32(-2.0 * math.sqrt(2.0))
