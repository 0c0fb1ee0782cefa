"""Softmax, linear, layer norm, embedding, ReLU, dropout, cross-entropy: forward and backward
against torch autograd in float64 with a random upstream gradient, against central finite
differences, and float32 against float64."""
import numpy as np
import pytest

from oracles import require

torch = require("torch")
import torch.nn.functional as F  # noqa: E402
from _opcheck import TOL_F32, TOL_FD, TOL_TORCH, assert_rel, numeric_grad, to_torch  # noqa: E402

from npformer.ops import (  # noqa: E402
    cross_entropy_backward,
    cross_entropy_forward,
    dropout_backward,
    dropout_forward,
    embedding_backward,
    embedding_forward,
    layernorm_backward,
    layernorm_forward,
    linear_backward,
    linear_forward,
    log_softmax,
    relu_backward,
    relu_forward,
    softmax_backward,
    softmax_forward,
)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


# ---------------------------------------------------------------- softmax

def test_softmax_vs_torch_fd_float32(rng):
    x = rng.normal(size=(3, 5, 7)) * 3                                 # (B, T, N)
    dout = rng.normal(size=x.shape)
    y, cache = softmax_forward(x.copy())
    dx = softmax_backward(dout, cache)
    (xt,) = to_torch(x)
    yt = torch.softmax(xt, -1)
    (yt * torch.from_numpy(dout)).sum().backward()
    assert_rel(y, yt.detach().numpy(), TOL_TORCH, "softmax forward")
    assert_rel(dx, xt.grad.numpy(), TOL_TORCH, "softmax backward")
    assert_rel(dx, numeric_grad(lambda a: softmax_forward(a)[0], x.copy(), dout), TOL_FD, "softmax fd")
    y32, _ = softmax_forward(x.astype(np.float32))
    assert y32.dtype == np.float32
    assert_rel(y32, softmax_forward(x.astype(np.float32).astype(np.float64))[0], TOL_F32, "softmax float32")


def test_softmax_in_place_and_all_masked_row(rng):
    x = rng.normal(size=(4, 6))
    x[1] = -np.inf                                                     # every entry masked
    x[2, :3] = -np.inf
    y, _ = softmax_forward(x.copy())
    assert np.all(y[1] == 0) and not np.isnan(y).any()
    assert np.all(y[2, :3] == 0)
    np.testing.assert_allclose(y[[0, 2, 3]].sum(-1), 1.0, rtol=0, atol=1e-15)
    buf = x.copy()
    y2, _ = softmax_forward(buf, out=buf)
    assert y2 is buf and np.array_equal(y2, y)


def test_softmax_backward_in_place(rng):
    y, cache = softmax_forward(rng.normal(size=(3, 5, 7)))
    dy = rng.normal(size=y.shape)
    want = softmax_backward(dy, cache)
    buf = dy.copy()
    got = softmax_backward(buf, cache, out=buf)
    assert got is buf and np.array_equal(got, want)


def test_log_softmax_vs_torch(rng):
    x = rng.normal(size=(5, 9)) * 10
    assert_rel(log_softmax(x), torch.log_softmax(torch.from_numpy(x), -1).numpy(), TOL_TORCH, "log_softmax")
    assert log_softmax(x.astype(np.float32)).dtype == np.float32


# ---------------------------------------------------------------- linear

