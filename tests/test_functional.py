"""npformer.attention: its results, and bad input rejected before any computation with an
error that names the argument and the shapes."""
import numpy as np
import pytest

import npformer
import npformer.functional as functional

rng = np.random.default_rng(0)
Q = rng.normal(size=(2, 3, 5, 4))                                     # (B, H, Tq, D)
K = rng.normal(size=(2, 3, 6, 4))                                     # (B, H, Tk, D)
V = rng.normal(size=(2, 3, 6, 7))                                     # (B, H, Tk, Dv)


@pytest.fixture
def no_compute(monkeypatch):
    """Fail the test if the attention op runs: errors must come before any computation."""
    def boom(*a, **kw):
        raise AssertionError("attention_forward ran before the input was rejected")
    monkeypatch.setattr(functional, "attention_forward", boom)


def test_shapes_dtypes_and_agreement_with_the_op():
    out, w = npformer.attention(Q, K, V)
    assert out.shape == (2, 3, 5, 7) and w.shape == (2, 3, 5, 6)
    out32, w32 = npformer.attention(*(a.astype(np.float32) for a in (Q, K, V)), causal=True)
    assert out32.dtype == w32.dtype == np.float32
    out2d, _ = npformer.attention(Q[0, 0], K[0, 0], V[0, 0])           # no leading dims at all
    # normwise: a product of another shape may round differently, and an entry near 0 has no
    # relative accuracy to speak of
    tol = 1e-14 * np.abs(out).max()
    np.testing.assert_allclose(out2d, out[0, 0], rtol=0, atol=tol)
    mask = np.ones((5, 6), bool)
    mask[2] = False
    out_m, w_m = npformer.attention(Q, K, V, mask=mask)
    assert np.all(out_m[:, :, 2] == 0) and np.all(w_m[:, :, 2] == 0)
    out_l, _ = npformer.attention(Q[0, 0].tolist(), K[0, 0].tolist(), V[0, 0].tolist())  # lists of floats
    np.testing.assert_allclose(out_l, out[0, 0], rtol=0, atol=tol)


def test_no_keys_gives_zeros():
    out, w = npformer.attention(Q, K[..., :0, :], V[..., :0, :])
    assert out.shape == (2, 3, 5, 7) and w.shape == (2, 3, 5, 0) and np.all(out == 0)


BAD = [
    # (description, kwargs, error type, words the message must contain)
    ("q rank 1", dict(q=Q[0, 0, 0]), ValueError, ["q", "(4,)"]),
    ("k rank 1", dict(k=K[0, 0, 0]), ValueError, ["k", "(4,)"]),
    ("v rank 0", dict(v=np.float64(1.0)), ValueError, ["v", "()"]),
    ("q/k head size", dict(k=K[..., :3]), ValueError, ["q", "k", "(2, 3, 5, 4)", "(2, 3, 6, 3)"]),
    ("k/v positions", dict(v=V[..., :5, :]), ValueError, ["k", "v", "(2, 3, 6, 4)", "(2, 3, 5, 7)"]),
    ("leading dims", dict(k=K[:, :2], v=V[:, :2]), ValueError, ["q", "(2, 3, 5, 4)", "(2, 2, 6, 4)"]),
    ("empty head size", dict(q=Q[..., :0], k=K[..., :0]), ValueError, ["q", "k", "(2, 3, 5, 0)"]),
    ("mask shape", dict(mask=np.ones((5, 7), bool)), ValueError, ["mask", "(5, 7)", "(2, 3, 5, 6)"]),
    ("mask too big", dict(mask=np.ones((4, 2, 3, 5, 6), bool)), ValueError, ["mask", "(4, 2, 3, 5, 6)"]),
    ("mask int", dict(mask=np.ones((5, 6), int)), TypeError, ["mask", "int64", "(5, 6)"]),
    ("mask float", dict(mask=np.zeros((5, 6))), TypeError, ["mask", "float64", "bias"]),
    ("mask object", dict(mask="yes"), TypeError, ["mask", "str"]),
    ("q int", dict(q=np.ones((5, 4), int)), TypeError, ["q", "int64", "(5, 4)"]),
    ("k bool", dict(k=np.ones((2, 3, 6, 4), bool)), TypeError, ["k", "bool"]),
    ("v complex", dict(v=V + 1j), TypeError, ["v", "complex128", "(2, 3, 6, 7)"]),
    ("q float16", dict(q=Q.astype(np.float16)), TypeError, ["q", "float16"]),
    ("mixed dtypes", dict(v=V.astype(np.float32)), TypeError, ["float32", "float64", "(2, 3, 6, 7)"]),
    ("q nan", dict(q=np.where(Q > 1.5, np.nan, Q)), ValueError, ["q", "NaN", "(2, 3, 5, 4)"]),
    ("k inf", dict(k=np.where(K > 1.5, np.inf, K)), ValueError, ["k", "inf", "(2, 3, 6, 4)"]),
    ("v -inf", dict(v=np.where(V > 1.5, -np.inf, V)), ValueError, ["v", "(2, 3, 6, 7)"]),
    ("not an array", dict(q="abc"), TypeError, ["q", "str"]),
    ("causal not bool", dict(causal="yes"), TypeError, ["causal", "'yes'"]),
]


@pytest.mark.parametrize("desc, kwargs, err, words", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_rejected_before_computing(no_compute, desc, kwargs, err, words):
    args = dict(q=Q, k=K, v=V)
    args.update(kwargs)
    with pytest.raises(err) as info:
        npformer.attention(**args)
    msg = str(info.value)
    for w in words:
        assert w in msg, f"{desc}: {w!r} missing from {msg!r}"


def test_import_does_not_pull_in_torch():
    import subprocess
    import sys
    code = "import npformer, sys; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
