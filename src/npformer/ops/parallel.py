"""Row blocks of large element-wise work: cache-sized, on the calling thread or, on request, on several.

numpy runs each ufunc on one core; only the matrix products use the BLAS's threads. Its ufuncs
release the GIL, though, so the same ufunc sequence run on separate contiguous blocks of an array's
leading rows, from a few threads, can use every core (on request: see Threads). ``map_rows(fn,
n_rows, row_size, *args)`` calls ``fn(rows, *args)`` for each block ``rows`` (a slice of the leading
axis) and returns the calls' results in block order; the ops (softmax, layer norm, dropout, ReLU,
GELU, cross-entropy, the residual sums of ``add``) and Adam call their own reference code on each
block.

Blocks depend only on the array's shape: about ``BLOCK_ELEMENTS`` elements of whole rows each,
never on the thread count. A result computed row by row is then bit for bit that of the whole
array, and one summed across rows (layer norm's weight gradient) adds the blocks' partial sums in
block order, so every thread count gives the same bits (tests/ops/test_parallel.py). Arrays of
fewer than ``MIN_ELEMENTS`` take the reference path as it is: small models pay nothing.

Threads: ``threads()`` is the thread-local setting made by ``limit(n)``, else 1: by default the
blocks run on the calling thread alone, for the cache (a multi-pass op on a block that stays in L2),
and more threads are an explicit choice. Why not every core by default: measured on a 2-core
machine (AVX-512, OpenBLAS on 2 threads) by ``benchmarks/bench_parallel.py``, which times both
settings side by side, each op called after a product as in a step, two threads were slower or
level for every op (GELU forward 1.11x the one thread's time on a (2048, 512) array, the residual
sum 1.10x on attention-sized arrays, softmax 1.01-1.02x) and for whole DecoderLM training steps
(1.04-1.07x at d_model 64, 128 and 256; docs/performance.md). Two causes: numpy's OpenBLAS leaves its worker threads
spinning on the other cores for a while after each product, so a helper thread there shares its
core with one; and each of an op's ufunc calls hands the GIL between the threads, which costs a
thread wake-up (a median 8 us, a 90th percentile of 96 us there) against a few microseconds of
arithmetic per call. The compiled twins (``ops/kernels.py``) follow the same setting, and lose far more
on 2 threads: whole steps 2.1 to 6.8x their one-thread time on a 2-core AMD EPYC (numba's threads wait on
OpenBLAS's spinning workers; docs/DESIGN.md). Run it on another machine to see whether ``limit(n)`` pays there.

With ``limit(n)``, n > 1: the calling thread takes blocks too; helper threads are started on first
use, and wait on a queue between jobs, blocked, never spinning. Blocks are handed out one at a
time, so a helper that a busy machine wakes late finds the work done and takes nothing. A block's
exception stops the job and is raised in the caller. A call from inside a block (nested) runs inline.
"""
from __future__ import annotations

import contextlib
import os
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

BLOCK_ELEMENTS = 1 << 16      # per block: 256 KiB of float32, so a block's passes stay in L2
MIN_ELEMENTS = 1 << 17        # below this (two blocks) an array takes the reference path
ONE_THREAD_MIN = 1 << 19      # 2 MiB of float32: on one thread, multi-pass ops gain from blocks from here

_local = threading.local()    # .threads: limit(n)'s setting; .inside: running a block now
_lock = threading.Lock()
_helpers: list[queue.SimpleQueue] = []   # one queue per helper thread


def threads() -> int:
    """Threads ``map_rows`` uses on this thread now: ``limit(n)``'s n, else 1 (see the module docstring)."""
    n = getattr(_local, "threads", None)
    return 1 if n is None else n


@contextlib.contextmanager
def limit(n: int | None) -> Iterator[None]:
    """Inside, ``map_rows`` called from this thread uses at most ``n`` threads (None: the default, 1)."""
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ValueError(f"threads must be an int >= 1 or None, got {n!r}")
    old = getattr(_local, "threads", None)
    _local.threads = n
    try:
        yield
    finally:
        _local.threads = old


def large(size: int) -> bool:
    """Whether an array of ``size`` elements goes through row blocks (the fast twin)."""
    return size >= MIN_ELEMENTS


def blocked(x: Any, *others: Any, one_thread_from: int | None = None) -> bool:
    """Whether an op on ``x`` (and arrays of its shape ``others``; None entries are skipped) takes
    row blocks: ``x`` large, and all C-contiguous so that rows are plain (R, N) views.

    one_thread_from: on one thread, the size from which blocks still pay (several passes over an
    array larger than L2 run faster a cache-sized block at a time); None: never (blocks on one
    thread only add calls). Ops whose blocked result differs from the reference's in its last bits
    (dropout's streams, layer norm's cross-row sums) pass 0: blocked by size alone, whatever the
    thread count, so that the thread count never changes a result."""
    if not (large(x.size) and x.ndim > 0 and x.shape[-1] > 0
            and all(a is None or (a.flags.c_contiguous and a.shape == x.shape) for a in (x, *others))):
        return False
    return threads() > 1 or (one_thread_from is not None and x.size >= one_thread_from)


