"""ops/parallel.py, the row blocks of large element-wise work, and the ops' blocked twins.

The pool: results in block order, the same for 1, 2 and 3 threads and for rows that do not divide
into blocks evenly, a block's exception raised in the caller, nested calls inline, idle helpers
blocked. The twins (softmax, layer norm, ReLU, GELU, dropout, cross-entropy, Adam): each blocked
result against the reference path (``parallel.reference_only``) within 1e-6 relative in float32,
and torch's autograd in float64 through the blocked path; a whole model's gradients with the pool
against the reference path; gradients that are exactly zero stay exactly zero."""
from __future__ import annotations

import os
import threading
import warnings
import weakref

import numpy as np
import pytest
import torch

from npformer.models import DecoderLM, DecoderLMConfig
from npformer.ops import (
    cross_entropy_backward,
    cross_entropy_forward,
    dropout_backward,
    dropout_forward,
    gelu_backward,
    gelu_forward,
    layernorm_backward,
    layernorm_forward,
    parallel,
    relu_backward,
    relu_forward,
    softmax_backward,
    softmax_forward,
)
from npformer.train.optim import Adam

TOL = 1e-6          # ||blocked - reference|| / ||reference||, float32


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of 640 elements, and every array of 2,000 or more blocked: many uneven blocks on
    small arrays, so that the tests run fast."""
    monkeypatch.setattr(parallel, "BLOCK_ELEMENTS", 640)
    monkeypatch.setattr(parallel, "MIN_ELEMENTS", 2000)


def rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape
    nb = np.linalg.norm(b)
    return float(np.linalg.norm(a - b) / nb) if nb > 0 else float(np.linalg.norm(a))


def on_threads(n, fn, *args):
    with parallel.limit(n):
        return fn(*args)


# -- the pool ------------------------------------------------------------------------------------
def _block_sum(rows, x):
    return rows.start, rows.stop, x[rows].sum(axis=0)


@pytest.mark.parametrize("n_rows", [1, 7, 64, 203])
def test_blocks_cover_the_rows_in_order_for_any_thread_count(small_blocks, n_rows):
    x = np.random.default_rng(0).standard_normal((n_rows, 50)).astype(np.float32)   # 12 rows per block
    results = [on_threads(n, parallel.map_rows, _block_sum, n_rows, 50, x) for n in (1, 2, 3)]
    bounds = [(a, b) for a, b, _ in results[0]]
    assert bounds[0][0] == 0 and bounds[-1][1] == n_rows
    assert all(b == a2 for (_, b), (a2, _) in zip(bounds[:-1], bounds[1:], strict=True))      # contiguous, in order
    assert all(b - a == 12 for a, b in bounds[:-1])
    for other in results[1:]:
        assert [(a, b) for a, b, _ in other] == bounds
        assert all(np.array_equal(s, s1) for (_, _, s), (_, _, s1) in zip(other, results[0], strict=True))


def _fail_on_block_3(rows, seen):
    if rows.start == 3:
        raise ArithmeticError(f"block at row {rows.start}")
    return rows.start


@pytest.mark.parametrize("n", [1, 2, 3])
def test_an_exception_in_a_block_reaches_the_caller(small_blocks, n):
    with parallel.limit(n), pytest.raises(ArithmeticError, match="block at row 3"):
        parallel.map_rows(_fail_on_block_3, 40, 640, None)          # one row per block, 40 blocks
    assert on_threads(n, parallel.map_rows, _block_sum, 10, 640, np.ones((10, 640)))[9][0] == 9  # usable after


def _nested(rows, x):
    return parallel.map_rows(_block_sum, x.shape[0], 640, x)


def test_a_call_from_inside_a_block_runs_inline(small_blocks):
    x = np.ones((4, 640))
    out = on_threads(2, parallel.map_rows, _nested, 4, 640, x)
    assert len(out) == 4 and all(len(inner) == 4 for inner in out)


def test_no_helper_holds_an_array_after_the_call(small_blocks):
    """ops/workspace.py reuses an array only once nobody holds it: neither a helper that reaches
    the job late nor an idle one may keep a job's arrays."""
    for _ in range(20):
        a = np.ones((50, 640))
        ref = weakref.ref(a)
        on_threads(3, parallel.map_rows, _block_sum, 50, 640, a)
        del a
        assert ref() is None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_starts_its_own_helpers(small_blocks):
    on_threads(2, parallel.map_rows, _block_sum, 20, 640, np.ones((20, 640)))   # helpers in the parent
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)         # 3.12 on: fork of a threaded process
        pid = os.fork()
    if pid == 0:                                                  # the child: parent's helpers are gone
        code = 1
        try:
            gone = not parallel._helpers
            out = on_threads(2, parallel.map_rows, _block_sum, 20, 640, np.ones((20, 640)))
            code = 0 if gone and len(out) == 20 and len(parallel._helpers) == 1 else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_threads_follow_limit_and_bad_limits_are_refused():
    with parallel.limit(3):
        assert parallel.threads() == 3
        with parallel.limit(1):
            assert parallel.threads() == 1
        assert parallel.threads() == 3
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="threads must be an int >= 1"):
            with parallel.limit(bad):
                pass


