"""ops/workspace.py: large arrays are reused only once nobody holds them, so reuse never
changes a result; and a training step with the pool gives the same numbers as one without."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from npformer.models import DecoderLM, DecoderLMConfig
from npformer.ops import workspace
from npformer.train.optim import Adam

BIG = (512, 1024)                                   # 2 MiB in float32: pooled (>= MIN_BYTES)


@pytest.fixture(autouse=True)
def fresh_pool():
    workspace.clear()
    limit = workspace.limit_bytes()
    yield
    workspace.set_limit(limit)
    workspace.clear()


def test_a_held_array_is_never_handed_out_and_a_dropped_one_is_reused():
    a = workspace.empty(BIG, np.float32)
    b = workspace.empty(BIG, np.float32)
    assert b is not a                                # a is held here
    a_id = id(a)
    del a
    c = workspace.empty(BIG, np.float32)
    assert id(c) == a_id                             # nobody held it: the same memory again
    assert workspace.held_bytes() == 2 * c.nbytes
    # other shapes and dtypes never share an entry
    assert workspace.empty(BIG, np.float64) is not c and workspace.empty((1024, 512), np.float32) is not b


def test_a_view_or_an_entry_in_a_dict_keeps_its_array_held():
    a = workspace.empty(BIG, np.float32)
    a_id = id(a)
    view = a[1:].T
    grads = {"w": a}
    del a
    assert id(workspace.empty(BIG, np.float32)) != a_id       # the view and the dict hold it
    del grads
    assert id(workspace.empty(BIG, np.float32)) != a_id       # the view alone still does
    del view
    assert id(workspace.empty(BIG, np.float32)) == a_id


def test_small_arrays_are_not_pooled_and_the_limit_holds():
    workspace.empty((4, 4), np.float32)
    assert workspace.held_bytes() == 0
    nbytes = np.zeros(BIG, np.float32).nbytes
    workspace.set_limit(2 * nbytes)
    held = [workspace.empty(BIG, np.float32) for _ in range(3)]       # the third does not fit
    assert workspace.held_bytes() == 2 * nbytes
    assert all(x.shape == BIG for x in held)
    del held
    workspace.empty((2048, 1024), np.float32)                          # 4 MiB: the free ones make room
    assert workspace.held_bytes() <= 2 * nbytes
    workspace.set_limit(0)
    assert workspace.held_bytes() == 0
    workspace.empty(BIG, np.float32)
    assert workspace.held_bytes() == 0                                 # limit 0: pooling off


def test_an_array_nobody_asks_for_again_is_let_go(monkeypatch):
    monkeypatch.setattr(workspace, "MAX_AGE", 64)
    workspace.empty(BIG, np.float32)                     # made, then dropped by its user at once
    old = workspace.held_bytes()
    held = workspace.empty((2048, 1024), np.float32)     # in use the whole time: never let go
    for _ in range(200):                                 # another job's shape, over and over
        workspace.empty((1024, 1024), np.float64)
    assert workspace.held_bytes() == held.nbytes + (8 << 20)   # the BIG one went, the held one stayed
    assert old == 2 << 20


@pytest.mark.parametrize("bad", [-1, 1.5, "1", True])
def test_set_limit_names_its_argument(bad):
    with pytest.raises(ValueError, match="nbytes"):
        workspace.set_limit(bad)


def test_threads_never_share_an_array():
    clashes = [0] * 4
    barrier = threading.Barrier(4)

    def grab(slot: int):
        barrier.wait()
        for _ in range(300):
            a = workspace.empty(BIG, np.float32)
            a[...] = slot                                # while this thread holds it ...
            b = a.sum(dtype=np.float64)                  # (long enough for the others to run)
            clashes[slot] += int(b != slot * a.size or a[0, 0] != slot)   # ... nobody else writes it
            del a

    threads = [threading.Thread(target=grab, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert clashes == [0, 0, 0, 0]
    # at most one array per thread in flight at a time: the pool stays small
    assert workspace.held_bytes() <= 4 * np.zeros(BIG, np.float32).nbytes


def _train(steps: int, keep: list | None = None):
    """A small DecoderLM whose output projection and its gradient are pooled (>= 1 MiB)."""
    cfg = DecoderLMConfig(vocab_size=2048, d_model=128, n_heads=4, n_layers=2, d_ff=256, max_len=64)
    model = DecoderLM(cfg, rng=0)
    opt = Adam(model.state_dict(), lr=1e-3, weight_decay=1e-4)
    data = np.random.default_rng(1).integers(1, 2048, (steps, 8, 33))
    drop = np.random.default_rng(2)
    for ids in data:
        loss, grads = model.loss(ids[:, :-1], ids[:, 1:], rng=drop)
        if keep is not None:
            keep.append({k: (g, g.copy()) for k, g in grads.items()})
        opt.step(grads)
        del grads
    return model.state_dict()


def test_training_with_the_pool_equals_training_without_it():
    workspace.set_limit(0)
    without = {k: v.copy() for k, v in _train(4).items()}
    workspace.set_limit(1 << 30)
    kept: list = []
    with_pool = _train(4, keep=kept)
    assert workspace.held_bytes() > 0                       # the pool did serve this run
    for k, v in without.items():
        np.testing.assert_array_equal(with_pool[k], v, err_msg=k)
    # gradients a caller kept from earlier steps were never overwritten by later ones
    for step in kept:
        for k, (g, snapshot) in step.items():
            np.testing.assert_array_equal(g, snapshot, err_msg=k)