@contextlib.contextmanager
def reference_only() -> Iterator[None]:
    """Inside, no array is large: every op takes its reference path (for tests and benchmarks).
    Process-wide: not for use while other threads compute."""
    global MIN_ELEMENTS
    old = MIN_ELEMENTS
    MIN_ELEMENTS = 1 << 62
    try:
        yield
    finally:
        MIN_ELEMENTS = old


def rows_per_block(row_size: int) -> int:
    """Whole rows per block: about BLOCK_ELEMENTS elements, at least one row."""
    return max(1, BLOCK_ELEMENTS // max(1, row_size))


class _Job:
    """One ``map_rows`` call: blocks handed out one at a time under ``lock``."""

    def __init__(self, fn: Callable[..., Any], slices: list[slice], args: tuple) -> None:
        self.fn, self.slices, self.args = fn, slices, args
        self.results: list[Any] = [None] * len(slices)
        self.next = 0                 # the next block to hand out
        self.running = 0              # blocks taken and not finished
        self.error: BaseException | None = None
        self.lock = threading.Lock()
        self.idle = threading.Condition(self.lock)

    def work(self) -> None:
        """Take blocks until none is left (or one failed)."""
        _local.inside = True
        try:
            while True:
                with self.lock:
                    i = self.next
                    if i >= len(self.slices) or self.error is not None:
                        return
                    self.next += 1
                    self.running += 1
                try:
                    r = self.fn(self.slices[i], *self.args)
                except BaseException as e:    # noqa: B036 - handed to the caller, which raises it
                    with self.lock:
                        self.error = self.error or e
                        self.running -= 1
                        self.idle.notify_all()
                    return
                with self.lock:
                    self.results[i] = r
                    self.running -= 1
                    if self.running == 0:
                        self.idle.notify_all()
        finally:
            _local.inside = False

    def wait(self) -> list[Any]:
        """Block until no block is running (the caller has taken the rest); results or the error."""
        with self.lock:
            while self.running:
                self.idle.wait()
            error = self.error
            # no block can start now: let go of the arrays, which a helper that has not yet
            # reached this job would otherwise hold (ops/workspace.py reuses only arrays nobody holds)
            self.fn, self.args = _nothing, ()
        if error is not None:
            raise error
        return self.results


def _nothing(*_: Any) -> None:
    return None


def _helper(q: queue.SimpleQueue) -> None:
    while True:
        job = q.get()                 # blocks while idle
        job.work()
        del job                       # hold nothing while idle


def _forget_helpers() -> None:
    """In a forked child: the parent's helper threads do not exist here; start new ones when needed."""
    global _lock
    _lock = threading.Lock()
    _helpers.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_helpers)


def _ensure_helpers(n: int) -> None:
    with _lock:
        while len(_helpers) < n:
            q: queue.SimpleQueue = queue.SimpleQueue()
            threading.Thread(target=_helper, args=(q,), name=f"npformer-rows-{len(_helpers)}", daemon=True).start()
            _helpers.append(q)


def map_rows(fn: Callable[..., Any], n_rows: int, row_size: int, *args: Any) -> list[Any]:
    """[fn(rows, *args) for rows in the row blocks of range(n_rows)], the blocks run on ``threads()``
    threads (the caller's among them). ``fn`` writes its block's rows of any output through ``out=``
    and may return a value (a partial sum); it must touch no rows outside its block."""
    step = rows_per_block(row_size)
    slices = [slice(i, min(i + step, n_rows)) for i in range(0, n_rows, step)]
    k = min(threads(), len(slices))
    if k <= 1 or getattr(_local, "inside", False):
        return [fn(s, *args) for s in slices]
    job = _Job(fn, slices, args)
    _ensure_helpers(k - 1)
    for q in _helpers[: k - 1]:
        q.put(job)
    job.work()
    return job.wait()


def add(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """a + b for two arrays of one shape and dtype (a residual sum), on row blocks when large:
    the same bits as ``np.add(a, b, out=out)``, which it is otherwise."""
    if a.shape == b.shape and a.dtype == b.dtype and blocked(a, b, out):
        out = np.empty_like(a) if out is None else out                  # (..., N)
        n = a.shape[-1]
        map_rows(_add_block, a.size // n, n, a.reshape(-1, n), b.reshape(-1, n), out.reshape(-1, n))
        return out
    return np.add(a, b, out=out)


def _add_block(rows: slice, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    np.add(a[rows], b[rows], out=out[rows])