def test_limit_is_per_thread():
    got = []
    with parallel.limit(3):
        t = threading.Thread(target=lambda: got.append(on_threads(1, parallel.threads)))
        t.start()
        t.join()
        assert parallel.threads() == 3
    assert got == [1]


def test_idle_helpers_wait_blocked(small_blocks):
    on_threads(3, parallel.map_rows, _block_sum, 100, 640, np.ones((100, 640)))
    helpers = [t for t in threading.enumerate() if t.name.startswith("npformer-rows-")]
    assert len(helpers) >= 2
    # a helper blocked on its queue uses no CPU time; spinning would use nearly all of it
    import time
    t0 = time.process_time()
    time.sleep(0.2)
    assert time.process_time() - t0 < 0.1


def test_minilm_encoding_threads_run_one_thread_each():
    from npformer.pretrained.parallel import map_threads
    with parallel.limit(3):
        seen = list(map_threads(lambda _: parallel.threads(), [0, 1, 2, 3], threads=2))
        inline = list(map_threads(lambda _: parallel.threads(), [0], threads=1, one_blas_thread=True))
        assert parallel.threads() == 3
    assert seen == [1, 1, 1, 1] and inline == [1]


# -- the ops' twins: blocked vs the reference path, float32 -----------------------------------------
def f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def both(fn, *args):
    """fn on the reference path, then blocked on 1, 2 and 3 threads: (reference, [blocked...])."""
    with parallel.reference_only():
        ref = fn(*args)
    return ref, [on_threads(n, fn, *args) for n in (1, 2, 3)]


def assert_twin(ref, fast, what):
    ref_arrays, fast_arrays = _arrays(ref), [_arrays(f) for f in fast]
    for i, r in enumerate(ref_arrays):
        for k, f in enumerate(fast_arrays):
            assert rel(f[i], r) <= TOL, f"{what}[{i}], thread count {k + 1}: {rel(f[i], r):.2e}"
            assert np.array_equal(f[i], fast_arrays[0][i]), f"{what}[{i}]: thread count {k + 1} differs from 1"
            assert np.array_equal(f[i] == 0, r == 0) or (r != 0).all(), f"{what}[{i}]: exact zeros moved"


def _arrays(x):
    if isinstance(x, np.ndarray):
        return [x]
    return [a for a in x if isinstance(a, np.ndarray)]


def test_softmax_twin(small_blocks):
    rng = np.random.default_rng(1)
    x = f32(rng, 3, 5, 37, 41)                                     # 22,755 elements, 41-wide rows
    x[0, 0, 3] = -np.inf                                           # a fully masked row stays zeros
    dy = f32(rng, *x.shape)
    assert_twin(*both(lambda a: softmax_forward(a)[0], x), "softmax")
    y = softmax_forward(x)[0]
    assert_twin(*both(lambda a: softmax_backward(a, y), dy), "softmax_backward")
    assert (softmax_forward(x)[0][0, 0, 3] == 0).all()


