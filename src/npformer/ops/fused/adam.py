"""Adam's twin: one pass over the parameter, its gradient and both moments.

Mirrors ``train/optim.py _update`` (Adam and AdamW) operation for operation, in the parameter's
dtype; pinned by tests/ops/test_twins.py (test_adam_twin). Dimension legend: N elements (flat).
"""
from __future__ import annotations

import numpy as np
from numba import prange

from ..kernels import Kernel

CHUNK = 1 << 16               # elements per parallel chunk (by size alone, never by thread count)


def _adam(p: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray, coef: np.ndarray) -> None:
    # coef: weight decay, decoupled (0/1), beta1, beta2, sqrt(1 - beta2^t), eps, 1 - lr * wd,
    # 1 - beta1, 1 - beta2, lr / (1 - beta1^t): each formed as the reference forms it (python
    # float arithmetic), then rounded to the dtype
    wd, decoupled, b1, b2, sqrt_bc2, eps = coef[0], coef[1], coef[2], coef[3], coef[4], coef[5]
    shrink, one_b1, one_b2, step = coef[6], coef[7], coef[8], coef[9]
    n = p.size
    mode = 0 if wd == 0 else (1 if decoupled != 0 else 2)    # chosen once, so that the inner loops vectorize
    for c in prange((n + CHUNK - 1) // CHUNK):
        lo, hi = c * CHUNK, min(n, (c + 1) * CHUNK)
        # views of the chunk, indexed from 0: LLVM vectorizes a loop over range(k) of these, not one
        # over range(lo, hi) (numba's negative-index check on a start it cannot prove >= 0)
        pc, gc, mc, vc = p[lo:hi], g[lo:hi], m[lo:hi], v[lo:hi]
        if mode == 1:                                     # AdamW: shrink p directly, then the step
            for i in range(hi - lo):
                gi = gc[i]
                mi = mc[i] * b1 + one_b1 * gi
                vi = vc[i] * b2 + one_b2 * (gi * gi)
                mc[i] = mi
                vc[i] = vi
                pc[i] = pc[i] * shrink - step * mi / (np.sqrt(vi) / sqrt_bc2 + eps)
        elif mode == 2:                                   # Adam: the L2 term joins the gradient
            for i in range(hi - lo):
                gi = gc[i] + wd * pc[i]
                mi = mc[i] * b1 + one_b1 * gi
                vi = vc[i] * b2 + one_b2 * (gi * gi)
                mc[i] = mi
                vc[i] = vi
                pc[i] = pc[i] - step * mi / (np.sqrt(vi) / sqrt_bc2 + eps)
        else:
            for i in range(hi - lo):
                gi = gc[i]
                mi = mc[i] * b1 + one_b1 * gi
                vi = vc[i] * b2 + one_b2 * (gi * gi)
                mc[i] = mi
                vc[i] = vi
                pc[i] = pc[i] - step * mi / (np.sqrt(vi) / sqrt_bc2 + eps)


adam_kernel = Kernel(_adam)


def adam_update(p: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray, coef: tuple) -> None:
    """p, g, m, v: flat C-contiguous arrays of one float dtype; coef as ``_update``'s."""
    lr, wd, decoupled, b1, b2, bc1, sqrt_bc2, eps = coef
    c = np.array([wd, float(decoupled), b1, b2, sqrt_bc2, eps, 1.0 - lr * wd, 1.0 - b1, 1.0 - b2, lr / bc1],
                 dtype=p.dtype)
    adam_kernel(p, g, m, v, c)
