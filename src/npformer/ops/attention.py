"""Scaled dot-product attention, softmax(Q K^T / sqrt(D)) V (paper section 3.2.1).

Dimension legend:
    ...  any leading batch / head dimensions
    Tq   query positions,  Tk  key positions
    D    query/key size,   Dv  value size

The reference op; its forward-only fast twin for inference is ``ops/inference.py attention_inference``.
"""
from __future__ import annotations

import numpy as np

from .dropout import dropout_backward, dropout_forward
from .softmax import softmax_backward, softmax_forward


def causal_mask(t_q: int, t_k: int, offset: int = 0) -> np.ndarray:
    """Boolean (Tq, Tk) mask, True where query i may read key j, i.e. j <= i + offset.

    ``offset=0`` is the top-left alignment of torch's ``is_causal``; a decoder
    reading a KV cache of ``past`` earlier keys uses ``offset=past``.
    """
    return np.tri(t_q, t_k, k=offset, dtype=bool)                # (Tq, Tk)


def _sum_to_shape(x: np.ndarray, shape: tuple) -> np.ndarray:
    """Undo broadcasting: sum ``x`` down to ``shape``."""
    if x.shape == shape:
        return x
    lead = x.ndim - len(shape)
    x = x.sum(axis=tuple(range(lead))) if lead else x
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and x.shape[i] != 1)
    return x.sum(axis=axes, keepdims=True) if axes else x


def additive_mask(allowed: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """bool ``allowed`` -> 0 where True, -inf where False, in ``dtype``, at the mask's own
    (broadcast) size, to be added to the scores: a masked copyto over every score would take
    numpy's slow masked loop."""
    dtype = np.dtype(dtype)
    return np.where(allowed, dtype.type(0), dtype.type(-np.inf))


def attention_forward(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None = None,
                      causal: bool = False, bias: np.ndarray | None = None,
                      dropout_p: float = 0.0, rng: np.random.Generator | None = None,
                      scale: float | None = None, out: np.ndarray | None = None
                      ) -> tuple[np.ndarray, np.ndarray, tuple]:
    """Returns (out, weights, cache).

    q (..., Tq, D), k (..., Tk, D), v (..., Tk, Dv) -> out (..., Tq, Dv), weights (..., Tq, Tk).
    mask: boolean, broadcastable to (..., Tq, Tk); True means "may attend".
    bias: float, added to the scores before the mask (torch's float ``attn_mask``).
    A query row whose keys are all masked gets zero weights and a zero output.
    Dropout (inverted) on the weights only when ``dropout_p > 0``; it needs ``rng``.
    out: where to write the output, of its shape and dtype; a strided view will do, such as the heads
    of a (B, Tq, E) array (``nn.split_heads``), which then holds the heads merged without a copy.
    """
    d = q.shape[-1]
    scale = (1.0 / np.sqrt(d)) if scale is None else scale
    if out is not None:
        want = np.broadcast_shapes(q.shape[:-2], v.shape[:-2]) + (q.shape[-2], v.shape[-1])
        _check_out("out", out, want, np.result_type(q, v))
    scores = np.matmul(q, np.swapaxes(k, -1, -2))                # (..., Tq, Tk)
    if causal:
        cm = causal_mask(q.shape[-2], k.shape[-2])               # (Tq, Tk)
        mask = cm if mask is None else (mask & cm)
    if bias is not None:
        scores *= q.dtype.type(scale)                            # python float would be fine; keep dtype explicit
        scores += bias
        weights, _ = softmax_forward(scores, out=scores, mask=mask)   # (..., Tq, Tk), in place
    else:
        # softmax(scale * scores) with the mask's -inf added: the compiled twin fuses both in
        weights, _ = softmax_forward(scores, out=scores, scale=scale, mask=mask)   # (..., Tq, Tk), in place
    drop = None
    used = weights
    if dropout_p > 0.0:
        if rng is None:
            raise ValueError("attention dropout needs an explicit rng")
        # the dropout op: its mask is 0 or 1 / (1 - p); large weights draw it on row blocks (ops/parallel.py)
        used, drop = dropout_forward(weights, dropout_p, rng)    # (..., Tq, Tk) each
    out = np.matmul(used, v, out=out)                            # (..., Tq, Dv)
    cache = (q, k, v, weights, drop, scale)
    return out, weights, cache


def _check_out(name: str, out: np.ndarray, shape: tuple, dtype: np.dtype) -> None:
    """ValueError unless ``out`` is an array of ``shape`` and ``dtype`` (a strided view is fine)."""
    if not isinstance(out, np.ndarray) or out.shape != tuple(shape) or out.dtype != dtype:
        got = (f"{out.shape} {out.dtype}" if isinstance(out, np.ndarray) else type(out).__name__)
        raise ValueError(f"{name} must be an array of shape {tuple(shape)} and dtype {np.dtype(dtype)}, got {got}")


def attention_weights_grad(dout: np.ndarray, cache: tuple) -> np.ndarray:
    """d loss / d weights (..., Tq, Tk), the gradient reaching the softmax's output (through the
    dropout mask, if any). ``attention_backward`` starts from it; explanations read it (Chefer et al. 2021)."""
    q, k, v, weights, drop, scale = cache
    dw = np.matmul(dout, np.swapaxes(v, -1, -2))                 # (..., Tq, Tk)
    if drop is not None:
        dropout_backward(dw, drop, out=dw)                       # dw * mask, in place
    return dw


def attention_backward(dout: np.ndarray, cache: tuple, dweights: np.ndarray | None = None,
                       out: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Returns (dq, dk, dv) with the shapes of q, k, v. ``dweights``: ``attention_weights_grad(dout,
    cache)`` when the caller has computed it already (it is read, not written). ``out``: three arrays
    of q's, k's and v's shapes and dtypes to write dq, dk, dv into (strided views will do: the heads
    of one (B, T, 3E) gradient, ``nn.split_heads``, for self-attention's packed projection); only
    where none of q, k, v was broadcast against the others."""
    q, k, v, weights, drop, scale = cache
    if out is not None:
        if not (isinstance(out, tuple) and len(out) == 3):
            raise ValueError(f"out must be a tuple of three arrays (dq, dk, dv), got {type(out).__name__}")
        lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
        if not q.shape[:-2] == k.shape[:-2] == v.shape[:-2] == lead:
            raise ValueError("out needs q, k and v of the same leading shape (none broadcast), got "
                             f"{q.shape}, {k.shape}, {v.shape}")
        for name, o, a in zip(("dq", "dk", "dv"), out, (q, k, v), strict=True):
            _check_out(f"out's {name}", o, a.shape, np.result_type(q, k, v, dout))
    dq_out, dk_out, dv_out = (None, None, None) if out is None else out
    used = dropout_backward(weights, drop)                       # (..., Tq, Tk) the weights after dropout
    dv = np.matmul(np.swapaxes(used, -1, -2), dout, out=dv_out)  # (..., Tk, Dv)
    if dweights is None:
        dw = attention_weights_grad(dout, cache)                 # (..., Tq, Tk), a fresh array
        ds = softmax_backward(dw, weights, out=dw, scale=scale)  # (..., Tq, Tk), in place: dw is ours
    else:
        ds = softmax_backward(dweights, weights, scale=scale)    # (..., Tq, Tk), fresh: dweights is theirs
    dq = np.matmul(ds, k, out=dq_out)                            # (..., Tq, D)
    dk = np.matmul(np.swapaxes(ds, -1, -2), q, out=dk_out)       # (..., Tk, D)
    return _sum_to_shape(dq, q.shape), _sum_to_shape(dk, k.shape), _sum_to_shape(dv, v.shape)
