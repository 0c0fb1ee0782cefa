"""Adam and AdamW (Kingma & Ba 2015; Loshchilov & Hutter 2019), updating the model's arrays in place.

For every parameter p with gradient g, at step t = 1, 2, ...:

    m = beta1 * m + (1 - beta1) * g            first moment (running mean of g)
    v = beta2 * v + (1 - beta2) * g^2          second moment (running mean of g^2)
    p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)

The two divisions undo the zero start of m and v (bias correction), with eps placed as in
``torch.optim.Adam``. The paper trains with beta1 = 0.9, beta2 = 0.98, eps = 1e-9 (section 5.3).

Weight decay: Adam adds ``weight_decay * p`` to the gradient (L2 regularisation, which then goes
through the moments); AdamW instead shrinks the parameter directly, ``p *= 1 - lr * weight_decay``,
before the Adam step ("decoupled" decay), as ``torch.optim.AdamW`` does.

The optimizer holds no copy of the parameters: ``params`` is the model's ``state_dict()``, whose
arrays are the ones the modules compute with, and every update writes into them with ``out=``.
With numba (``ops/kernels.py``), ``step`` runs the compiled twin ``ops/fused/adam.py``: the same
formulas, one pass over p, g, m and v (tests/ops/test_twins.py).
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ..ops import kernels, parallel, workspace

_TWIN_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


class Adam:
    """Adam over a flat dict of named arrays (a model's ``state_dict()``).

    params: name -> array, updated in place by ``step``.
    decay: optional ``decay(name, array) -> bool`` choosing which parameters get weight decay
        (default: all of them, as torch does when given one parameter group).
    """

    decoupled = False

    def __init__(self, params: dict[str, np.ndarray], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.98),
                 eps: float = 1e-9, weight_decay: float = 0.0,
                 decay: Callable[[str, np.ndarray], bool] | None = None) -> None:
        if not isinstance(params, dict) or not params:
            raise ValueError("params must be a non-empty dict of name -> array (a model's state_dict())")
        beta1, beta2 = betas
        if not (0.0 <= beta1 < 1.0 and 0.0 <= beta2 < 1.0):
            raise ValueError(f"betas must be in [0, 1), got {betas}")
        if not eps > 0.0:
            raise ValueError(f"eps must be > 0, got {eps}")
        if not (lr >= 0.0 and weight_decay >= 0.0):
            raise ValueError(f"lr and weight_decay must be >= 0, got lr={lr}, weight_decay={weight_decay}")
        for k, p in params.items():
            if not (isinstance(p, np.ndarray) and p.dtype.kind == "f"):
                raise TypeError(f"parameter {k} must be a floating numpy array, got {type(p).__name__}")
        self.params = params
        self.lr, self.beta1, self.beta2, self.eps = float(lr), float(beta1), float(beta2), float(eps)
        self.weight_decay = float(weight_decay)
        self.decay = {k: (decay is None or bool(decay(k, p))) for k, p in params.items()}
        self.t = 0                                                       # steps taken
        self.m = {k: np.zeros_like(p) for k, p in params.items()}        # first moments, like p
        self.v = {k: np.zeros_like(p) for k, p in params.items()}        # second moments, like p

    def step(self, grads: dict[str, np.ndarray], lr: float | None = None) -> None:
        """One update of every parameter from ``grads`` (same keys and shapes). ``lr`` overrides
        the constant learning rate for this step (schedules pass it in)."""
        missing = sorted(set(self.params) - set(grads))
        unknown = sorted(set(grads) - set(self.params))
        if missing or unknown:
            raise ValueError(f"grads must have the parameters' keys: missing {missing[:5]}, unknown {unknown[:5]}")
        lr = self.lr if lr is None else float(lr)
        self.t += 1
        b1, b2 = self.beta1, self.beta2
        bc1 = 1.0 - b1 ** self.t
        sqrt_bc2 = math.sqrt(1.0 - b2 ** self.t)
        for k, p in self.params.items():
            g = grads[k]
            if g.shape != p.shape:
                raise ValueError(f"grad {k} has shape {g.shape}, parameter has {p.shape}")
            wd = self.weight_decay if self.decay[k] else 0.0
            coef = (lr, wd, self.decoupled, b1, b2, bc1, sqrt_bc2, self.eps)
            m, v = self.m[k], self.v[k]
            flat = [a.reshape(-1) for a in (p, g, m, v)] if all(a.flags.c_contiguous for a in (p, g, m, v)) else None
            if flat is not None and p.dtype in _TWIN_DTYPES and g.dtype == p.dtype and kernels.twins("adam", p.size):
                from ..ops.fused.adam import adam_update  # the compiled twin: numba loads on first use
                adam_update(flat[0], flat[1], flat[2], flat[3], coef)
                kernels.record("adam", "numba")
                continue
            kernels.record("adam", "numpy")
            if flat is not None and parallel.blocked(*flat, one_thread_from=parallel.ONE_THREAD_MIN):
                # large: the same update on flat blocks on a few threads (ops/parallel.py), the same bits
                parallel.map_rows(_update_block, p.size, 1, *flat, coef)
            else:
                # two scratch arrays like p; large ones are reused from step to step (ops/workspace.py)
                _update(p, g, m, v, coef, workspace.empty(p.shape, p.dtype), workspace.empty(p.shape, p.dtype))

    # -- state, as a flat dict of arrays (saved with safetensors) -----------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        """``{"step": int64 scalar, "exp_avg.<name>": m, "exp_avg_sq.<name>": v}`` (torch's names)."""
        out: dict[str, np.ndarray] = {"step": np.array(self.t, dtype=np.int64)}
        for k in self.params:
            out[f"exp_avg.{k}"] = self.m[k]
            out[f"exp_avg_sq.{k}"] = self.v[k]
        return out

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore from ``state_dict()``'s output, checking keys and shapes."""
        want = set(self.state_dict())
        missing, unknown = sorted(want - set(state)), sorted(set(state) - want)
        if missing or unknown:
            raise ValueError(f"optimizer state does not match the model: missing {missing[:3]}, unknown {unknown[:3]}")
        for k in self.params:
            for name, store in (("exp_avg", self.m), ("exp_avg_sq", self.v)):
                a = np.asarray(state[f"{name}.{k}"])
                if a.shape != store[k].shape:
                    raise ValueError(f"optimizer state {name}.{k} has shape {a.shape}, parameter has {store[k].shape}")
                store[k][...] = a
        self.t = int(np.asarray(state["step"]))


class AdamW(Adam):
    """Adam with decoupled weight decay (``torch.optim.AdamW``); weight_decay defaults to 0.01 as there."""

    decoupled = True

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.98), eps: float = 1e-9,
                 weight_decay: float = 0.01, decay=None) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, decay)


