"""Our erf and exact GELU: float64 against torch autograd and finite differences, float64 erf and
Phi against scipy elementwise, float32 against float64 everywhere (the issue's 1e-6)."""
import numpy as np
import pytest

from oracles import require

torch = require("torch")
special = require("scipy.special")

from _opcheck import TOL_FD, TOL_TORCH, assert_rel, numeric_grad, to_torch  # noqa: E402

from npformer.ops import erf, gelu_backward, gelu_forward  # noqa: E402
from npformer.ops.activations import _BLOCK, _normal_cdf64  # noqa: E402

# float32 inputs on a dense grid, past both clamps, across block boundaries, plus a normal sample
X32 = np.concatenate([np.linspace(-12.0, 12.0, 600_001),
                      np.random.default_rng(0).normal(size=100_000) * 3]).astype(np.float32)


def test_gelu_float64_vs_torch_and_fd():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(3, 5, 7)) * 2                                 # (B, T, F)
    dout = rng.normal(size=x.shape)
    y, cache = gelu_forward(x)
    dx = gelu_backward(dout, cache)
    (xt,) = to_torch(x)
    yt = torch.nn.functional.gelu(xt)                                  # approximate="none": erf form
    (yt * torch.from_numpy(dout)).sum().backward()
    assert y.dtype == dx.dtype == np.float64
    assert_rel(y, yt.detach().numpy(), TOL_TORCH, "gelu forward")
    assert_rel(dx, xt.grad.numpy(), TOL_TORCH, "gelu backward")
    assert_rel(dx, numeric_grad(lambda a: gelu_forward(a)[0], x.copy(), dout), TOL_FD, "gelu fd")


def test_gelu_float64_elementwise_vs_torch_over_a_wide_range():
    # elementwise, not just normwise; below -5 torch's own 1 + erf loses the relative digits
    x = np.linspace(-5.0, 12.0, 20001)
    xt = torch.tensor(x, requires_grad=True)
    yt = torch.nn.functional.gelu(xt)
    yt.sum().backward()
    y, cache = gelu_forward(x)
    dx = gelu_backward(np.ones_like(x), cache)
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-9, atol=1e-300)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-9, atol=1e-15)


def test_erf_float64_vs_scipy_elementwise():
    x = np.concatenate([np.linspace(-7, 7, 100_001), np.geomspace(1e-300, 30, 2000),
                        -np.geomspace(1e-12, 30, 2000)])
    ref = special.erf(x)
    got = erf(x)
    assert got.dtype == np.float64
    rel = np.abs(got - ref) / np.abs(ref)
    assert rel.max() <= 1e-15, f"erf float64 relative error {rel.max():.2e}"


def test_normal_cdf_float64_keeps_relative_accuracy_in_the_tail():
    x = np.linspace(-37.0, 8.0, 20001)
    ref = special.ndtr(x)
    rel = np.abs(_normal_cdf64(x) - ref) / ref
    assert rel.max() <= 1e-12, f"Phi relative error {rel.max():.2e}"


def test_erf_float32_within_1e6_of_float64():
    got = erf(X32)
    assert got.dtype == np.float32
    err = np.abs(got.astype(np.float64) - special.erf(X32.astype(np.float64)))
    assert err.max() <= 1e-6, f"erf float32 error {err.max():.2e}"
    tiny = X32[(np.abs(X32) < 1e-3) & (X32 != 0)]                      # relative accuracy near 0 too
    rel = np.abs(erf(tiny) / special.erf(tiny.astype(np.float64)) - 1)
    assert rel.max() <= 1e-6


def test_gelu_float32_within_1e6_of_float64():
    y32, c32 = gelu_forward(X32)
    y64, c64 = gelu_forward(X32.astype(np.float64))
    assert y32.dtype == np.float32
    # absolute for |y| < 1, relative above: y = x for large x, and float32 holds x only to 6e-8 of it
    err = np.abs(y32 - y64) / np.maximum(1.0, np.abs(y64))
    assert err.max() <= 1e-6, f"gelu float32 error {err.max():.2e}"
    dy = np.random.default_rng(1).normal(size=X32.shape)
    d32 = gelu_backward(dy.astype(np.float32), c32)
    d64 = gelu_backward(dy.astype(np.float32).astype(np.float64), c64)
    assert d32.dtype == np.float32
    derr = np.abs(d32 - d64) / np.maximum(1.0, np.abs(d64))
    assert derr.max() <= 1e-6, f"gelu float32 backward error {derr.max():.2e}"


