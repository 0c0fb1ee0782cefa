"""The trainer leaves the row blocks of element-wise work (ops/parallel.py) as the caller set them:
one thread by default, whatever ``blas_threads`` and the BLAS's own thread count (more threads
made the steps slower, ops/parallel.py's docstring), and a caller's ``parallel.limit`` kept."""
from __future__ import annotations

from npformer.ops import parallel


def _threads_seen(t) -> list[int]:
    seen: list[int] = []
    real = t.task.train_batch
    t.task.train_batch = lambda rng, size: (seen.append(parallel.threads()), real(rng, size))[1]
    t.run(progress=False, plot=False)
    return seen


def test_the_row_blocks_run_on_one_thread_whatever_blas_threads(start_tiny):
    for n in (None, 1, 3):
        seen = _threads_seen(start_tiny(f"threads{n}", steps=2, blas_threads=n))
        assert seen and set(seen) == {1}


def test_a_callers_limit_holds_through_the_run(start_tiny):
    with parallel.limit(2):
        seen = _threads_seen(start_tiny("caller", steps=2, blas_threads=3))
        assert parallel.threads() == 2
    assert seen and set(seen) == {2}
    assert parallel.threads() == 1
