"""The tiled O(T)-memory attention (ops/flash_attention.py) against the exact op it mirrors
(ops/attention.py) and against torch autograd, in float64 with a random upstream gradient:
causal and padding masks, rows with no key, bias, Tq != Tk, lengths that are not a multiple of the
blocks, broadcast leading dimensions, T up to 1,024. Dropout: the tiles' keep masks, regenerated,
fed to a torch reference, and central finite differences. float32 stays float32. Memory: numpy's
peak allocation (tracemalloc) grows linearly in T, not quadratically."""
import math
import tracemalloc

import numpy as np
import pytest

from oracles import require

torch = require("torch")

from _opcheck import TOL_F32, TOL_FD, assert_rel, numeric_grad, to_torch  # noqa: E402

from npformer.ops import (  # noqa: E402
    attention_backward,
    attention_forward,
    flash_attention_backward,
    flash_attention_forward,
)
from npformer.ops.flash_attention import _keep_scale  # noqa: E402

TOL_EXACT = 1e-10     # tiled vs exact, float64: the same sums in another order


def torch_reference(q, k, v, mask=None, causal=False, bias=None, drop=None):
    """Attention written with torch ops; masked entries weigh exactly 0, a row with no key gives 0."""
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if bias is not None:
        s = s + torch.from_numpy(bias)
    allowed = torch.ones(s.shape, dtype=torch.bool)
    if mask is not None:
        allowed = allowed & torch.from_numpy(np.ascontiguousarray(mask))
    if causal:
        allowed = allowed & torch.ones(s.shape[-2:], dtype=torch.bool).tril()
    w = torch.softmax(s.masked_fill(~allowed, -1e300), -1) * allowed.any(-1, keepdim=True)
    return (w if drop is None else w * torch.from_numpy(drop)) @ v


