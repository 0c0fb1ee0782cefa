"""ops/workspace.py: large arrays are reused only once nobody holds them, so reuse never
changes a result, not even from several threads at once; a training step with the pool gives the
same numbers as one without; a request over the limit leaves the pool alone, and a training run
gives the pool's arrays back when it ends."""
from __future__ import annotations

import contextlib
import sys
import threading

import numpy as np
import pytest
import threadpoolctl
from train_helpers import TINY_MODEL, tiny_config, tiny_task

from npformer.models import DecoderLM, DecoderLMConfig
from npformer.ops import workspace
from npformer.train.optim import Adam
from npformer.train.trainer import Trainer

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


def test_a_request_that_cannot_fit_leaves_the_pool_alone():
    nbytes = np.zeros(BIG, np.float32).nbytes                           # 2 MiB
    workspace.set_limit(3 * nbytes)
    used = workspace.empty(BIG, np.float32)
    workspace.empty(BIG, np.float32)                                   # made and let go: free in the pool
    assert workspace.held_bytes() == 2 * nbytes
    over = workspace.empty((1024, 2048), np.float32)                   # 8 MiB > the 6 MiB limit
    beside = workspace.empty((1536, 1024), np.float32)                 # 6 MiB: no room beside `used`
    assert over.shape == (1024, 2048) and beside.shape == (1536, 1024)
    assert workspace.held_bytes() == 2 * nbytes                        # the free array was kept ...
    again = workspace.empty(BIG, np.float32)
    assert workspace.held_bytes() == 2 * nbytes and again is not used  # ... and is handed out again
    del again
    room = workspace.empty((1024, 1024), np.float32)                   # 4 MiB fits once the free one goes
    assert workspace.held_bytes() == nbytes + room.nbytes == 3 * nbytes


def test_clear_lets_go_of_every_array_and_the_ones_in_use_stay_with_their_users():
    kept = workspace.empty(BIG, np.float32)
    kept[...] = 7
    workspace.empty(BIG, np.float32)                                   # a free one
    workspace.clear()
    assert workspace.held_bytes() == 0
    fresh = [workspace.empty(BIG, np.float32) for _ in range(2)]
    for a in fresh:
        a[...] = -1
    assert all(a is not kept for a in fresh) and (kept == 7).all()


@pytest.mark.parametrize("locked", [True, False], ids=["with the lock", "without it the test fails"])
def test_two_threads_asking_at_once_never_get_the_same_array(locked, monkeypatch):
    """The check "nobody holds this array" and the taking of it are one step under the pool's lock.
    Two threads ask for the pool's one free array at the same moment: each reads its reference
    count, then waits for the other (up to 0.3 s) before taking it. With the lock the second waits
    for the first to take the array, then finds it held and gets another. Without it (the second
    case, showing that this test can fail) both see it free and both get it, or one finds it gone
    from under it."""
    workspace.empty(BIG, np.float32)                                   # one free array in the pool
    meet = threading.Barrier(2, timeout=0.3)
    real = workspace._refs

    def refs(arrays, i):                               # the count read, then a thread switch
        n = real(arrays, i)
        with contextlib.suppress(threading.BrokenBarrierError):
            meet.wait()
        return n
    monkeypatch.setattr(workspace, "_refs", refs)
    if not locked:
        monkeypatch.setattr(workspace, "_lock", contextlib.nullcontext())
    got, errors = [None, None], []
    start = threading.Barrier(2)

    def ask(slot: int):
        start.wait()
        try:
            got[slot] = workspace.empty(BIG, np.float32)              # held until both have asked
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    shared = bool(errors) or got[0] is got[1]
    assert shared != locked, (errors, got[0] is got[1])


CFG = DecoderLMConfig(vocab_size=2048, d_model=128, n_heads=4, n_layers=2, d_ff=256, max_len=64)


@pytest.fixture
def one_blas_thread():
    """These tests are about the pool, not the BLAS: one BLAS thread keeps them fast when the cores
    are shared (several threads, or other processes, each running a multi-threaded BLAS)."""
    with threadpoolctl.threadpool_limits(1, user_api="blas"):
        yield


def _train(steps: int, keep: list | None = None, seed: int = 1):
    """A small DecoderLM whose logits (4 x 32 x 2048), cross-entropy arrays, output projection and
    its gradient are pooled (1 MiB each). Each step also runs a forward whose logits a caller may
    keep, as it may keep the loss's grads."""
    model = DecoderLM(CFG, rng=0)
    opt = Adam(model.state_dict(), lr=1e-3, weight_decay=1e-4)
    data = np.random.default_rng(seed).integers(1, 2048, (steps, 4, 33))
    drop = np.random.default_rng(seed + 1)
    for ids in data:
        logits, _ = model.forward(ids[:, :-1], rng=drop)              # (4, 32, 2048): a pooled output
        loss, grads = model.loss(ids[:, :-1], ids[:, 1:], rng=drop)
        if keep is not None:
            keep.append({k: (a, a.copy()) for k, a in {"logits": logits, **grads}.items()})
        opt.step(grads)
        del grads, logits
    return model.state_dict()


def _assert_kept(kept: list):
    """Arrays a caller kept from earlier steps were never written by later ones."""
    for step in kept:
        for k, (a, snapshot) in step.items():
            np.testing.assert_array_equal(a, snapshot, err_msg=k)


