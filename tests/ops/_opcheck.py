"""Shared checks for the op tests: relative error, central finite differences, torch conversion.

Relative error is normwise: max |a - b| / max |b| (elementwise ratios blow up where an entry
is near zero, e.g. a gradient component that cancels, without saying anything about the op).
"""
from __future__ import annotations

import numpy as np

TOL_TORCH = 1e-9      # float64 forward/backward vs torch autograd
TOL_FD = 1e-6         # analytic gradient vs central differences (h = 1e-6: truncation ~h^2, roundoff ~1e-16/h)
TOL_F32 = 1e-6        # float32 forward vs float64 forward on the same inputs


def rel_err(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape, f"shapes differ: {a.shape} vs {b.shape}"
    scale = np.abs(b).max() if b.size else 0.0
    diff = np.abs(a - b).max() if a.size else 0.0
    return float(diff / scale) if scale > 0 else float(diff)


def assert_rel(a, b, tol: float, what: str = "") -> None:
    e = rel_err(a, b)
    assert e <= tol, f"{what}: relative error {e:.3e} > {tol:.0e}"


def to_torch(*arrays, grad: bool = True):
    import torch
    return [torch.tensor(a, dtype=torch.float64, requires_grad=grad) for a in arrays]


def numeric_grad(f, x: np.ndarray, dout: np.ndarray, h: float = 1e-6) -> np.ndarray:
    """Central differences of sum(f(x) * dout) with respect to x (float64, modified in place)."""
    g = np.zeros_like(x)
    flat, gflat = x.reshape(-1), g.reshape(-1)
    for i in range(flat.size):
        old = flat[i]
        flat[i] = old + h
        up = float(np.sum(f(x) * dout))
        flat[i] = old - h
        down = float(np.sum(f(x) * dout))
        flat[i] = old
        gflat[i] = (up - down) / (2 * h)
    return g