def inputs(rng, lead, tq, tk, d=8, dv=5, mask=None, bias=False, lead_kv=None):
    """q, k, v, mask, bias; mask "key" = (B, 1, 1, Tk) key padding as nn.masks builds it,
    "full" = (B, 1, Tq, Tk); either with query row 1 of batch 0 left with no key."""
    lead_kv = lead if lead_kv is None else lead_kv
    q = rng.normal(size=lead + (tq, d))                                # (B, H, Tq, D)
    k = rng.normal(size=lead_kv + (tk, d))                             # (B, H, Tk, D)
    v = rng.normal(size=lead_kv + (tk, dv))                            # (B, H, Tk, Dv)
    m = None
    if mask == "key":
        m = np.ones((lead[0], 1, 1, tk), dtype=bool)                   # (B, 1, 1, Tk)
        m[-1, ..., tk - tk // 3:] = False                              # the last sequence padded
    elif mask == "full":
        m = rng.random((lead[0], 1, tq, tk)) < 0.7                     # (B, 1, Tq, Tk)
        m[0, 0, min(1, tq - 1)] = False                                # a query with no key at all
    b = rng.normal(size=(tq, tk)) if bias else None                    # (Tq, Tk)
    return q, k, v, m, b


# (lead, Tq, Tk, block_q, block_k, mask, causal, bias): tiles that do and do not divide the lengths
CASES = {
    "plain 37x53": ((2, 3), 37, 53, 8, 16, None, False, False),
    "causal 64": ((2, 2), 64, 64, 16, 16, None, True, False),
    "causal ragged 50x70": ((2, 2), 50, 70, 7, 11, None, True, False),
    "key padding + causal": ((2, 3), 45, 45, 16, 8, "key", True, False),
    "full mask, empty row, bias": ((2, 3), 33, 21, 8, 8, "full", False, True),
    "all at once Tq>Tk": ((2, 2), 40, 23, 9, 6, "full", True, True),
    "causal 1024": ((1, 2), 1024, 1024, None, None, None, True, False),
    "key padding 1000x1024": ((2, 1), 1000, 1024, None, None, "key", False, False),
    "causal+pad+bias 700x1024": ((2, 1), 700, 1024, 96, 200, "full", True, True),
}


@pytest.mark.parametrize("name", list(CASES))
def test_tiled_equals_exact_and_torch(name):
    lead, tq, tk, bq, bk, mask_kind, causal, use_bias = CASES[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    q, k, v, mask, bias = inputs(rng, lead, tq, tk, mask=mask_kind, bias=use_bias)
    blocks = {} if bq is None else {"block_q": bq, "block_k": bk}
    out, cache = flash_attention_forward(q, k, v, mask=mask, causal=causal, bias=bias, **blocks)
    ref, _, ref_cache = attention_forward(q, k, v, mask=mask, causal=causal, bias=bias)
    dout = rng.normal(size=out.shape)
    grads = flash_attention_backward(dout, cache)
    ref_grads = attention_backward(dout, ref_cache)
    assert out.dtype == np.float64 and out.shape == ref.shape
    assert_rel(out, ref, TOL_EXACT, f"{name} out vs exact")
    for g, rg, n in zip(grads, ref_grads, ("dq", "dk", "dv"), strict=True):
        assert g.shape == rg.shape
        assert_rel(g, rg, TOL_EXACT, f"{name} {n} vs exact")
    qt, kt, vt = to_torch(q, k, v)
    ot = torch_reference(qt, kt, vt, mask, causal, bias)
    (ot * torch.from_numpy(dout)).sum().backward()
    assert_rel(out, ot.detach().numpy(), TOL_EXACT, f"{name} out vs torch")
    for g, t, n in zip(grads, (qt, kt, vt), ("dq", "dk", "dv"), strict=True):
        assert_rel(g, t.grad.numpy(), TOL_EXACT, f"{name} {n} vs torch")
    if mask_kind == "full":                                            # row 1 of batch 0: no key
        assert np.all(out[0, :, 1] == 0) and np.all(grads[0][0, :, 1] == 0)
        assert np.isinf(cache.lse[0, :, 1]).all()
    assert not any(np.isnan(a).any() for a in (out, *grads))


def test_tiled_matches_torch_sdpa():
    """The convention of torch.nn.functional.scaled_dot_product_attention: True = may attend,
    is_causal top-left, also when Tq != Tk."""
    import torch.nn.functional as F
    rng = np.random.default_rng(4)
    for tq, tk in ((30, 30), (20, 45), (45, 20)):
        q, k, v, _, _ = inputs(rng, (2, 3), tq, tk)
        qt, kt, vt = to_torch(q, k, v)
        ref = F.scaled_dot_product_attention(qt, kt, vt, is_causal=True)
        dout = rng.normal(size=ref.shape)
        (ref * torch.from_numpy(dout)).sum().backward()
        if tq > tk:                                                    # sdpa gives every row a key here
            out, cache = flash_attention_forward(q, k, v, causal=True, block_q=8, block_k=16)
            grads = flash_attention_backward(dout, cache)
            assert_rel(out, ref.detach().numpy(), TOL_EXACT, "sdpa causal Tq > Tk")
            for g, t in zip(grads, (qt, kt, vt), strict=True):
                assert_rel(g, t.grad.numpy(), TOL_EXACT, "sdpa causal grads")
        else:
            out, _ = flash_attention_forward(q, k, v, causal=True, block_q=8, block_k=16)
            assert_rel(out, ref.detach().numpy(), TOL_EXACT, "sdpa causal")


def test_broadcast_leading_dims_grads_sum_back():
    rng = np.random.default_rng(3)
    q, k, v, _, _ = inputs(rng, (2, 1), 13, 17, lead_kv=(3,))         # q (2,1,13,8), k/v (3,17,.)
    out, cache = flash_attention_forward(q, k, v, causal=True, block_q=4, block_k=5)
    assert out.shape == (2, 3, 13, 5)
    dout = rng.normal(size=out.shape)
    grads = flash_attention_backward(dout, cache)
    ref_grads = attention_backward(dout, attention_forward(q, k, v, causal=True)[2])
    for g, rg in zip(grads, ref_grads, strict=True):
        assert g.shape == rg.shape
        assert_rel(g, rg, TOL_EXACT, "broadcast grads")


def full_keep(cache, shape):
    """The whole (..., Tq, Tk) dropout factor the tiles drew, regenerated from the cache's seed."""
    t_q, t_k = shape[-2:]
    z = np.zeros(shape)                                                # (..., Tq, Tk)
    n_k = -(-t_k // cache.block_k)
    for bi, i0 in enumerate(range(0, t_q, cache.block_q)):
        i1 = min(i0 + cache.block_q, t_q)
        for bj, j0 in enumerate(range(0, t_k, cache.block_k)):
            j1 = min(j0 + cache.block_k, t_k)
            z[..., i0:i1, j0:j1] = _keep_scale(cache.seed, bi * n_k + bj, shape[:-2] + (i1 - i0, j1 - j0),
                                               cache.dropout_p, np.dtype(np.float64))
    return z


@pytest.mark.parametrize("causal", [False, True])
def test_dropout_regenerated_mask_matches_torch_and_fd(causal):
    """The forward and the backward see one keep mask: rebuilt from the seed, fed to torch, it gives
    the same output and gradients; finite differences of the tiled forward agree too."""
    rng = np.random.default_rng(21)
    p = 0.3
    q, k, v, mask, bias = inputs(rng, (2, 1), 13, 17, d=3, dv=2, mask="full", bias=True)

    def fwd(q_, k_, v_):
        return flash_attention_forward(q_, k_, v_, mask=mask, causal=causal, bias=bias, dropout_p=p,
                                       rng=np.random.default_rng(7), block_q=5, block_k=6)

    out, cache = fwd(q, k, v)
    dout = rng.normal(size=out.shape)
    grads = flash_attention_backward(dout, cache)
    z = full_keep(cache, out.shape[:-1] + (k.shape[-2],))              # (B, H, Tq, Tk)
    kept = (z[np.broadcast_to(mask, z.shape)] > 0).mean()
    assert 0.5 < kept < 0.9                                            # about 1 - p kept
    assert len({z[0, 0, :5, :6].tobytes(), z[0, 0, 5:10, :6].tobytes(), z[0, 0, :5, 6:12].tobytes()}) == 3
    qt, kt, vt = to_torch(q, k, v)
    ot = torch_reference(qt, kt, vt, mask, causal, bias, drop=z)
    (ot * torch.from_numpy(dout)).sum().backward()
    assert_rel(out, ot.detach().numpy(), TOL_EXACT, "dropout out vs torch")
    for g, t, n in zip(grads, (qt, kt, vt), ("dq", "dk", "dv"), strict=True):
        assert_rel(g, t.grad.numpy(), TOL_EXACT, f"dropout {n} vs torch")
    for i, n in enumerate(("dq", "dk", "dv")):
        def f(a, i=i):
            args = [q, k, v]
            args[i] = a
            return fwd(*args)[0]
        assert_rel(grads[i], numeric_grad(f, (q, k, v)[i].copy(), dout), TOL_FD, f"dropout {n} fd")
    again, _ = fwd(q, k, v)                                            # the same rng: the same mask
    np.testing.assert_array_equal(again, out)
    other, _ = flash_attention_forward(q, k, v, mask=mask, causal=causal, bias=bias, dropout_p=p,
                                       rng=np.random.default_rng(8), block_q=5, block_k=6)
    assert not np.array_equal(other, out)


def test_float32_stays_float32_and_close_to_float64():
    rng = np.random.default_rng(5)
    q, k, v, mask, bias = inputs(rng, (2, 2), 70, 90, mask="full", bias=True)
    q32, k32, v32 = (a.astype(np.float32) for a in (q, k, v))
    b32 = bias.astype(np.float32)
    kw = dict(mask=mask, causal=True, block_q=16, block_k=32)
    out32, c32 = flash_attention_forward(q32, k32, v32, bias=b32, dropout_p=0.1, rng=np.random.default_rng(1), **kw)
    dout = rng.normal(size=out32.shape)
    g32 = flash_attention_backward(dout.astype(np.float32), c32)
    assert out32.dtype == np.float32 and c32.lse.dtype == np.float32
    assert all(g.dtype == np.float32 for g in g32)
    out64, c64 = flash_attention_forward(*(a.astype(np.float64) for a in (q32, k32, v32)),
                                         bias=b32.astype(np.float64), dropout_p=0.1,
                                         rng=np.random.default_rng(1), **kw)
    g64 = flash_attention_backward(dout, c64)
    assert_rel(out32, out64, TOL_F32, "float32 out")
    for a, b in zip(g32, g64, strict=True):
        assert_rel(a, b, 1e-5, "float32 grads")


def test_bad_arguments_are_named():
    q = np.zeros((2, 4, 3))
    with pytest.raises(ValueError, match="rng"):
        flash_attention_forward(q, q, q, dropout_p=0.1)
    with pytest.raises(ValueError, match="mask must be boolean"):
        flash_attention_forward(q, q, q, mask=np.ones((4, 4)))
    with pytest.raises(ValueError, match="mask of shape"):
        flash_attention_forward(q, q, q, mask=np.ones((3, 4, 4), dtype=bool))
    with pytest.raises(ValueError, match="block_q"):
        flash_attention_forward(q, q, q, block_q=0)
    with pytest.raises(ValueError, match="dtype"):
        flash_attention_forward(q, q.astype(np.float32), q)


def _peak_bytes(t: int, exact: bool) -> int:
    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=(1, 2, t, 16)).astype(np.float32) for _ in range(3))   # (B, H, T, D)
    dout = np.ones_like(q)
    tracemalloc.start()
    if exact:
        attention_backward(dout, attention_forward(q, k, v, causal=True)[2])
    else:
        flash_attention_backward(dout, flash_attention_forward(q, k, v, causal=True, block_q=64, block_k=128)[1])
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def test_memory_grows_linearly_in_t():
    """numpy's allocations (tracemalloc sees them): doubling T about doubles the tiled op's peak and
    quadruples the exact op's; the tiled peak at T = 2,048 is far below one (H, T, T) score array.
    Each op runs once first, untraced: a compiled twin's first call loads its kernels (numba's own
    allocations), once per process, which is no part of the op's memory."""
    _peak_bytes(1024, exact=False), _peak_bytes(1024, exact=True)
    tiled = {t: _peak_bytes(t, exact=False) for t in (1024, 2048)}
    exact = {t: _peak_bytes(t, exact=True) for t in (1024, 2048)}
    assert tiled[2048] / tiled[1024] < 2.5
    assert exact[2048] / exact[1024] > 3.5
    assert tiled[2048] < 2 * 2048 * 2048 * 4 / 8                      # < 1/8 of (H, T, T) float32