def _update_block(rows: slice, p: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray, coef: tuple) -> None:
    """``_update`` on the elements ``rows`` of flat views, with its own scratch."""
    n = rows.stop - rows.start
    _update(p[rows], g[rows], m[rows], v[rows], coef, np.empty(n, p.dtype), np.empty(n, p.dtype))


def _update(p: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray, coef: tuple,
            s: np.ndarray, denom: np.ndarray) -> None:
    """One Adam update of p, m and v in place (the formulas of the module docstring), with two
    scratch arrays like p. coef: (lr, weight decay, decoupled, beta1, beta2, 1 - beta1^t,
    sqrt(1 - beta2^t), eps)."""
    lr, wd, decoupled, b1, b2, bc1, sqrt_bc2, eps = coef
    f = p.dtype.type                                                 # python floats -> the param dtype
    if wd and decoupled:
        p *= f(1.0 - lr * wd)                                        # AdamW: shrink p directly
    elif wd:                                                         # Adam: L2 term joins the gradient
        g = np.add(g, np.multiply(f(wd), p, out=denom), out=denom)   # (denom is free until below)
    m *= f(b1)
    m += np.multiply(f(1.0 - b1), g, out=s)
    v *= f(b2)
    v += np.multiply(f(1.0 - b2), np.multiply(g, g, out=s), out=s)
    np.sqrt(v, out=denom)                                            # like p
    denom /= f(sqrt_bc2)
    denom += f(eps)
    s = np.multiply(f(lr / bc1), m, out=s)
    s /= denom
    p -= s
