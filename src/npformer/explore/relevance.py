"""Explanations beyond raw attention: attention rollout and gradient-weighted relevance.

Rollout (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers"): the residual
connection is counted as half of each layer's mixing,

    A~_l = 0.5 * mean_h(A_l) + 0.5 * I,  rows normalised;   rollout_l = A~_l @ rollout_(l-1),  rollout_0 = I

Relevance (Chefer, Gur & Wolf 2021, "Generic Attention-model Explainability for Interpreting Bi-Modal
and Encoder-Decoder Transformers"): for one scalar output y (a logit, a norm),

    A-bar_l = mean_h( (dy/dA_l * A_l)^+ )                      gradient times map, positive part (eq. 5)
    self-attention:   R^xx += A-bar @ R^xx   (R^xx = I at the start)                       (eq. 6)
    encoder-decoder:  decoder self  R^tt += A-bar @ R^tt,  R^ts += A-bar @ R^ts             (eq. 6, 7)
                      cross (t reads s)  R^ts += norm(R^tt)^T @ A-bar @ norm(R^ss)          (eq. 10)
                      norm(R) = row-normalised (R - I) + I                                  (eq. 8, 9)

dy/dA_l comes from npformer's own backward: ``attention_grads`` runs the model's backward once from
a one-hot (or a chosen direction) on the output with ``MultiHeadAttention.report_weights_grad`` on,
and every attention op then returns its d y / d weights in the grads dict under
``<module>.attention_weights``. Dimension legend: L layers, H heads, T tokens (S source, T target).
"""
from __future__ import annotations

import contextlib

import numpy as np

from ..nn import MultiHeadAttention


def rollout(weights: np.ndarray) -> np.ndarray:
    """weights (L, H, T, T) of a self-attention stack -> (L, T, T): the rollout after each layer."""
    w = np.asarray(weights, dtype=np.float64)
    n_layers, _, t, t2 = w.shape
    if t != t2:
        raise ValueError(f"rollout needs square self-attention weights, got (Tq, Tk) = ({t}, {t2})")
    eye = np.eye(t)                                                   # (T, T)
    r = eye
    out = np.empty((n_layers, t, t))                                  # (L, T, T)
    for layer in range(n_layers):
        a = 0.5 * w[layer].mean(axis=0) + 0.5 * eye                   # (T, T) the residual counted
        a /= a.sum(axis=-1, keepdims=True)
        r = a @ r                                                     # (T, T)
        out[layer] = r
    return out


def gradient_weighted(weights: np.ndarray, grads: np.ndarray) -> np.ndarray:
    """A-bar: weights and grads (H, Tq, Tk) of one layer -> mean_h((grad * A)^+) (Tq, Tk)."""
    return np.maximum(np.asarray(grads, dtype=np.float64) * weights, 0.0).mean(axis=0)


def self_relevance(weights: np.ndarray, grads: np.ndarray) -> np.ndarray:
    """One self-attention stack: weights, grads (L, H, T, T) -> R (T, T) after the last layer."""
    t = weights.shape[-1]
    r = np.eye(t)                                                     # (T, T)
    for layer in range(len(weights)):
        r = r + gradient_weighted(weights[layer], grads[layer]) @ r
    return r


def _normalised(r: np.ndarray) -> np.ndarray:
    """Chefer et al. eq. 8-9: the part added to the identity, rows scaled to sum 1, plus the identity."""
    eye = np.eye(r.shape[-1])
    hat = r - eye
    sums = hat.sum(axis=-1, keepdims=True)
    hat = np.divide(hat, sums, out=np.zeros_like(hat), where=sums > 0)
    return hat + eye


def encoder_decoder_relevance(enc_w, enc_g, dec_w, dec_g, cross_w, cross_g) -> dict[str, np.ndarray]:
    """The encoder's self-attention (L_e, H, S, S), then per decoder layer its self-attention (H, T, T) and
    its cross-attention (H, T, S), each with d y / d weights of the same shape.
    Returns {"encoder self": R^ss (S, S), "decoder self": R^tt (T, T), "decoder cross": R^ts (T, S)}."""
    s, t = enc_w.shape[-1] if len(enc_w) else cross_w.shape[-1], dec_w.shape[-1]
    r_ss = self_relevance(enc_w, enc_g) if len(enc_w) else np.eye(s)  # (S, S)
    r_tt = np.eye(t)                                                  # (T, T)
    r_ts = np.zeros((t, s))                                           # (T, S): nothing read from the source yet
    for layer in range(len(dec_w)):
        a = gradient_weighted(dec_w[layer], dec_g[layer])             # (T, T)
        r_tt = r_tt + a @ r_tt
        r_ts = r_ts + a @ r_ts
        a = gradient_weighted(cross_w[layer], cross_g[layer])         # (T, S)
        r_ts = r_ts + _normalised(r_tt).T @ a @ _normalised(r_ss)
    return {"encoder self": r_ss, "decoder self": r_tt, "decoder cross": r_ts}


@contextlib.contextmanager
def reporting_weights_grad(model):
    """Within the block, every MultiHeadAttention of ``model`` returns d loss / d weights in its grads."""
    mods = [m for _, m in model.modules() if isinstance(m, MultiHeadAttention)]
    for m in mods:
        m.report_weights_grad = True
    try:
        yield
    finally:
        for m in mods:
            del m.report_weights_grad                                 # back to the class default, False


def attention_grads(model, backward, dout, cache, index: int = 0) -> dict[str, np.ndarray]:
    """Run ``backward(dout, cache)`` (the model's own, or a stack's) with the weight gradients reported;
    returns {module name: d y / d weights (H, Tq, Tk) of batch item ``index``}, e.g.
    ``"encoder.layers.0.self_attn"``. ``model`` is the module tree holding the attention modules."""
    with reporting_weights_grad(model):
        _, grads = backward(dout, cache)
    suffix = ".attention_weights"
    return {k[:-len(suffix)]: g[index] for k, g in grads.items() if k.endswith(suffix)}


def stacked(grads: dict[str, np.ndarray], prefix: str, n_layers: int, attn: str = "self_attn") -> np.ndarray:
    """d y / d weights of ``prefix.layers.{0..n-1}.{attn}`` stacked: (L, H, Tq, Tk)."""
    dot = f"{prefix}." if prefix else ""
    return np.stack([grads[f"{dot}layers.{i}.{attn}"] for i in range(n_layers)])