@pytest.mark.parametrize("bias", [True, False])
def test_linear_vs_torch_fd_float32(rng, bias):
    x = rng.normal(size=(3, 5, 7))                                     # (B, T, I)
    w = rng.normal(size=(9, 7))                                        # (O, I)
    b = rng.normal(size=(9,)) if bias else None
    dout = rng.normal(size=(3, 5, 9))
    y, cache = linear_forward(x, w, b)
    dx, dw, db = linear_backward(dout, cache)
    xt, wt = to_torch(x, w)
    bt = to_torch(b)[0] if bias else None
    yt = F.linear(xt, wt, bt)
    (yt * torch.from_numpy(dout)).sum().backward()
    assert_rel(y, yt.detach().numpy(), TOL_TORCH, "linear forward")
    assert_rel(dx, xt.grad.numpy(), TOL_TORCH, "linear dx")
    assert_rel(dw, wt.grad.numpy(), TOL_TORCH, "linear dw")
    if bias:
        assert_rel(db, bt.grad.numpy(), TOL_TORCH, "linear db")
        assert_rel(db, numeric_grad(lambda a: linear_forward(x, w, a)[0], b.copy(), dout), TOL_FD, "linear db fd")
    else:
        assert db is None
    assert_rel(dx, numeric_grad(lambda a: linear_forward(a, w, b)[0], x.copy(), dout), TOL_FD, "linear dx fd")
    assert_rel(dw, numeric_grad(lambda a: linear_forward(x, a, b)[0], w.copy(), dout), TOL_FD, "linear dw fd")
    f32 = [a.astype(np.float32) if a is not None else None for a in (x, w, b)]
    y32, _ = linear_forward(*f32)
    assert y32.dtype == np.float32
    assert_rel(y32, linear_forward(*[a.astype(np.float64) if a is not None else None for a in f32])[0],
               TOL_F32, "linear float32")


def test_linear_non_contiguous_input(rng):
    """The products run on (N, I) views; a transposed input is copied to one, with the same result."""
    x = rng.normal(size=(5, 3, 7)).transpose(1, 0, 2)                 # (B, T, I), not contiguous
    w, b, dout = rng.normal(size=(9, 7)), rng.normal(size=(9,)), rng.normal(size=(3, 5, 9))
    y, cache = linear_forward(x, w, b)
    y_c, cache_c = linear_forward(np.ascontiguousarray(x), w, b)
    np.testing.assert_allclose(y, y_c, rtol=1e-12, atol=1e-12)
    for g, g_c in zip(linear_backward(dout, cache), linear_backward(dout, cache_c), strict=True):
        np.testing.assert_allclose(g, g_c, rtol=1e-12, atol=1e-12)
    assert y.shape == (3, 5, 9) and linear_backward(dout, cache)[0].shape == x.shape


def test_linear_one_dimensional_input(rng):
    x, w, b = rng.normal(size=7), rng.normal(size=(3, 7)), rng.normal(size=3)
    dout = rng.normal(size=3)
    y, cache = linear_forward(x, w, b)
    dx, dw, db = linear_backward(dout, cache)
    assert y.shape == (3,) and dx.shape == (7,) and dw.shape == (3, 7) and db.shape == (3,)
    xt, wt, bt = to_torch(x, w, b)
    yt = F.linear(xt, wt, bt)                                          # torch takes a 1-D input too
    (yt * torch.from_numpy(dout)).sum().backward()
    assert_rel(y, yt.detach().numpy(), TOL_TORCH, "linear 1-D forward")
    for g, tg, name in ((dx, xt, "dx"), (dw, wt, "dw"), (db, bt, "db")):
        assert_rel(g, tg.grad.numpy(), TOL_TORCH, f"linear 1-D {name}")
    assert_rel(dw, numeric_grad(lambda a: linear_forward(x, a, b)[0], w.copy(), dout), TOL_FD, "linear 1-D dw fd")


# ---------------------------------------------------------------- layer norm