def test_layernorm_twin(small_blocks):
    rng = np.random.default_rng(2)
    x, dy = f32(rng, 7, 29, 33), f32(rng, 7, 29, 33)
    dy[:, :, 5] = 0                                                # the 6th feature's weight and bias: zero grads
    w, b = f32(rng, 33), f32(rng, 33)
    assert_twin(*both(lambda a: layernorm_forward(a, w, b)[0], x), "layernorm")

    def grads(d):
        return layernorm_backward(d, layernorm_forward(x, w, b)[1])

    ref, fast = both(grads, dy)
    assert_twin(ref, fast, "layernorm_backward")
    assert ref[1][5] == 0 and all(f[1][5] == 0 and f[2][5] == 0 for f in fast)


def test_relu_and_gelu_twins(small_blocks):
    rng = np.random.default_rng(3)
    x, dy = f32(rng, 9, 31, 23) * 4, f32(rng, 9, 31, 23)           # GELU's far tail (x < -2.83) too
    assert_twin(*both(lambda a: relu_forward(a)[0], x), "relu")
    ref, fast = both(lambda d: relu_backward(d, x), dy)
    assert_twin(ref, fast, "relu_backward")
    assert all((f[x <= 0] == 0).all() for f in fast)               # exact zeros where the input is not positive
    assert_twin(*both(lambda a: gelu_forward(a)[0], x), "gelu")
    assert_twin(*both(lambda d: gelu_backward(d, gelu_forward(x)[1]), dy), "gelu_backward")


def test_residual_add_twin(small_blocks):
    rng = np.random.default_rng(10)
    a, b = f32(rng, 5, 47, 19), f32(rng, 5, 47, 19)
    ref, fast = both(parallel.add, a, b)
    assert_twin(ref, fast, "add")
    assert all(np.array_equal(f, a + b) for f in fast)
    c = a.copy()
    assert on_threads(2, parallel.add, c, b, c) is c and np.array_equal(c, a + b)   # in place


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_twin(small_blocks, smoothing):
    rng = np.random.default_rng(4)
    logits, t = f32(rng, 90, 301) * 3, rng.integers(0, 301, 90)    # 2 rows per block
    t[::7] = -100                                                  # ignored rows: zero gradient rows

    def run(lg):
        loss, cache = cross_entropy_forward(lg, t, label_smoothing=smoothing)
        return loss, cross_entropy_backward(1.0, cache).copy()

    ref, fast = both(run, logits)
    assert_twin(ref, fast, "cross_entropy")
    assert all((f[1][::7] == 0).all() for f in fast)


def test_adam_twin(small_blocks):
    rng = np.random.default_rng(5)
    params0 = {"w": f32(rng, 57, 91), "b": f32(rng, 91)}           # w blocked (5,187 elements), b not
    grads = [{"w": f32(rng, 57, 91), "b": f32(rng, 91)} for _ in range(3)]
    grads[0]["w"][3] = 0

    def train(_):
        params = {k: v.copy() for k, v in params0.items()}
        opt = Adam(params, lr=1e-2, weight_decay=0.01)
        for g in grads:
            opt.step(g)
        return params["w"], opt.m["w"], opt.v["w"], params["b"]

    assert_twin(*both(train, None), "adam")


