"""Independent pieces of work on all cores: numpy runs each element-wise operation on one
core and only its matrix products on the BLAS's threads, so an encoder that waits for
softmax, GELU and LayerNorm uses half of a two-core machine. Sentences are independent,
so here each of ``threads`` Python threads runs whole pieces of the batch (numpy releases
the GIL inside its loops), while the BLAS is held to one thread so that its threads and
ours don't compete for the same cores. The BLAS setting is restored afterwards.
"""
from __future__ import annotations

import contextlib
import os
from concurrent.futures import ThreadPoolExecutor

_controller = None


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


def default_threads() -> int:
    """As many threads as numpy's BLAS would use (its own default), at most the CPU count."""
    blas = _blas()
    n = max((lib.get("num_threads") or 1 for lib in blas.info()), default=1) if blas is not None else 1
    return max(1, min(n, os.cpu_count() or 1))


@contextlib.contextmanager
def _blas_limited(n: int):
    blas = _blas()
    if blas is None or not blas.info():
        yield
        return
    with blas.limit(limits=n):
        yield


def map_threads(fn, items: list, threads: int, one_blas_thread: bool = False):
    """Yields fn(item) for each item, in order, computed on ``threads`` threads when threads > 1,
    with the BLAS on one thread until the last result is taken. Inline (on the calling thread)
    otherwise, with the BLAS on its own threads unless ``one_blas_thread``."""
    if threads <= 1 or len(items) <= 1:
        with _blas_limited(1) if one_blas_thread else contextlib.nullcontext():
            for item in items:
                yield fn(item)
        return
    with _blas_limited(1):
        pool = ThreadPoolExecutor(max_workers=min(threads, len(items)))
        try:
            yield from pool.map(fn, items)
        finally:                            # on an error or Ctrl-C, drop the pieces not started
            pool.shutdown(wait=True, cancel_futures=True)
