"""Scaled dot-product attention: forward (output and weights) and backward against torch autograd
in float64 with a random upstream gradient, with masks, causal, bias, all-masked rows, dropout
with a fixed rng and broadcast leading dimensions; central finite differences; float32."""
import math

import numpy as np
import pytest

from oracles import require

torch = require("torch")

from _opcheck import TOL_F32, TOL_FD, TOL_TORCH, assert_rel, numeric_grad, to_torch  # noqa: E402

from npformer.ops import attention_backward, attention_forward, causal_mask  # noqa: E402


def torch_attention(q, k, v, mask=None, causal=False, bias=None, drop=None):
    """Reference written with torch ops; masked entries get weight exactly 0, rows with no key 0."""
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if bias is not None:
        s = s + torch.from_numpy(bias)
    allowed = torch.ones(s.shape, dtype=torch.bool)
    if mask is not None:
        allowed = allowed & torch.from_numpy(mask)
    if causal:
        allowed = allowed & torch.ones(s.shape[-2:], dtype=torch.bool).tril()
    # a huge finite fill (not -inf) keeps all-masked rows NaN-free in autograd
    w = torch.softmax(s.masked_fill(~allowed, -1e300), -1) * allowed.any(-1, keepdim=True)
    used = w if drop is None else w * torch.from_numpy(drop)
    return used @ v, w


CASES = {
    "plain": {},
    "mask": {"mask": True},
    "causal": {"causal": True},
    "mask+causal+bias": {"mask": True, "causal": True, "bias": True},
    "dropout": {"mask": True, "dropout": 0.25},
}


def make_inputs(rng, kw, lead_q=(2, 3), lead_kv=(2, 3), tq=5, tk=9, d=7, dv=4):
    q = rng.normal(size=lead_q + (tq, d))                              # (B, H, Tq, D)
    k = rng.normal(size=lead_kv + (tk, d))                             # (B, H, Tk, D)
    v = rng.normal(size=lead_kv + (tk, dv))                            # (B, H, Tk, Dv)
    mask = bias = None
    if kw.get("mask"):
        mask = rng.random((2, 1, tq, tk)) < 0.6                        # (B, 1, Tq, Tk), broadcast over heads
        mask[0, 0, 1] = False                                          # a query with every key masked
        mask[1, 0, :, 0] = True
    if kw.get("bias"):
        bias = rng.normal(size=(tq, tk))                               # (Tq, Tk) additive
    return q, k, v, mask, bias


