"""Independent pieces of work on all cores: numpy runs each element-wise operation on one
core and only its matrix products on the BLAS's threads, so an encoder that waits for
softmax, GELU and LayerNorm uses half of a two-core machine. Sentences are independent,
so here each of ``threads`` Python threads runs whole pieces of the batch (numpy releases
the GIL inside its loops), while the BLAS is held to one thread so that its threads and
ours don't compete for the same cores. The BLAS setting is restored afterwards.

The BLAS limit is one setting for the whole process, so calls that overlap (two user threads
encoding at once) share one limit: the first to start sets it, the last to end restores what was
there before, under one lock. Each call saving and restoring its own would race: the second would
save the first's 1 and put it back last, leaving the BLAS on one thread for good. The first and
the last may be different threads; threadpoolctl (3.8 on) lets only one thread at a time set
OpenBLAS's process-wide limit, so each hands that control back once it has set or restored.
"""
from __future__ import annotations

import contextlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from functools import partial

from ..ops import parallel as rows

_controller = None
_lock = threading.Lock()
_limiter = None                     # threadpoolctl's limiter while any call holds the BLAS to one thread
_users = 0                          # how many calls hold it now
_outside = 1                        # the BLAS's own thread count, read before the first of them limited it


def _blas():
    """threadpoolctl's view of the BLAS libraries loaded (numpy's), or None without threadpoolctl."""
    global _controller
    if _controller is None:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:
            return None
        _controller = ThreadpoolController()
    return _controller.select(user_api="blas")


def _release_control() -> None:
    """Give back threadpoolctl's control of OpenBLAS if this thread holds it (threadpoolctl >= 3.8:
    only the thread that set a limit last may set the next, until it gives control back)."""
    try:
        from threadpoolctl import OpenBLASController
    except ImportError:
        return
    getattr(OpenBLASController, "clear_controlling_thread", lambda: None)()


def _blas_threads(blas) -> int:
    return max((lib.get("num_threads") or 1 for lib in blas.info()), default=1) if blas is not None else 1


def default_threads() -> int:
    """As many threads as numpy's BLAS would use (its own default), at most the CPU count; while
    other calls hold the BLAS to one thread, what it used before they did."""
    with _lock:
        n = _outside if _users else _blas_threads(_blas())
    return max(1, min(n, os.cpu_count() or 1))


@contextlib.contextmanager
def _one_blas_thread():
    """The BLAS on one thread inside; the first of overlapping calls sets it, the last restores it."""
    global _limiter, _users, _outside
    with _lock:
        if _users == 0:
            blas = _blas()
            if blas is not None and blas.info():
                _outside = _blas_threads(blas)
                _limiter = blas.limit(limits=1)
                _release_control()
        _users += 1
    try:
        yield
    finally:
        with _lock:
            _users -= 1
            if _users == 0 and _limiter is not None:
                _limiter.restore_original_limits()
                _release_control()
                _limiter = None


def _on_one_thread(fn, item):
    """fn(item) with the row blocks of element-wise work (ops/parallel.py) on this thread alone."""
    with rows.limit(1):
        return fn(item)


def map_threads(fn, items: list, threads: int, one_blas_thread: bool = False):
    """Yields fn(item) for each item, in order, computed on ``threads`` threads when threads > 1,
    with the BLAS on one thread until the last result is taken. Inline (on the calling thread)
    otherwise, with the BLAS on its own threads unless ``one_blas_thread``."""
    if threads <= 1 or len(items) <= 1:
        with _one_blas_thread() if one_blas_thread else contextlib.nullcontext():
            for item in items:
                yield _on_one_thread(fn, item) if one_blas_thread else fn(item)
        return
    with _one_blas_thread():
        pool = ThreadPoolExecutor(max_workers=min(threads, len(items)))
        try:
            yield from pool.map(partial(_on_one_thread, fn), items)
        finally:                            # on an error or Ctrl-C, drop the pieces not started
            pool.shutdown(wait=True, cancel_futures=True)
