"""The residual sub-layer, written once in nn/sublayer.py: post-LN and pre-LN against torch autograd in
float64 with a random upstream gradient, dropout by central finite differences, and the inference
fast path against the training path."""
from functools import partial

import numpy as np
import pytest

from npformer.nn import Dropout, LayerNorm, Linear, MultiHeadAttention
from npformer.nn.sublayer import SublayerCache, sublayer_backward, sublayer_forward
from oracles import require
from random_params import randomize

RTOL = 1e-9
E, H = 8, 2


def rel_err(a, b) -> float:
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def load_from(np_mod, t_mod):
    np_mod.load_state_dict({k: v.detach().numpy() for k, v in t_mod.state_dict().items()})


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("fn_kind", ["linear", "cross_attention"])
def test_sublayer_matches_torch(norm_first, fn_kind):
    """post-LN: LN(x + F(x)); pre-LN: x + F(LN(x)). F is a Linear, or cross-attention, whose
    second input's gradient (dmemory) must come back as the tuple's second entry."""
    torch = require("torch")
    from torch_cases import perturb

    rng = np.random.default_rng(10 + norm_first)
    torch.manual_seed(10)
    t_norm = perturb(torch.nn.LayerNorm(E).double(), 0)
    norm = LayerNorm(E).astype(np.float64)
    load_from(norm, t_norm)
    x = rng.standard_normal((2, 5, E))
    xt = torch.tensor(x, requires_grad=True)
    if fn_kind == "linear":
        t_fn = perturb(torch.nn.Linear(E, E).double(), 1)
        np_fn = Linear(E, E).astype(np.float64)
        fn = np_fn.forward
        t_call = t_fn
    else:
        t_fn = perturb(torch.nn.MultiheadAttention(E, H, batch_first=True).double(), 1)
        np_fn = MultiHeadAttention(E, H).astype(np.float64).eval()
        mem = rng.standard_normal((2, 7, E))
        mt = torch.tensor(mem, requires_grad=True)
        fn = partial(np_fn.forward, x_kv=mem)

        def t_call(h):
            return t_fn(h, mt, mt, need_weights=False)[0]
    load_from(np_fn, t_fn)
    drop = Dropout(0.3).eval()                                          # eval: the identity

    out, cache = sublayer_forward(x, fn, norm, drop, norm_first)
    ref = xt + t_call(t_norm(xt)) if norm_first else t_norm(xt + t_call(xt))
    assert rel_err(out, ref.detach()) < RTOL
    dout = rng.standard_normal(out.shape)
    (ref * torch.tensor(dout)).sum().backward()
    dinputs, grads = sublayer_backward(dout, cache, np_fn.backward, norm, drop, norm_first, ("norm", "fn"))

    if fn_kind == "linear":
        dx = dinputs
    else:
        dx, dmem = dinputs
        assert rel_err(dmem, mt.grad) < RTOL
    assert rel_err(dx, xt.grad) < RTOL
    want = {**{f"norm.{k}": p.grad for k, p in t_norm.named_parameters()},
            **{f"fn.{k}": p.grad for k, p in t_fn.named_parameters()}}
    assert set(grads) == set(want)
    for k, g in grads.items():
        assert rel_err(g, want[k]) < RTOL, (k, rel_err(g, want[k]))


@pytest.mark.parametrize("norm_first", [False, True])
def test_sublayer_with_dropout_matches_finite_differences(norm_first):
    """In training the dropout mask comes from rng; the same seed gives the same mask, so the
    sub-layer is a fixed function of x and the parameters."""
    rng = np.random.default_rng(20)
    norm = randomize(LayerNorm(E).astype(np.float64), rng)
    lin = randomize(Linear(E, E, rng=rng).astype(np.float64), rng)
    drop = Dropout(0.5)

    def f(v):
        return sublayer_forward(v, lin.forward, norm, drop, norm_first, rng=np.random.default_rng(7))

    x = rng.standard_normal((2, 3, E))
    dout = rng.standard_normal(x.shape)
    out, cache = f(x)
    assert cache.drop is not None
    dx, grads = sublayer_backward(dout, cache, lin.backward, norm, drop, norm_first, ("norm", "fn"))
    h = 1e-6
    for i in [(0, 0, 0), (1, 2, 5), (0, 1, 7)]:
        xp, xm = x.copy(), x.copy()
        xp[i] += h
        xm[i] -= h
        num = ((f(xp)[0] - f(xm)[0]) * dout).sum() / (2 * h)
        assert abs(num - dx[i]) < 1e-7, (i, num, dx[i])
    for key, p in (("norm.weight", norm.params["weight"]), ("fn.weight", lin.params["weight"])):
        idx = (3,) if p.ndim == 1 else (2, 4)
        old = p[idx]
        p[idx] = old + h
        up = (f(x)[0] * dout).sum()
        p[idx] = old - h
        down = (f(x)[0] * dout).sum()
        p[idx] = old
        assert abs((up - down) / (2 * h) - grads[key][idx]) < 1e-7, key


@pytest.mark.parametrize("norm_first", [False, True])
def test_fast_path_equals_the_training_path_and_leaves_its_input_alone(norm_first):
    rng = np.random.default_rng(30)
    norm = randomize(LayerNorm(E).astype(np.float64), rng)
    lin = randomize(Linear(E, E, rng=rng).astype(np.float64), rng)
    drop = Dropout(0.1).eval()
    x = rng.standard_normal((3, 4, E)) * 3 + 1
    x_before = x.copy()
    slow, _ = sublayer_forward(x, lin.forward, norm, drop, norm_first)
    fast, cache = sublayer_forward(x, lin.forward, norm, drop, norm_first, fast=True)
    assert np.array_equal(x, x_before), "fast=True wrote into its input"
    assert fast is not x and not np.shares_memory(fast, x)
    assert isinstance(cache, SublayerCache) and cache.norm is None and cache.drop is None
    assert fast.dtype == slow.dtype == np.float64
    np.testing.assert_allclose(fast, slow, rtol=0, atol=1e-12)
    # the packed-inference F's give no cache; the block still works, and x is still untouched
    fast2, _ = sublayer_forward(x, lambda h: (lin.forward(h)[0], None), norm, drop, norm_first, fast=True)
    assert np.array_equal(fast2, fast) and np.array_equal(x, x_before)