def test_special_values_and_saturation():
    for dt in (np.float32, np.float64):
        x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e30, -1e30, 6.0, -6.0], dtype=dt)
        e = erf(x)
        np.testing.assert_array_equal(e[[0, 2, 3, 5, 6, 7, 8]], [0, 1, -1, 1, -1, 1, -1])
        assert np.signbit(e[1]) and np.isnan(e[4])
        y, _ = gelu_forward(np.array([-1e30, -40.0, 0.0, 40.0, 1e30], dtype=dt))
        np.testing.assert_array_equal(y, [0, 0, 0, 40, 1e30 if dt == np.float64 else np.float32(1e30)])


def test_shapes_blocks_layouts_and_dtypes():
    rng = np.random.default_rng(4)
    for shape in [(0,), (1,), (3, 5), (2, _BLOCK + 7)]:
        x = rng.normal(size=shape).astype(np.float32)
        y, cache = gelu_forward(x)
        assert y.shape == shape and erf(x).shape == shape
        assert gelu_backward(np.ones_like(x), cache).shape == shape
    x = rng.normal(size=(7, 9)).astype(np.float32)
    xt = x.T                                                           # not contiguous
    np.testing.assert_array_equal(erf(xt), erf(np.ascontiguousarray(xt)))
    np.testing.assert_array_equal(gelu_forward(xt)[0], gelu_forward(np.ascontiguousarray(xt))[0])
    _, cache = gelu_forward(xt)
    dy = rng.normal(size=xt.shape).astype(np.float32)
    np.testing.assert_array_equal(gelu_backward(dy.T.copy().T, cache), gelu_backward(np.ascontiguousarray(dy), cache))
    for bad in (np.arange(3), np.ones(3, np.float16)):
        with pytest.raises(TypeError):
            erf(bad)
        with pytest.raises(TypeError):
            gelu_forward(bad)


def test_coefficients_are_reproduced_by_the_fit_script():
    mpmath = require("mpmath")
    from npformer.ops import _erf_fit, activations
    p, q, err = _erf_fit.rational_float32()
    assert err < 3e-8                                                  # the fit's max relative error: 2.46e-8
    # P and Q come out of ~110 re-weighted least-squares solves (np.linalg.lstsq, LAPACK's SVD-based
    # gelsd). Each solve is backward stable, so (Wedin's theorem) its coefficients are fixed only to
    # about u * (kappa + kappa^2 * tan(theta)) relative: kappa, the weighted design matrix's condition
    # number, is 7.6e6 at the last solve (1.3e7 at most), tan(theta) = |residual| / |fit| = 1e-9 makes
    # the kappa^2 term ~6e4, negligible, so ~1e-9 for u = 1.1e-16. Another BLAS kernel rounds the
    # solves differently and does move them that much (1e-9 under SkylakeX, 2e-9 under Sandybridge,
    # against the Haswell run that wrote the table): 1e-12 was never on offer. 1e-7 leaves a factor
    # of ~70 for the constants of the backward error (they grow with the 3,000 rows) and for solves
    # that feed each other's weights.
    np.testing.assert_allclose(p, activations._P, rtol=1e-7)
    np.testing.assert_allclose(q, activations._Q, rtol=1e-7)
    # what matters is the function the stored table gives: as accurate as the fit, measured here
    # against 50-digit erf(x) / x on a grid of our own (denser than the fit's, evenly spaced)
    x = np.linspace(0.0, 4.0, 4001)[1:]
    with mpmath.workdps(50):
        ref = np.array([float(mpmath.erf(mpmath.mpf(v)) / mpmath.mpf(v)) for v in x])
    u = x * x
    stored = np.polynomial.polynomial.polyval(u, activations._P) / np.polynomial.polynomial.polyval(u, activations._Q)
    assert np.abs(stored / ref - 1).max() < 3e-8
    # the float64 tables are Chebyshev interpolants computed in mpmath and rounded once: no BLAS
    np.testing.assert_allclose(_erf_fit.small_polynomial(), activations._S64, rtol=1e-12)
    coef, _ = _erf_fit.tail_chebyshev()
    np.testing.assert_allclose(coef, activations._T64, rtol=1e-9, atol=1e-22)