def test_layernorm_vs_torch_fd_float32(rng):
    x = rng.normal(size=(3, 5, 7)) * 4 + 2                             # (B, T, C)
    w, b = rng.normal(size=7), rng.normal(size=7)
    dout = rng.normal(size=x.shape)
    y, cache = layernorm_forward(x.copy(), w, b, eps=1e-5)
    dx, dw, db = layernorm_backward(dout, cache)
    xt, wt, bt = to_torch(x, w, b)
    yt = F.layer_norm(xt, (7,), wt, bt, eps=1e-5)
    (yt * torch.from_numpy(dout)).sum().backward()
    assert_rel(y, yt.detach().numpy(), TOL_TORCH, "layernorm forward")
    assert_rel(dx, xt.grad.numpy(), TOL_TORCH, "layernorm dx")
    assert_rel(dw, wt.grad.numpy(), TOL_TORCH, "layernorm dweight")
    assert_rel(db, bt.grad.numpy(), TOL_TORCH, "layernorm dbias")
    f = lambda a: layernorm_forward(a.copy(), w, b)[0]                 # noqa: E731
    assert_rel(dx, numeric_grad(f, x.copy(), dout), TOL_FD, "layernorm dx fd")
    assert_rel(dw, numeric_grad(lambda a: layernorm_forward(x.copy(), a, b)[0], w.copy(), dout), TOL_FD, "dw fd")
    assert_rel(db, numeric_grad(lambda a: layernorm_forward(x.copy(), w, a)[0], b.copy(), dout), TOL_FD, "db fd")
    x32, w32, b32 = (a.astype(np.float32) for a in (x, w, b))
    y32, _ = layernorm_forward(x32, w32, b32)
    assert y32.dtype == np.float32
    y64, _ = layernorm_forward(*(a.astype(np.float64) for a in (x32, w32, b32)))
    assert_rel(y32, y64, TOL_F32, "layernorm float32")


def test_layernorm_eps_inside_the_square_root():
    # a constant row has variance 0: the paper/torch give (x - mean) / sqrt(0 + eps) = 0 and the
    # bias; a row with variance v gives exactly (x - mean) / sqrt(v + eps).
    x = np.array([[3.0, 3.0, 3.0, 3.0], [1.0, -1.0, 1.0, -1.0]])
    y, _ = layernorm_forward(x.copy(), np.ones(4), np.zeros(4), eps=0.5)
    np.testing.assert_array_equal(y[0], 0.0)
    np.testing.assert_allclose(y[1], x[1] / np.sqrt(1.0 + 0.5), rtol=1e-15)


# ---------------------------------------------------------------- embedding

def test_embedding_repeated_ids_vs_torch_fd(rng):
    weight = rng.normal(size=(7, 5))                                   # (V, C)
    ids = np.array([[1, 3, 3, 0], [6, 1, 3, 1], [2, 2, 2, 2]])         # (B, T), ids repeat
    dout = rng.normal(size=(3, 4, 5))
    out, cache = embedding_forward(ids, weight)
    dweight = embedding_backward(dout, cache)
    (wt,) = to_torch(weight)
    ot = F.embedding(torch.from_numpy(ids), wt)
    (ot * torch.from_numpy(dout)).sum().backward()
    assert_rel(out, ot.detach().numpy(), TOL_TORCH, "embedding forward")
    assert_rel(dweight, wt.grad.numpy(), TOL_TORCH, "embedding dweight")
    np.testing.assert_allclose(dweight[3], dout[0, 1] + dout[0, 2] + dout[1, 2], rtol=1e-15)
    assert np.all(dweight[[4, 5]] == 0)                                # never looked up
    assert_rel(dweight, numeric_grad(lambda a: embedding_forward(ids, a)[0], weight.copy(), dout), TOL_FD, "fd")
    out32, c32 = embedding_forward(ids, weight.astype(np.float32))
    assert out32.dtype == np.float32 and embedding_backward(dout.astype(np.float32), c32).dtype == np.float32


def test_embedding_backward_adds_into_a_tied_gradient(rng):
    """dweight=: the lookup's rows are added in place into a gradient that already holds another
    use of the table (a tied output projection's), the same as adding the two dense gradients."""
    weight, x = rng.normal(size=(7, 5)), rng.normal(size=(3, 5))      # (V, C), (N, C)
    ids = np.array([[1, 3, 3], [6, 1, 3]])                             # (B, T)
    dout, dlogits = rng.normal(size=(2, 3, 5)), rng.normal(size=(3, 7))
    _, cache = embedding_forward(ids, weight)
    dproj = dlogits.T @ x                                              # (V, C) the projection's part
    into = dproj.copy()
    got = embedding_backward(dout, cache, dweight=into)
    assert got is into                                                 # in place, no second table
    wt, xt = to_torch(weight, x)
    ((F.embedding(torch.from_numpy(ids), wt) * torch.from_numpy(dout)).sum()
     + ((xt @ wt.T) * torch.from_numpy(dlogits)).sum()).backward()     # a tied table used twice
    assert_rel(got, wt.grad.numpy(), TOL_TORCH, "tied dweight")
    assert_rel(got, dproj + embedding_backward(dout, cache), 1e-15, "in place vs dense sum")
    with pytest.raises(ValueError, match="dweight must be"):
        embedding_backward(dout, cache, dweight=np.zeros((7, 4)))