@pytest.mark.parametrize("name", list(CASES))
def test_attention_vs_torch_and_fd(name):
    kw = CASES[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    q, k, v, mask, bias = make_inputs(rng, kw)
    p = kw.get("dropout", 0.0)
    call = dict(mask=mask, causal=kw.get("causal", False), bias=bias, dropout_p=p)

    def fwd(q_, k_, v_):
        return attention_forward(q_, k_, v_, rng=np.random.default_rng(5) if p else None, **call)

    out, w, cache = fwd(q, k, v)
    dout = rng.normal(size=out.shape)
    dq, dk, dv = attention_backward(dout, cache)
    drop = cache[4]
    if p:
        keep = np.random.default_rng(5).random(w.shape, dtype=np.float32) >= np.float32(p)  # its draws, in order
        np.testing.assert_array_equal(drop != 0, keep)
    qt, kt, vt = to_torch(q, k, v)
    ot, wt = torch_attention(qt, kt, vt, mask, call["causal"], bias, drop)
    (ot * torch.from_numpy(dout)).sum().backward()
    assert_rel(out, ot.detach().numpy(), TOL_TORCH, f"{name} out")
    assert_rel(w, wt.detach().numpy(), TOL_TORCH, f"{name} weights")
    for g, tg, n in ((dq, qt, "dq"), (dk, kt, "dk"), (dv, vt, "dv")):
        assert g.shape == tg.shape
        assert_rel(g, tg.grad.numpy(), TOL_TORCH, f"{name} {n}")
    if mask is not None:
        assert np.all(out[0, :, 1] == 0) and np.all(w[0, :, 1] == 0)   # all-masked row: zeros, not NaN
        assert np.all(dq[0, :, 1] == 0)
    assert_rel(dq, numeric_grad(lambda a: fwd(a, k, v)[0], q.copy(), dout), TOL_FD, f"{name} dq fd")
    assert_rel(dk, numeric_grad(lambda a: fwd(q, a, v)[0], k.copy(), dout), TOL_FD, f"{name} dk fd")
    assert_rel(dv, numeric_grad(lambda a: fwd(q, k, a)[0], v.copy(), dout), TOL_FD, f"{name} dv fd")
    # float32 forward against float64 on the same (rounded) inputs
    q32, k32, v32 = (a.astype(np.float32) for a in (q, k, v))
    b32 = None if bias is None else bias.astype(np.float32)
    kw32 = dict(call, bias=b32)
    o32, w32, _ = attention_forward(q32, k32, v32, rng=np.random.default_rng(5) if p else None, **kw32)
    kw64 = dict(call, bias=None if b32 is None else b32.astype(np.float64))
    o64, w64, _ = attention_forward(*(a.astype(np.float64) for a in (q32, k32, v32)),
                                    rng=np.random.default_rng(5) if p else None, **kw64)
    assert o32.dtype == np.float32 and w32.dtype == np.float32
    assert_rel(o32, o64, TOL_F32, f"{name} float32 out")
    assert_rel(w32, w64, TOL_F32, f"{name} float32 weights")


def test_attention_broadcast_leading_dims_grads_sum_back():
    rng = np.random.default_rng(3)
    q, k, v, _, _ = make_inputs(rng, {}, lead_q=(2, 1), lead_kv=(3,))   # q (2,1,5,7), k/v (3,9,.)
    out, w, cache = attention_forward(q, k, v)
    assert out.shape == (2, 3, 5, 4) and w.shape == (2, 3, 5, 9)
    dout = rng.normal(size=out.shape)
    dq, dk, dv = attention_backward(dout, cache)
    qt, kt, vt = to_torch(q, k, v)
    ot, _ = torch_attention(qt, kt, vt)
    (ot * torch.from_numpy(dout)).sum().backward()
    for g, tg in ((dq, qt), (dk, kt), (dv, vt)):
        assert g.shape == tuple(tg.shape)
        assert_rel(g, tg.grad.numpy(), TOL_TORCH, "broadcast grads")


def test_attention_matches_torch_sdpa_convention():
    """True = may attend and top-left causal, as torch.nn.functional.scaled_dot_product_attention."""
    rng = np.random.default_rng(11)
    q, k, v, mask, _ = make_inputs(rng, {"mask": True}, tq=6, tk=6)
    mask[0, 0, 1, 0] = True                                            # torch returns NaN for empty rows
    import torch.nn.functional as F
    for causal in (False, True):
        m = mask & causal_mask(6, 6) if causal else mask
        m[..., 0] = True                                               # keep a key in every row
        ours, _, _ = attention_forward(q, k, v, mask=m)
        ref = F.scaled_dot_product_attention(*(torch.from_numpy(a) for a in (q, k, v)),
                                             attn_mask=torch.from_numpy(np.broadcast_to(m, (2, 3, 6, 6)).copy()))
        assert_rel(ours, ref.numpy(), TOL_TORCH, "sdpa mask")
    ours, _, _ = attention_forward(q, k, v, causal=True)
    ref = F.scaled_dot_product_attention(*(torch.from_numpy(a) for a in (q, k, v)), is_causal=True)
    assert_rel(ours, ref.numpy(), TOL_TORCH, "sdpa is_causal")


def test_causal_mask_layout():
    np.testing.assert_array_equal(causal_mask(4, 4), np.tril(np.ones((4, 4), bool)))
    np.testing.assert_array_equal(causal_mask(2, 5, offset=3), np.tril(np.ones((2, 5), bool), k=3))
    assert causal_mask(3, 3).dtype == np.bool_


def test_attention_dropout_needs_rng():
    q = np.zeros((2, 3))
    with pytest.raises(ValueError, match="rng"):
        attention_forward(q, q, q, dropout_p=0.1)


def test_backward_from_given_weight_gradients_equals_its_own_and_leaves_them_alone():
    """attention_backward(..., dweights=attention_weights_grad(...)), as the explorer's relevance
    backward calls it, gives the same gradients and does not write into dweights."""
    from npformer.ops import attention_weights_grad

    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((2, 3, 5, 4)) for _ in range(3))
    mask = rng.random((2, 1, 5, 5)) > 0.3
    mask[..., 0] = True
    _, _, cache = attention_forward(q, k, v, mask=mask, dropout_p=0.2, rng=np.random.default_rng(4))
    dout = rng.standard_normal((2, 3, 5, 4))
    dweights = attention_weights_grad(dout, cache)
    before = dweights.copy()
    given = attention_backward(dout, cache, dweights=dweights)
    np.testing.assert_array_equal(dweights, before)
    for a, b in zip(given, attention_backward(dout, cache), strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-14)


