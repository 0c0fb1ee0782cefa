"""Each compiled twin (ops/fused/) against its NumPy reference: float64 within 1e-12, float32 within
1e-6 per tensor (||twin - ref|| / ||ref||), exact zeros kept, the same bits on 1 and 2 threads, and
``kernels_used()`` showing that the twin itself ran. Under CI (CI=true) a missing numba fails.
Few shapes and dtypes on purpose: every signature is a compilation (cached on disk after the first run)."""
from __future__ import annotations

import os

import numpy as np
import pytest

from npformer import ops
from npformer.ops import kernels, parallel
from npformer.train.optim import Adam, AdamW

TOL = {np.dtype(np.float64): 1e-12, np.dtype(np.float32): 1e-6}


@pytest.fixture(autouse=True)
def _numba_present():
    if kernels.numba_module() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("numba is missing under CI: install npformer[fast]")
        pytest.skip("numba is not installed (pip install 'npformer[fast]')")
    ops.clear_used()


def both(op_names, fn, *args, **kw):
    """fn(*args) on the twins, then on the references (each on fresh copies of the array arguments);
    asserts that every op in op_names ran its twin, then its reference."""
    copy = lambda: [a.copy() if isinstance(a, np.ndarray) else a for a in args]  # noqa: E731
    with ops.use_kernels("numba"):
        twin = fn(*copy(), **kw)
    used = ops.kernels_used()
    assert all(used.get(n) == "numba" for n in op_names), used
    with ops.use_kernels("numpy"):
        ref = fn(*copy(), **kw)
    used = ops.kernels_used()
    assert all(used.get(n) == "numpy" for n in op_names), used
    return twin, ref