# ---------------------------------------------------------------- relu

def test_relu_vs_torch_fd_float32(rng):
    x = rng.normal(size=(3, 5, 7))
    x[np.abs(x) < 1e-3] = 0.5                                          # keep finite differences off the kink
    dout = rng.normal(size=x.shape)
    y, cache = relu_forward(x)
    dx = relu_backward(dout, cache)
    (xt,) = to_torch(x)
    (torch.relu(xt) * torch.from_numpy(dout)).sum().backward()
    assert_rel(y, torch.relu(torch.from_numpy(x)).numpy(), TOL_TORCH, "relu forward")
    assert_rel(dx, xt.grad.numpy(), TOL_TORCH, "relu backward")
    assert_rel(dx, numeric_grad(lambda a: relu_forward(a)[0], x.copy(), dout), TOL_FD, "relu fd")
    y32, c32 = relu_forward(x.astype(np.float32))
    assert y32.dtype == np.float32 and relu_backward(dout.astype(np.float32), c32).dtype == np.float32
    assert_rel(y32, relu_forward(x.astype(np.float32).astype(np.float64))[0], TOL_F32, "relu float32")


# ---------------------------------------------------------------- dropout

def test_dropout_fixed_rng_vs_torch_fd(rng):
    x = rng.normal(size=(3, 5, 7))
    dout = rng.normal(size=x.shape)
    p = 0.3
    y, mask = dropout_forward(x, p, np.random.default_rng(7))
    # the mask is the one an identically seeded rng draws: keep where u >= p, scaled by 1 / (1 - p)
    keep = np.random.default_rng(7).random(x.shape, dtype=np.float32) >= p
    np.testing.assert_array_equal(mask != 0, keep)
    np.testing.assert_allclose(mask[keep], 1.0 / (1.0 - p), rtol=1e-15)
    y2, _ = dropout_forward(x, p, np.random.default_rng(7))
    np.testing.assert_array_equal(y, y2)                              # same seed, same draw
    dx = dropout_backward(dout, mask)
    (xt,) = to_torch(x)
    (xt * torch.from_numpy(mask) * torch.from_numpy(dout)).sum().backward()
    assert_rel(y, x * keep / (1 - p), TOL_TORCH, "dropout forward")
    assert_rel(dx, xt.grad.numpy(), TOL_TORCH, "dropout backward")
    # finite differences through a fixed mask: the forward re-seeds its rng each call
    fd = numeric_grad(lambda a: dropout_forward(a, p, np.random.default_rng(7))[0], x.copy(), dout)
    assert_rel(dx, fd, TOL_FD, "dropout fd")
    y32, m32 = dropout_forward(x.astype(np.float32), p, np.random.default_rng(7))
    assert y32.dtype == np.float32 and m32.dtype == np.float32
    assert_rel(y32, y, TOL_F32, "dropout float32")


def test_dropout_in_place_equals_fresh(rng):
    x, dy = rng.normal(size=(4, 6)).astype(np.float32), rng.normal(size=(4, 6)).astype(np.float32)
    y, mask = dropout_forward(x, 0.3, np.random.default_rng(3))
    buf = x.copy()
    y2, mask2 = dropout_forward(buf, 0.3, np.random.default_rng(3), out=buf)
    assert y2 is buf and np.array_equal(y2, y) and np.array_equal(mask2, mask)
    assert y.dtype == mask.dtype == np.float32
    buf = dy.copy()
    dx = dropout_backward(buf, mask, out=buf)
    assert dx is buf and np.array_equal(dx, dropout_backward(dy, mask))


