"""torch's calling conventions at npformer's boundary, in NumPy (no torch needed).

The torch-style calls (``calls.py``: ``torch_style(module)``) take inputs and masks as torch's
``nn.MultiheadAttention`` / ``nn.Transformer*`` do and turn them into npformer's:

    torch                                   npformer
    bool mask, True = NOT allowed           bool ``mask``, True = may attend   (so: mask = ~m)
    float mask, added to the scores         float ``bias``, added to the scores
    attn_mask (Tq, Tk) or (B*H, Tq, Tk)     broadcastable to (B, H, Tq, Tk)
    key_padding_mask (B, Tk)                (B, 1, 1, Tk)
    unbatched (T, E), key_padding (Tk,)     a batch of one

torch turns a boolean mask into a float one (-inf where True) and adds the masks, so
mixing a boolean and a float mask is a sum of biases; here the boolean parts are
and-ed into ``mask`` and the float parts summed into ``bias``, which is the same.
``is_causal`` is a hint in torch that the given mask is causal; npformer applies
the causal mask itself (and-ed with any given mask), so a correct hint changes nothing
and a missing mask is not an error.

Dimension legend: B batch, H heads, Tq query positions, Tk key positions, E model width.
"""
from __future__ import annotations

import numpy as np

from ..ops._checks import check_float
from ..ops.attention import causal_mask


def check_input(x, name: str, dtype, d_model: int) -> np.ndarray:
    """A torch-style input: (B, T, E) batched or (T, E) unbatched, in the module's dtype."""
    x = check_float(x, name)
    if x.ndim not in (2, 3):
        raise ValueError(f"{name} must be (B, T, E) batched or (T, E) unbatched, got shape {x.shape}")
    if x.shape[-1] != d_model:
        raise ValueError(f"{name} must have {d_model} features (the module's d_model) in its last "
                         f"dimension, got shape {x.shape}")
    if x.dtype != dtype:
        raise TypeError(f"{name} has dtype {x.dtype} but the module's parameters are {np.dtype(dtype)}; "
                        f"convert one of them (module.astype(...) or x.astype(...))")
    return x


def check_same_batching(x, name: str, ref, ref_name: str) -> None:
    """``x`` and ``ref`` are both batched with equal batch sizes, or both unbatched."""
    if x.ndim != ref.ndim:
        raise ValueError(f"{name} of shape {x.shape} and {ref_name} of shape {ref.shape} must both be "
                         f"batched (3-D) or both unbatched (2-D)")
    if x.ndim == 3 and x.shape[0] != ref.shape[0]:
        raise ValueError(f"the batch sizes of {name} ({x.shape[0]}) and {ref_name} ({ref.shape[0]}) "
                         f"must be equal")


def _as_torch_mask(m, name: str) -> np.ndarray:
    """A torch-convention mask as an ndarray, bool or float, checked."""
    if not isinstance(m, np.ndarray):
        if type(m).__module__.startswith("torch"):
            raise TypeError(f"{name} must be a numpy array, got a torch tensor; pass {name}.numpy()")
        m = np.asarray(m)
    if m.dtype != np.bool_ and m.dtype.kind != "f":
        raise TypeError(f"{name} must be bool (torch's convention: True = NOT allowed to attend) or float "
                        f"(added to the attention scores), got dtype {m.dtype} with shape {m.shape}")
    if m.dtype.kind == "f" and np.isnan(m).any():
        raise ValueError(f"float {name} contains NaN (shape {m.shape}); use -inf to forbid a position")
    return m


def attention_masks(attn_mask, key_padding_mask, *, batch: int, n_heads: int, t_q: int, t_k: int,
                    dtype, batched: bool = True, is_causal: bool = False,
                    names: tuple[str, str] = ("attn_mask", "key_padding_mask")):
    """torch's (attn_mask, key_padding_mask, is_causal) -> npformer's (mask, bias).

    attn_mask: (Tq, Tk), or (B*H, Tq, Tk) (batch-major: row b*H + h), or (H, Tq, Tk) when unbatched.
    key_padding_mask: (B, Tk) batched, (Tk,) unbatched.
    Returns mask (bool, True = may attend) and bias (float in ``dtype``), each broadcastable
    to (B, H, Tq, Tk) or None. ``batch`` is 1 for unbatched inputs.
    """
    attn_name, kpm_name = names
    bools: list[np.ndarray] = []
    floats: list[np.ndarray] = []
    if attn_mask is not None:
        m = _as_torch_mask(attn_mask, attn_name)
        lead = f"{batch * n_heads}" if batched else f"{n_heads}"
        if m.ndim == 2 and m.shape == (t_q, t_k):
            pass                                                   # (Tq, Tk), broadcasts over B, H
        elif m.ndim == 3 and m.shape == (batch * n_heads, t_q, t_k):
            m = m.reshape(batch, n_heads, t_q, t_k)                # (B, H, Tq, Tk)
        else:
            raise ValueError(f"{attn_name} must have shape ({t_q}, {t_k}) or ({lead}, {t_q}, {t_k})"
                             f"{' (batch * heads first)' if batched else ' (heads first)'}, got {m.shape}")
        (bools if m.dtype == np.bool_ else floats).append(m)
    if key_padding_mask is not None:
        m = _as_torch_mask(key_padding_mask, kpm_name)
        want = (batch, t_k) if batched else (t_k,)
        if m.shape != want:
            raise ValueError(f"{kpm_name} must have shape {want} ("
                             f"{'batch, key positions' if batched else 'key positions'}), got {m.shape}")
        m = m.reshape(batch, 1, 1, t_k)                            # (B, 1, 1, Tk)
        (bools if m.dtype == np.bool_ else floats).append(m)

    mask = None
    for m in bools:
        mask = ~m if mask is None else (mask & ~m)                 # torch: True = NOT allowed
    if is_causal:
        cm = causal_mask(t_q, t_k)                                 # (Tq, Tk)
        mask = cm if mask is None else (mask & cm)
    bias = None
    for m in floats:
        m = m.astype(dtype, copy=False)                            # never upcast a float32 model
        bias = m if bias is None else bias + m
    return mask, bias
