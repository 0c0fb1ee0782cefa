"""GELU's tanh approximation (GPT-2's "gelu_new"): float64 against torch autograd
(``gelu(x, approximate="tanh")``) and finite differences, float32 against float64, and the
activation choice "gelu_tanh" reaching the feed-forward network."""
import numpy as np
import pytest

from oracles import require

torch = require("torch")

from _opcheck import TOL_FD, TOL_TORCH, assert_rel, numeric_grad, to_torch  # noqa: E402

from npformer.nn import FeedForward  # noqa: E402
from npformer.ops import gelu_forward, gelu_tanh_backward, gelu_tanh_forward  # noqa: E402


def test_gelu_tanh_float64_vs_torch_and_fd():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(3, 5, 7)) * 2                                 # (B, T, F)
    dout = rng.normal(size=x.shape)
    y, cache = gelu_tanh_forward(x)
    dx = gelu_tanh_backward(dout, cache)
    (xt,) = to_torch(x)
    yt = torch.nn.functional.gelu(xt, approximate="tanh")
    (yt * torch.from_numpy(dout)).sum().backward()
    assert y.dtype == dx.dtype == np.float64
    assert_rel(y, yt.detach().numpy(), TOL_TORCH, "gelu_tanh forward")
    assert_rel(dx, xt.grad.numpy(), TOL_TORCH, "gelu_tanh backward")
    assert_rel(dx, numeric_grad(lambda a: gelu_tanh_forward(a)[0], x.copy(), dout), TOL_FD, "gelu_tanh fd")


def test_gelu_tanh_elementwise_vs_torch_over_a_wide_range():
    x = np.linspace(-12.0, 12.0, 24001)
    xt = torch.tensor(x, requires_grad=True)
    torch.nn.functional.gelu(xt, approximate="tanh").sum().backward()
    y, cache = gelu_tanh_forward(x)
    dx = gelu_tanh_backward(np.ones_like(x), cache)
    ref = torch.nn.functional.gelu(torch.tensor(x), approximate="tanh").numpy()
    np.testing.assert_allclose(y, ref, rtol=1e-12, atol=1e-15)
    # dx = 0.5 (1 + t) + ...: for x << 0, 1 + t cancels, leaving a few ulps of 1 as absolute error
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-12, atol=1e-14)


def test_gelu_tanh_differs_from_exact_gelu():
    # the two GELUs differ by up to ~5e-4 (near |x| = 2): far more than either's rounding, so a
    # block wired to the wrong one is caught by the parity tests
    x = np.linspace(-4.0, 4.0, 801)
    gap = np.abs(gelu_tanh_forward(x)[0] - gelu_forward(x)[0]).max()
    assert 1e-4 < gap < 1e-3


def test_gelu_tanh_float32_stays_float32_and_near_float64():
    x = np.random.default_rng(4).normal(size=100_000).astype(np.float32) * 4
    y32, c32 = gelu_tanh_forward(x)
    y64, c64 = gelu_tanh_forward(x.astype(np.float64))
    dout = np.ones_like(x)
    dx32 = gelu_tanh_backward(dout, c32)
    assert y32.dtype == dx32.dtype == np.float32
    assert (np.abs(y32 - y64) / np.maximum(1.0, np.abs(y64))).max() <= 1e-6
    # the x (1 - t^2) term multiplies tanh's float32 rounding by |x|
    dx64 = gelu_tanh_backward(dout.astype(np.float64), c64)
    assert (np.abs(dx32 - dx64) / np.maximum(1.0, np.abs(x))).max() <= 1e-6


def test_gelu_tanh_refuses_integers():
    with pytest.raises(TypeError, match="float32 or float64"):
        gelu_tanh_forward(np.arange(4))


def test_feedforward_gelu_tanh_vs_torch():
    rng = np.random.default_rng(5)
    ffn = FeedForward(8, 16, activation="gelu_tanh", rng=rng, dtype=np.float64)
    x = rng.normal(size=(2, 3, 8))
    y, _ = ffn.forward(x)
    w1, b1, w2, b2 = (torch.tensor(ffn.state_dict()[k]) for k in
                      ("linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias"))
    h = torch.nn.functional.gelu(torch.tensor(x) @ w1.T + b1, approximate="tanh")
    assert_rel(y, (h @ w2.T + b2).numpy(), TOL_TORCH, "ffn gelu_tanh")


def test_configs_accept_gelu_tanh_and_name_the_choices():
    from npformer.models import DecoderLMConfig
    cfg = DecoderLMConfig(vocab_size=5, d_model=8, n_heads=2, d_ff=16, activation="gelu_tanh")
    assert cfg.activation == "gelu_tanh"
    with pytest.raises(ValueError, match="gelu_tanh"):
        DecoderLMConfig(vocab_size=5, d_model=8, n_heads=2, d_ff=16, activation="swish")