def test_dropout_inverted_statistics_and_identity():
    x = np.ones((200, 500))
    y, mask = dropout_forward(x, 0.25, np.random.default_rng(0))
    assert abs((mask == 0).mean() - 0.25) < 0.01                      # 1e5 draws: sd 0.0014
    assert abs(y.mean() - 1.0) < 0.02                                 # expectation unchanged
    for kwargs in ({"training": False}, {}):
        p = 0.5 if kwargs else 0.0
        y, c = dropout_forward(x, p, None, **kwargs)
        assert y is x and dropout_backward(x, c) is x
    with pytest.raises(ValueError, match="rng"):
        dropout_forward(x, 0.1, None)
    with pytest.raises(ValueError, match="p must be"):
        dropout_forward(x, 1.0, np.random.default_rng(0))


def test_dropout_add_checks_and_identity():
    from npformer.ops import dropout_add_forward
    y, x = np.full((3, 4), 2.0), np.ones((3, 4))
    out, c = dropout_add_forward(y, x, 0.5, None, training=False)
    assert c is None and np.array_equal(out, y + x)
    with pytest.raises(ValueError, match="rng"):
        dropout_add_forward(y, x, 0.1, None)
    with pytest.raises(ValueError, match="p must be"):
        dropout_add_forward(y, x, 1.0, np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"x's shape \(4,\) must be y's \(3, 4\)"):
        dropout_add_forward(y, x[0], 0.1, np.random.default_rng(0))


# ---------------------------------------------------------------- cross-entropy

@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_vs_torch_fd_float32(rng, smoothing):
    n, c = 7, 5
    logits = rng.normal(size=(n, c)) * 2                               # (N, C)
    targets = rng.integers(0, c, size=n)                               # (N,)
    targets[[1, 4]] = -100                                             # ignored rows
    dloss = float(rng.normal())
    loss, cache = cross_entropy_forward(logits, targets, ignore_index=-100, label_smoothing=smoothing)
    dlogits = cross_entropy_backward(dloss, cache)
    (lt,) = to_torch(logits)
    tl = F.cross_entropy(lt, torch.from_numpy(targets), ignore_index=-100, label_smoothing=smoothing)
    (tl * dloss).backward()
    assert loss.shape == () and loss.dtype == np.float64
    assert_rel(loss, tl.detach().numpy(), TOL_TORCH, "cross-entropy loss")
    assert_rel(dlogits, lt.grad.numpy(), TOL_TORCH, "cross-entropy dlogits")
    assert np.all(dlogits[[1, 4]] == 0)
    f = lambda a: cross_entropy_forward(a, targets, -100, smoothing)[0]  # noqa: E731
    assert_rel(dlogits, numeric_grad(f, logits.copy(), np.array(dloss)), TOL_FD, "cross-entropy fd")
    l32, c32 = cross_entropy_forward(logits.astype(np.float32), targets, -100, smoothing)
    assert l32.dtype == np.float32 and cross_entropy_backward(dloss, c32).dtype == np.float32
    l64, _ = cross_entropy_forward(logits.astype(np.float32).astype(np.float64), targets, -100, smoothing)
    assert_rel(l32, l64, TOL_F32, "cross-entropy float32")


def test_cross_entropy_other_ignore_index_and_all_ignored(rng):
    logits = rng.normal(size=(4, 3))
    targets = np.array([0, 2, 0, 1])
    loss, _ = cross_entropy_forward(logits, targets, ignore_index=0)
    tl = F.cross_entropy(torch.from_numpy(logits), torch.from_numpy(targets), ignore_index=0)
    assert_rel(loss, tl.numpy(), TOL_TORCH, "ignore_index=0")
    loss, cache = cross_entropy_forward(logits, np.full(4, -100), ignore_index=-100)
    assert np.isnan(loss)                                              # 0 / 0, as torch
    assert np.all(cross_entropy_backward(1.0, cache) == 0)


def test_cross_entropy_rejects_targets_out_of_range(rng):
    logits = rng.normal(size=(3, 4))
    for bad in ([0, 4, 1], [0, -1, 1]):
        with pytest.raises(ValueError, match="targets"):
            cross_entropy_forward(logits, np.array(bad))