def test_out_arrays_take_the_results_as_strided_views():
    """attention_forward(out=) and attention_backward(out=) write into given arrays, here the heads of
    packed (B, T, E) and (B, T, 3E) arrays as the module passes them, with the values of the calls that
    allocate their own (mask, causal and dropout with one seed on both sides)."""
    from npformer.nn import split_heads

    rng = np.random.default_rng(5)
    b, t, h, d = 2, 6, 3, 4
    e = h * d
    q, k, v = (rng.standard_normal((b, h, t, d)) for _ in range(3))
    mask = rng.random((b, 1, t, t)) > 0.3
    kw = dict(mask=mask, causal=True, dropout_p=0.2)
    want, w_want, cache = attention_forward(q, k, v, rng=np.random.default_rng(9), **kw)
    merged = np.full((b, t, e), np.nan)
    got, w_got, cache_out = attention_forward(q, k, v, rng=np.random.default_rng(9), out=split_heads(merged, h), **kw)
    assert np.shares_memory(got, merged) and not np.isnan(merged).any()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-14)
    np.testing.assert_array_equal(w_got, w_want)
    dout = rng.standard_normal(want.shape)
    packed = np.full((b, t, 3 * e), np.nan)
    outs = tuple(split_heads(packed[..., i * e:(i + 1) * e], h) for i in range(3))
    got3 = attention_backward(dout, cache_out, out=outs)
    assert all(g is o for g, o in zip(got3, outs, strict=True)) and not np.isnan(packed).any()
    for g, w in zip(got3, attention_backward(dout, cache), strict=True):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-14)


def test_out_arrays_of_the_wrong_kind_are_refused():
    rng = np.random.default_rng(6)
    q, k, v = (rng.standard_normal((2, 3, 5, 4)) for _ in range(3))
    with pytest.raises(ValueError, match=r"out must be an array of shape \(2, 3, 5, 4\) and dtype float64"):
        attention_forward(q, k, v, out=np.empty((2, 3, 5, 5)))
    with pytest.raises(ValueError, match="dtype float64, got .* float32"):
        attention_forward(q, k, v, out=np.empty((2, 3, 5, 4), np.float32))
    _, _, cache = attention_forward(q, k, v)
    dout = rng.standard_normal((2, 3, 5, 4))
    with pytest.raises(ValueError, match="tuple of three arrays"):
        attention_backward(dout, cache, out=[np.empty_like(q)] * 3)
    with pytest.raises(ValueError, match="out's dk must be an array of shape"):
        attention_backward(dout, cache, out=(np.empty_like(q), np.empty((2, 3, 4, 4)), np.empty_like(v)))
    _, _, shared = attention_forward(q, k[:1], v[:1])                  # keys shared over the batch
    with pytest.raises(ValueError, match="same leading shape"):
        attention_backward(dout, shared, out=(np.empty_like(q), np.empty_like(k[:1]), np.empty_like(v[:1])))
