"""The trainer holds the row blocks of element-wise work (ops/parallel.py) to its ``blas_threads``
during a run, on the thread that trains, and gives the setting back afterwards."""
from __future__ import annotations

from npformer.ops import parallel


def test_the_row_blocks_follow_blas_threads_during_the_run_only(start_tiny):
    with parallel.limit(2):                                       # the caller's own setting
        for n in (1, 3):
            t = start_tiny(f"threads{n}", steps=2, blas_threads=n)
            seen = []
            real = t.task.train_batch
            t.task.train_batch = lambda rng, size, real=real, seen=seen: (seen.append(parallel.threads()),
                                                                          real(rng, size))[1]
            t.run(progress=False, plot=False)
            assert seen and set(seen) == {n}
            assert parallel.threads() == 2                        # given back


def test_without_blas_threads_the_row_blocks_follow_the_blas(start_tiny, monkeypatch):
    monkeypatch.setattr(parallel, "_blas_threads", lambda: 1)
    t = start_tiny("default", steps=2, blas_threads=None)
    seen = []
    real = t.task.train_batch
    t.task.train_batch = lambda rng, size: (seen.append(parallel.threads()), real(rng, size))[1]
    t.run(progress=False, plot=False)
    assert seen and set(seen) == {1}