@pytest.mark.usefixtures("one_blas_thread")
def test_training_with_the_pool_equals_training_without_it():
    workspace.set_limit(0)
    without = {k: v.copy() for k, v in _train(3).items()}
    workspace.set_limit(1 << 30)
    kept: list = []
    with_pool = _train(3, keep=kept)
    assert workspace.held_bytes() > 0                       # the pool did serve this run
    for k, v in without.items():
        np.testing.assert_array_equal(with_pool[k], v, err_msg=k)
    _assert_kept(kept)


@pytest.mark.usefixtures("one_blas_thread")
def test_threads_training_at_once_keep_their_results():
    """Three threads train at once on one pool, switching every 10 us: each gets the weights it
    gets alone, and the logits and gradients each kept are never written by another thread."""
    seeds = (1, 2, 3)
    alone = {s: {k: v.copy() for k, v in _train(2, seed=s).items()} for s in seeds}
    kept: dict = {s: [] for s in seeds}
    together: dict = {}
    errors: list = []
    start = threading.Barrier(len(seeds))

    def run(s: int):
        start.wait()
        try:
            together[s] = _train(2, keep=kept[s], seed=s)
        except Exception as e:                              # reaches the test below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(s,)) for s in seeds]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors, errors
    for s in seeds:
        _assert_kept(kept[s])
        for k, v in alone[s].items():                       # another thread's array would differ by O(1)
            np.testing.assert_allclose(together[s][k], v, rtol=1e-5, atol=1e-7, err_msg=f"seed {s}: {k}")


@pytest.mark.parametrize("ending", [None, RuntimeError, KeyboardInterrupt])
def test_a_training_run_gives_the_pool_back_however_it_ends(ending, tmp_path, monkeypatch):
    monkeypatch.setattr(workspace, "MIN_BYTES", 1)          # the tiny model's arrays are pooled too
    trainer = Trainer.start(tiny_task(), dict(TINY_MODEL), tiny_config(steps=2, final_eval_n=8), tmp_path / "run")
    real, seen = trainer.task.loss, []

    def loss(*a, **kw):
        out = real(*a, **kw)
        seen.append(workspace.held_bytes())
        if ending is not None:
            raise ending("stop")
        return out
    trainer.task.loss = loss
    with pytest.raises(ending) if ending else contextlib.nullcontext():
        trainer.run(progress=False, plot=False)
    assert seen and seen[0] > 0                             # the pool served the run ...
    assert workspace.held_bytes() == 0                      # ... and holds nothing after it


# -- keep_heap: glibc's malloc keeps freed memory between steps ------------------------------------
glibc_only = pytest.mark.skipif(workspace._glibc() is None, reason="keep_heap acts on glibc's malloc only")


def _faults_of_a_step(nbytes: int = 8 << 20, arrays: int = 4) -> int:
    """Page faults of one 'step': a few fresh arrays written through, then all freed at once."""
    import resource
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    held = [np.ones(nbytes // 4, dtype=np.float32) for _ in range(arrays)]
    del held
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


@glibc_only
def test_keep_heap_lets_the_next_step_reuse_the_memory_without_faults():
    pages = 4 * (8 << 20) // 4096                           # the step's 32 MiB in 4 KiB pages
    with workspace.keep_heap():
        _faults_of_a_step()                                 # the first step grows the heap
        kept = [_faults_of_a_step() for _ in range(3)]
    # glibc's starting settings map arrays this size afresh each time, and fault them in again (a
    # quarter of the pages, measured: the kernel maps a few at each fault); inside, the freed heap is
    # reused as it is (0 faults measured)
    assert max(kept) < pages // 20, (kept, pages)


@glibc_only
def test_keep_heap_nests_and_gives_the_memory_back_at_the_outermost_exit(monkeypatch):
    calls = []
    libc = workspace._glibc()

    class Spy:
        def mallopt(self, what, value):
            calls.append(("mallopt", what, value))
            return libc.mallopt(what, value)

        def malloc_trim(self, pad):
            calls.append(("malloc_trim", pad))
            return libc.malloc_trim(pad)
    monkeypatch.setattr(workspace, "_glibc", lambda: Spy())
    assert not workspace.heap_kept()
    with workspace.keep_heap():
        with workspace.keep_heap():
            assert workspace.heap_kept()
        assert workspace.heap_kept() and ("malloc_trim", 0) not in calls   # the inner exit leaves it on
    assert not workspace.heap_kept()
    assert calls[:2] == [("mallopt", workspace._M_MMAP_THRESHOLD, 32 << 20),
                         ("mallopt", workspace._M_TRIM_THRESHOLD, 1 << 30)]
    assert calls[2:] == [("mallopt", workspace._M_TRIM_THRESHOLD, 64 << 20), ("malloc_trim", 0)]


def test_a_training_run_keeps_the_heap_during_the_steps_only(tmp_path):
    trainer = Trainer.start(tiny_task(), dict(TINY_MODEL), tiny_config(steps=2, final_eval_n=8), tmp_path / "run")
    real, seen = trainer.task.loss, []
    trainer.task.loss = lambda *a, **kw: (seen.append(workspace.heap_kept()), real(*a, **kw))[1]
    trainer.run(progress=False, plot=False)
    assert seen and all(seen) == (workspace._glibc() is not None)
    assert not workspace.heap_kept()