def close(got, want, zeros=True):
    """Per-tensor relative error within the dtype's tolerance; where want is exactly 0, got is too."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape, got.dtype, want.dtype)
    if want.size == 0:
        return
    if np.isnan(want).any() or np.isnan(got).any():
        assert np.array_equal(np.isnan(got), np.isnan(want))
        got, want = np.nan_to_num(got), np.nan_to_num(want)
    w64, g64 = want.astype(np.float64), got.astype(np.float64)
    err = np.linalg.norm(g64 - w64)
    assert err <= TOL[want.dtype] * max(np.linalg.norm(w64), 1e-300), err / max(np.linalg.norm(w64), 1e-300)
    if zeros:
        assert np.all(got[want == 0] == 0)


DTYPES = [np.float64, np.float32]
SHAPES = [(1, 7), (5, 33), (2, 3, 64)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_layernorm_twin(dtype, shape):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(shape) * 3 + 5).astype(dtype)
    x.reshape(-1, shape[-1])[0] = 2.5                                 # a constant row: var 0, xhat 0
    w, b = rng.standard_normal(shape[-1]).astype(dtype), rng.standard_normal(shape[-1]).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)

    def run(x, w, b, dy):
        y, cache = ops.layernorm_forward(x, w, b)
        return (y, cache[0], cache[1], *ops.layernorm_backward(dy, cache))

    for t, r in zip(*both(["layernorm_forward", "layernorm_backward"], run, x, w, b, dy), strict=True):
        close(t, r, zeros=False)


def sparse_and_mixed_tails(rng):
    """Inputs whose tail (below -2 sqrt(2)) is sparse, at the 64-element sub-blocks' and the 4,096-element
    spans' edges too, or absent, or dense in one row's first blocks; and rows of several spreads side by side."""
    x = rng.standard_normal((3, 4100))                                # about one in 430 below the cut
    x[0, [0, 63, 64, 4095, 4096, 4099]] = -3.5                       # sub-block and span edges
    x[1] = np.abs(x[1])                                               # no tail at all
    x[2, :100] = -4.0 - rng.random(100)                               # one row's tail in its first blocks
    mixed = rng.standard_normal((6, 700)) * np.array([0.5, 1.0, 1.0, 2.0, 3.0, 1.0])[:, None]
    return x, mixed


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("form", ["erf", "tanh"])
def test_gelu_twin(dtype, form):
    rng = np.random.default_rng(2)
    fwd, bwd = (ops.gelu_forward, ops.gelu_backward) if form == "erf" else (ops.gelu_tanh_forward,
                                                                             ops.gelu_tanh_backward)
    names = ["gelu_forward", "gelu_backward"] if form == "erf" else ["gelu_tanh_forward", "gelu_tanh_backward"]
    extremes = np.array([-30.0, -12.0, -5.0, -2.9, -1e-3, 0.0, 1e-3, 2.9, 5.0, 12.0])
    # (2, 4100) and 9,001 elements: rows split at 4,096 elements among threads, the tail checked 64 at a time;
    # standard deviation 3: a tail element in most sub-blocks; 1: in few
    for x in (rng.standard_normal((5, 33)) * 3, extremes[None, :], rng.standard_normal((1, 1)),
              rng.standard_normal((2, 4100)) * 3, rng.standard_normal(9001) * 3, *sparse_and_mixed_tails(rng)):
        x = x.astype(dtype)
        dy = rng.standard_normal(x.shape).astype(dtype)
        for bias in (None, rng.standard_normal(x.shape[-1]).astype(dtype)):
            def run(x, dy, bias=bias):
                y, cache = fwd(x, bias)
                return y, cache[0], cache[1], bwd(dy, cache)
            for t, r in zip(*both(names, run, x, dy), strict=True):
                close(t, r, zeros=False)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES + [(300, 40)])
@pytest.mark.parametrize("residual", [False, True])
def test_layernorm_inference_twin(dtype, shape, residual):
    """LN(x + residual) (or LN(x)) in place and into a fresh array, on the twin and on the reference."""
    rng = np.random.default_rng(11)
    x = (rng.standard_normal(shape) * 3 + 5).astype(dtype)
    x.reshape(-1, shape[-1])[0] = 2.5                                 # a constant row: var 0
    res = rng.standard_normal(shape).astype(dtype) if residual else None
    if residual:
        res.reshape(-1, shape[-1])[0] = 0.0                           # the constant row stays constant
    w, b = rng.standard_normal(shape[-1]).astype(dtype), rng.standard_normal(shape[-1]).astype(dtype)

    def run(x):
        fresh = ops.layernorm_inference(x, w, b, 1e-5, residual=res)
        return fresh, ops.layernorm_inference(x, w, b, 1e-5, out=x, residual=res)   # in place
    for t, r in zip(*both(["layernorm_inference"], run, x), strict=True):
        close(t, r, zeros=False)
    twin, ref = both(["layernorm_inference"], run, x)
    assert np.all(twin[0].reshape(-1, shape[-1])[0] == b)             # var 0: the bias exactly
    close(twin[0], ref[0], zeros=False)


def test_gelu_inference_twin():
    """gelu(x + bias) in place, float32 (the reference's only dtype), with and without a bias; the
    tail below -2 sqrt(2) in some 64-element sub-blocks and not others; exact zeros stay zeros."""
    rng = np.random.default_rng(12)
    extremes = np.array([-30.0, -12.0, -5.0, -2.9, -1e-3, 0.0, 1e-3, 2.9, 5.0, 12.0])
    for x in (rng.standard_normal((5, 33)) * 3, extremes[None, :], rng.standard_normal((1, 1)),
              rng.standard_normal((2, 4100)) * 3, rng.standard_normal(9001) * 3, np.zeros((3, 70)),
              *sparse_and_mixed_tails(rng)):
        x = x.astype(np.float32)
        for bias in (None, rng.standard_normal(x.shape[-1]).astype(np.float32)):
            twin, ref = both(["gelu_inference_"], lambda x, bias=bias: ops.gelu_inference_(x, bias), x)
            close(twin, ref)
            tail = (x if bias is None else x + bias) < -2 * np.sqrt(2)   # tiny values: each to its own scale
            np.testing.assert_allclose(twin[tail], ref[tail], rtol=1e-6, atol=0)
            want = ops.gelu_forward(x, bias)[0]                       # the training op's forward
            close(twin, want)
    with pytest.raises(ValueError, match="bias must have shape"):
        ops.gelu_inference_(np.zeros((2, 3), np.float32), np.zeros(4, np.float32))
    with pytest.raises(TypeError, match="got float32, not C-contiguous"):
        ops.gelu_inference_(np.zeros((3, 2), np.float32).T)


def _mask(rng, shape):
    m = rng.random(shape) > 0.3
    m[0, 0, -1] = False                                               # one row with every key masked
    m[..., 0] |= True
    m[0, 0, -1] = False
    m[0, 0, :] = False
    return m


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_twin(dtype):
    rng = np.random.default_rng(3)
    # (3, 40, 33): 120 rows, four of the twin's blocks of 32 rows, one of them with a row whose every key
    # is masked, the last one with a score that would overflow exp without the row's max
    for shape in [(1, 1, 5), (2, 7, 33), (3, 40, 33)]:
        x = (rng.standard_normal(shape) * 4).astype(dtype)
        x[-1, -1, 0] = 300.0                                          # exp would overflow without the max
        dy = rng.standard_normal(shape).astype(dtype)
        mask = _mask(rng, shape)

        def run(x, dy, scale, mask):
            y, cache = ops.softmax_forward(x, out=x, scale=scale, mask=mask)
            return y.copy(), ops.softmax_backward(dy, cache, out=dy, scale=scale)

        for scale, m in [(None, None), (0.125, mask), (0.3, mask[:, :1, :])]:
            for t, r in zip(*both(["softmax_forward", "softmax_backward"], run, x, dy, scale, m), strict=True):
                close(t, r, zeros=False)                              # float32 underflow may differ
            if m is not None:
                y, _ = run(x.copy(), dy.copy(), scale, m)
                assert np.all(y[~np.broadcast_to(m, shape)] == 0)    # masked positions: exact zeros


@pytest.mark.parametrize("dtype", DTYPES)
def test_attention_runs_the_softmax_twin(dtype):
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((2, 3, 6, 8)).astype(dtype) for _ in range(3))
    dout = rng.standard_normal((2, 3, 6, 8)).astype(dtype)
    pad = np.ones((2, 1, 1, 6), bool)
    pad[1, ..., 4:] = False

    def run(q, k, v, dout):
        out, w, cache = ops.attention_forward(q, k, v, mask=pad, causal=True)
        return (out, w, *ops.attention_backward(dout, cache))

    twin, ref = both(["softmax_forward", "softmax_backward"], run, q, k, v, dout)
    for t, r in zip(twin, ref, strict=True):
        close(t, r, zeros=False)
    allowed = pad & ops.causal_mask(6, 6)                             # (2, 1, 6, 6)
    assert np.all(twin[1][~np.broadcast_to(allowed, twin[1].shape)] == 0)   # masked weights: exact zeros


@pytest.mark.parametrize("dtype", DTYPES)
# one stream; then row blocks (rows_per_block rows each, the last one shorter): 3 blocks (a pair of streams side
# by side, then one alone), 3 of odd size, 7 (four side by side, a pair, one), 9 (four, four, one)
@pytest.mark.parametrize("shape", [(3, 17), (256, 513), (3, 173, 301), (890, 512), (1029, 512)])
@pytest.mark.parametrize("residual", [True, False])
def test_dropout_twins(dtype, shape, residual):
    """The twin's mask is the reference's, bit for bit (the blocked shapes: the twin runs each block's
    SFC64 stream itself), in place or not; dropped units are exact zeros (or x exactly)."""
    rng = np.random.default_rng(5)
    y, x = (rng.standard_normal(shape).astype(dtype) for _ in range(2))
    op = "dropout_add_forward" if residual else "dropout_forward"

    def run(y, x, seed, in_place):
        g = np.random.default_rng(seed)
        out = y if in_place else None
        if residual:
            return ops.dropout_add_forward(y, x, 0.3, g, out=out)
        return ops.dropout_forward(y, 0.3, g, out=out)

    for in_place in (True, False):
        (t_out, t_mask), (r_out, r_mask) = both([op], run, y, x, 7, in_place)
        assert np.array_equal(t_mask, r_mask)                         # the same draws, the same mask
        assert set(np.unique(t_mask)) == {0, dtype(1 / 0.7)}
        assert abs((t_mask == 0).mean() - 0.3) < 0.05
        close(t_out, r_out)
        dropped = t_mask == 0
        assert np.array_equal(t_out[dropped], x[dropped] if residual else np.zeros_like(x[dropped]))


def test_dropout_twin_streams_are_numpys_sfc64():
    """The twin's generator against NumPy's own SFC64, beyond the first buffer (1024 raw outputs):
    block 0 of a (1, 5000) array keeps where NumPy's draws say."""
    from npformer.ops import dropout as ref
    from npformer.ops.fused import dropout as fused
    y = np.ones((1, 5000), np.float32)
    cut = np.uint32(1 << 31)
    states = ref.block_states(11, 1)
    with ops.use_kernels("numba"):
        out, mask = fused.dropout_streams(y, None, states, 5000, cut, np.float32(2.0), None)
    draws = np.random.SFC64(np.random.SeedSequence(11, spawn_key=(0,))).random_raw(2500).view(np.uint32)
    assert np.array_equal(mask[0] > 0, draws >= cut)
    assert np.array_equal(out, mask)


@pytest.mark.parametrize("lanes", [1, 2, 4])
def test_dropout_twin_vector_lanes_are_numpys_sfc64(lanes):
    """The twin's vector step (``_fill_lanes``): each lane's outputs and final state are NumPy's own
    SFC64 from that lane's state, over calls of uneven lengths (0 and 1 steps among them)."""
    from numba import njit

    from npformer.ops.fused import dropout as fused
    fill = {1: fused._fill1, 2: fused._fill2, 4: fused._fill4}[lanes]

    @njit(cache=False)
    def run(st, raw, n):
        fill(st, raw, n)

    gens = [np.random.SFC64(np.random.SeedSequence(3, spawn_key=(v,))) for v in range(lanes)]
    st = np.array([g.state["state"]["state"] for g in gens], np.uint64)          # (lanes, 4)
    raw = np.zeros((lanes, 700), np.uint64)
    for n in (0, 1, 37, 700, 5):
        raw[:] = 0
        run(st, raw, n)
        for v, g in enumerate(gens):
            assert np.array_equal(raw[v, :n], g.random_raw(n)), (n, v)
            assert not raw[v, n:].any()                                  # nothing past n is written
            assert np.array_equal(st[v], np.array(g.state["state"]["state"], np.uint64)), (n, v)


def test_dropout_twin_seeds_as_numpy():
    """The twin's block states, seeded without NumPy's objects (SeedSequence's pool and hash, SFC64's
    warm-up), are NumPy's own: roots of one and two 32-bit words, the edges, many blocks."""
    from npformer.ops import dropout as ref
    from npformer.ops.fused import dropout as fused
    roots = [0, 1, 11, (1 << 32) - 1, 1 << 32, (1 << 63) - 1, (1 << 64) - 1,
             *np.random.default_rng(8).integers(0, 1 << 63, 20).tolist()]
    with ops.use_kernels("numba"):
        for root in roots:
            assert np.array_equal(fused.block_states(root, 40), ref.block_states(root, 40)), root
        assert fused.block_states(5, 0).shape == (0, 4)
        with pytest.raises(ValueError, match="root must be in"):
            fused.block_states(-1, 3)


@pytest.mark.parametrize("dtype", DTYPES)
def test_cross_entropy_twin(dtype):
    rng = np.random.default_rng(6)
    for n, c in [(1, 3), (9, 31)]:
        logits = (rng.standard_normal((n, c)) * 5).astype(dtype)
        targets = rng.integers(0, c, n)
        if n > 1:
            targets[2] = -100                                         # an ignored row
        for smoothing in (0.0, 0.1):
            def run(logits, targets, smoothing=smoothing):
                loss, cache = ops.cross_entropy_forward(logits, targets, label_smoothing=smoothing)
                return loss, ops.cross_entropy_backward(np.asarray(1.5, dtype), cache)

            (tl, td), (rl, rd) = both(["cross_entropy_forward", "cross_entropy_backward"], run, logits, targets)
            close(tl, rl)
            close(td, rd)                                             # the reference's float32 steps
            if n > 1:
                assert np.all(td[2] == 0)                             # the ignored row: exact zeros
    with ops.use_kernels("numba"):                                    # every row ignored: NaN, as torch
        loss, _ = ops.cross_entropy_forward(np.zeros((2, 3), dtype), np.array([-100, -100]))
    assert np.isnan(loss) and loss.dtype == dtype


@pytest.mark.parametrize("dtype", DTYPES)
def test_embedding_twin(dtype):
    rng = np.random.default_rng(7)
    ids = np.array([[3, 1, 3, 0], [-1, 3, 9, 1]])                     # repeats, and a negative id
    dout = rng.standard_normal((2, 4, 5)).astype(dtype)
    tied = rng.standard_normal((10, 5)).astype(dtype)

    def run(ids, dout, tied):
        _, cache = ops.embedding_forward(ids, tied)
        return ops.embedding_backward(dout, cache), ops.embedding_backward(dout, cache, tied)

    for t, r in zip(*both(["embedding_backward"], run, ids, dout, tied), strict=True):
        assert np.array_equal(t, r)                                   # the same additions in the same order
    with ops.use_kernels("numba"), pytest.raises(IndexError, match="out of bounds"):
        ops.embedding_backward(dout, (ids + 7, (10, 5)))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("opt", [Adam, AdamW])
def test_adam_twin(dtype, opt):
    rng = np.random.default_rng(8)
    p0 = {"w": rng.standard_normal((7, 5)).astype(dtype), "b": rng.standard_normal(3).astype(dtype)}
    grads = [{k: rng.standard_normal(v.shape).astype(dtype) for k, v in p0.items()} for _ in range(3)]

    def run(w, b):
        o = opt({"w": w, "b": b}, lr=1e-2, weight_decay=0.1, decay=lambda k, _: k == "w")
        for g in grads:
            o.step(g)
        return w, b, o.m["w"], o.v["w"], o.m["b"]

    for t, r in zip(*both(["adam"], run, p0["w"], p0["b"]), strict=True):
        close(t, r)


def test_same_bits_on_one_and_two_threads():
    """The parallel compilations on 2 threads give the serial ones' bits: layer norm's weight and bias
    sums (fixed blocks, added in order), the scatter-add (each element in the ids' order), and the
    row-wise and chunked twins (each row's or chunk's arithmetic the same on any thread; the row sums
    one compiled function, ``fused/_simd.py``). Arrays of several chunks (Adam, dropout: 64K elements)."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((300, 40)).astype(np.float32)
    w, b = rng.standard_normal(40).astype(np.float32), rng.standard_normal(40).astype(np.float32)
    ids = rng.integers(0, 50, (300,))
    h = (rng.standard_normal((700, 300)) * 3).astype(np.float32)                # 210K elements
    bias = rng.standard_normal(300).astype(np.float32)
    p0 = rng.standard_normal(3 * (1 << 16) + 5).astype(np.float32)
    grads = [{"p": rng.standard_normal(p0.shape).astype(np.float32)} for _ in range(2)]
    targets = rng.integers(0, 300, 700)

    def run():
        y, cache = ops.layernorm_forward(x, w, b)
        dx, dw, db = ops.layernorm_backward(x, cache)
        out = [y, dx, dw, db, ops.embedding_backward(x, (ids, (50, 40)))]
        for fwd, bwd in ((ops.gelu_forward, ops.gelu_backward), (ops.gelu_tanh_forward, ops.gelu_tanh_backward)):
            g, c = fwd(h, bias)
            out += [g, bwd(h, c)]
        s, c = ops.softmax_forward(h.copy(), scale=0.3, mask=h > -1)
        out += [s, ops.softmax_backward(h, c, scale=0.3)]
        loss, c = ops.cross_entropy_forward(h, targets, label_smoothing=0.1)
        out += [loss, ops.cross_entropy_backward(1.0, c)]
        out += list(ops.dropout_add_forward(h.copy(), h, 0.2, np.random.default_rng(3)))
        out += [ops.layernorm_inference(h, h[0], h[1], residual=h[::-1].copy()),
                ops.gelu_inference_(h.copy(), bias)]
        opt = AdamW({"p": p0.copy()}, lr=1e-2)
        for g in grads:
            opt.step(g)
        return out + [opt.params["p"], opt.m["p"], opt.v["p"]]

    with ops.use_kernels("numba"):
        with parallel.limit(1):
            one = run()
        with parallel.limit(2):
            two = run()
    for i, (a, c) in enumerate(zip(one, two, strict=True)):
        assert np.array_equal(a, c), i


def test_float32_exp_and_tanh():
    """``fused/_simd.py``'s float32 exp against float64's: within 4e-7 relative over float32's normal
    range, exactly 0 where numpy's underflows (below -87.34, where it would be subnormal or 0), exp(0) = 1
    and tanh(0) = 0 exactly; tanh within 2e-7 absolute (0 for |x| below 3e-8), never of the wrong sign."""
    from numba import njit

    from npformer.ops.fused import _simd

    @njit
    def both32(a, e, t):
        for i in range(a.size):
            e[i] = _simd.exp32(a[i])
            t[i] = _simd.tanh32(a[i])

    x = np.concatenate([np.linspace(-87.3, 88.0, 20001), [0.0, -1e-30, 1e-8, -88.0, -100.0, -np.inf]])
    x = x.astype(np.float32)
    e, t = np.empty_like(x), np.empty_like(x)
    both32(x, e, t)
    want = np.exp(x.astype(np.float64))
    live = x >= -87.3
    assert np.all(np.abs(e[live] - want[live]) <= 4e-7 * want[live])
    assert np.all(e[x < np.float32(-87.34)] == 0) and e[x == 0][0] == 1
    assert np.all(np.abs(t - np.tanh(x.astype(np.float64))) <= 2e-7) and t[x == 0][0] == 0
    assert np.all(t * x >= 0)                                         # never the wrong sign


@pytest.mark.parametrize("dtype", DTYPES)
def test_row_max_is_exact_on_short_and_long_rows(dtype):
    """``fused/_simd.py row_max`` is numpy's max exactly: rows of 1 to 130 (both of its paths, each
    remainder), the maximum at each end and inside, -inf entries (masked keys), a row all -inf, +inf, a
    sub-range [lo, hi) of a longer row."""
    from numba import njit

    from npformer.ops.fused import _simd

    @njit
    def maxima(a, lo, hi, out):
        for i in range(a.shape[0]):
            out[i] = _simd.row_max(a[i], lo, hi)

    rng = np.random.default_rng(12)
    for n in [*range(1, 20), 31, 32, 33, 47, 48, 49, 52, 63, 64, 65, 127, 128, 130]:
        a = rng.standard_normal((3 * n + 4, n)).astype(dtype)
        a[rng.random(a.shape) < 0.3] = -np.inf
        for i in range(n):                                           # the largest value at every position
            a[i, i] = 9.0
            a[n + i, i] = -9.0
            a[n + i, np.arange(n) != i] = -np.inf
        a[-4] = -np.inf
        a[-3, n // 2] = np.inf
        a[-2] = np.linspace(-5, 5, n)
        a[-1] = np.linspace(5, -5, n)
        out = np.empty(a.shape[0], dtype)
        maxima(a, 0, n, out)
        assert np.array_equal(out, a.max(axis=1)), n
        if n > 3:
            maxima(a, 1, n - 1, out)
            assert np.array_equal(out, a[:, 1:n - 1].max(axis=1)), n


def test_the_ffn_adds_its_bias_in_the_gelu_twin(monkeypatch):
    """FeedForward with GELU: linear1's product without its bias, the twin adding it in its one pass
    (the activation is handed the bias on the twins, not on the references); outputs and every gradient
    (linear1's bias among them) as on the references."""
    from npformer.nn import feedforward
    from npformer.nn.feedforward import FeedForward

    handed = []
    for name, (fwd, bwd) in list(feedforward.ACTIVATIONS.items()):
        def spy(x, bias=None, fwd=fwd):
            handed.append(bias is not None)
            return fwd(x, bias)
        monkeypatch.setitem(feedforward.ACTIVATIONS, name, (spy, bwd))
    rng = np.random.default_rng(10)
    for act in ("gelu", "gelu_tanh"):
        for dtype in DTYPES:
            ffn = FeedForward(8, 24, activation=act, rng=np.random.default_rng(1), dtype=dtype)
            x = rng.standard_normal((2, 5, 8)).astype(dtype)
            dy = rng.standard_normal((2, 5, 8)).astype(dtype)

            def run(x, dy, ffn=ffn):
                y, cache = ffn.forward(x)
                dx, grads = ffn.backward(dy, cache)
                return y, dx, *(grads[k] for k in sorted(grads))

            handed.clear()
            twin, ref = both([f"{act}_forward", f"{act}_backward"], run, x, dy)
            assert handed == [True, False]                            # the twin got the bias; the reference not
            for t, r in zip(twin, ref, strict=True):
                close(t, r, zeros=False)


def test_a_bad_setting_is_one_clear_error(monkeypatch):
    with pytest.raises(ValueError, match="kernels must be one of auto, numba, numpy"):
        ops.use_kernels("fast")
    monkeypatch.setenv("NPFORMER_KERNELS", "fast")
    with pytest.raises(ValueError, match="NPFORMER_KERNELS must be one of auto, numba, numpy, got 'fast'"):
        ops.layernorm_forward(np.ones((2, 3)), np.ones(3), np.zeros(3))
    monkeypatch.setenv("NPFORMER_KERNELS", "numpy")
    ops.layernorm_forward(np.ones((2, 3)), np.ones(3), np.zeros(3))
    assert ops.kernels_used()["layernorm_forward"] == "numpy"
    with ops.use_kernels("numba"):                                    # use_kernels overrides the environment
        ops.layernorm_forward(np.ones((2, 3)), np.ones(3), np.zeros(3))
    assert ops.kernels_used()["layernorm_forward"] == "numba"