# -- dropout: its own streams per block ----------------------------------------------------------
def test_dropout_twin_masks(small_blocks):
    x = np.random.default_rng(6).standard_normal((60, 1000)).astype(np.float32)   # 60 blocks of one row
    p = 0.25
    ys = [on_threads(n, dropout_forward, x, p, np.random.default_rng(11)) for n in (1, 2, 3)]
    y, mask = ys[0]
    for y2, mask2 in ys[1:]:
        assert np.array_equal(mask2, mask) and np.array_equal(y2, y)   # any thread count: the same mask
    scale = np.float32(1 / (1 - p))
    assert set(np.unique(mask)) <= {np.float32(0), scale} and mask.dtype == np.float32
    assert np.array_equal(y, x * mask)
    # the keep rate: 60,000 draws, binomial sd 0.0018; 5 sd
    assert abs((mask > 0).mean() - (1 - p)) < 0.009
    # a high p too (the cut near its top): binomial sd 0.0012 at p = 0.9; 5 sd
    assert abs((on_threads(1, dropout_forward, x, 0.9, np.random.default_rng(13))[1] > 0).mean() - 0.1) < 0.006
    # blocks draw from different streams: two rows' masks agree only by chance (3/4 x 3/4 + 1/4 x 1/4)
    agree = ((mask[:-1] > 0) == (mask[1:] > 0)).mean(axis=1)
    assert agree.max() < 0.7
    # another seed, another mask; the gradient uses the same mask
    assert not np.array_equal(on_threads(2, dropout_forward, x, p, np.random.default_rng(12))[1], mask)
    dy = np.random.default_rng(7).standard_normal(x.shape).astype(np.float32)
    assert np.array_equal(on_threads(3, dropout_backward, dy, mask), dy * mask)


# -- torch float64 through the blocked path ------------------------------------------------------
def test_blocked_ops_match_torch_in_float64(small_blocks):
    rng = np.random.default_rng(8)
    x, dy = rng.standard_normal((6, 21, 40)), rng.standard_normal((6, 21, 40))
    w, b = rng.standard_normal(40), rng.standard_normal(40)
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    with parallel.limit(2):
        y, cache = layernorm_forward(x, w, b)
        dx, dw, db = layernorm_backward(dy, cache)
        s, sc = softmax_forward(x)
        ds = softmax_backward(dy, sc)
    ty = torch.nn.functional.layer_norm(tx, (40,), tw, tb)
    (ty * torch.tensor(dy)).sum().backward()
    for got, want in ((y, ty), (dx, tx.grad), (dw, tw.grad), (db, tb.grad)):
        assert rel(got, want.detach().numpy()) < 1e-12
    tx2 = torch.tensor(x, requires_grad=True)
    ts = torch.softmax(tx2, -1)
    (ts * torch.tensor(dy)).sum().backward()
    assert rel(s, ts.detach().numpy()) < 1e-12 and rel(ds, tx2.grad.numpy()) < 1e-12


# -- a whole model ------------------------------------------------------------------------------
def test_model_gradients_with_the_pool_match_the_reference(small_blocks):
    cfg = DecoderLMConfig(vocab_size=40, d_model=32, n_heads=4, d_ff=128, n_layers=2, max_len=32, dropout=0.1)
    model = DecoderLM(cfg, rng=0)
    rng = np.random.default_rng(9)
    x, y = rng.integers(0, 39, (6, 24)), rng.integers(0, 39, (6, 24))   # token 39 never appears

    def grads(_):
        loss, g = model.loss(x, y)
        return {k: v.copy() for k, v in g.items()}

    model.eval()                                                  # no dropout: the reference's own path
    ref, fast = both(grads, None)
    for k, r in ref.items():
        for f in fast:
            assert rel(f[k], r) <= TOL, f"{k}: {rel(f[k], r):.2e}"
            assert np.array_equal(f[k], fast[0][k]), f"{k}: thread counts differ"
        for f in fast:                                            # exact zeros stay exact zeros
            assert (f[k][r == 0] == 0).all(), f"{k}: the reference gradient is zero where the pool's is not"
    assert not ref["embed.pos.weight"][24:].any()                  # positions 24..31 unused: zero rows
    model.train()                     # dropout (attention's too, blocked): the same masks for any thread count
    one, three = (on_threads(n, lambda: {k: v.copy() for k, v in model.loss(x, y, rng=np.random.default_rng(3))[1]
                                         .items()}) for n in (1, 3))
    for k, g in one.items():
        assert np.array_equal(three[k], g), k
        assert rel(g, ref[k]) > 1e-3, f"{k}: dropout changed nothing"     # the masks were drawn and used
