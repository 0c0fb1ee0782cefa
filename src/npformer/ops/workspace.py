"""Reused output arrays for the large products of a training step.

A training step of the base model makes about 390 MB of fresh arrays: every weight gradient
(252 MB), the logits, their softmax and its gradient (38 MB each at 256 positions x 37,000
words). Arrays this large are mapped from the operating system by ``malloc`` and handed back on
``free``, so the next step touches new pages and the kernel zeroes them again, page by page: on
the reference machine of docs/performance.md about 0.2 s of a 0.8 s step was spent in those page faults.

``empty(shape, dtype)`` hands out an array that an earlier call made and nobody uses any more,
instead of a new one. "Nobody uses it" is read from the reference count: the pool holds one
reference, so an array with no other reference is free. An array someone still holds is never
handed out again, so results stay exactly as if every array were new; only the page faults go.

Which arrays are recycled, exactly: an array that ``empty`` handed out, once the pool's reference
is the only strong reference left to it. Anything that holds a reference keeps it: a variable, a
list, dict or cache, a view or reshape (a view holds its base), ``memoryview``, ``np.frombuffer``
and ``a.ctypes.data_as`` (they hold the array too). What does not hold it: a ``weakref`` (or a
``WeakValueDictionary``), and a raw address (``a.ctypes.data``, ``a.__array_interface__``, ``id``)
kept by Python or by C code. An array kept only that way may be handed out again and overwritten.
The results that come from the pool are ``linear_forward``'s output and ``linear_backward``'s dx and
dw (so a model's logits, the input gradients a ``backward`` returns and the weight gradients in
its grads dict) and cross-entropy's cache and gradient (ops/losses.py); Adam's scratch never
leaves ``step``. Keep any of them through an ordinary reference and no later step writes into it
(tests/ops/test_workspace.py keeps logits and gradients over later training steps, also from
several threads at once, and compares them bit for bit).

Threads: the pool's lists and counters change only under one lock, and the test "is this array
free" and the taking of it happen under that lock too, so two threads never get the same array
(tests/ops/test_workspace.py forces a thread switch between the two). Short of a weakref, a thread
can make a new reference to a pooled array only from one it already holds, so an array seen free
stays free until the pool hands it out. Only CPython with the GIL pools at all (``_ENABLED``).

Only arrays of at least ``MIN_BYTES`` are pooled (smaller ones come from malloc's own free
lists). An array nobody has asked for in the last ``MAX_AGE`` pooled requests is dropped once
free (a step of the base model makes 112 such requests), so the pool follows the work being
done and lets go of an earlier job's shapes; it also keeps at most ``limit_bytes()`` in all, past
which free arrays are dropped least recently used first. A request that would not fit even with
every free array dropped gets a plain ``np.empty`` and leaves the pool as it was.

``clear()`` lets go of everything the pool holds: the free arrays go back to malloc at once, and
the ones in use stay valid with their users, who free them as usual. A long-lived process calls
it when a job ends, since nothing else would age the pool out while no requests come: the trainer
when a run ends, however it ends (train/trainer.py), and the explorer's server when it is idle.

``keep_heap()`` covers the arrays the pool does not (the element-wise ops' outputs, anything under
``MIN_BYTES``): glibc's malloc gives the top of its heap back to the operating system whenever more
than a threshold of it is free, which happens at the end of every step when the step's activations
are freed, so the next step faults every page in again. Measured on a 2-core machine by
``benchmarks/bench_heap.py`` (fresh processes, DecoderLM steps with Adam at bench_small.py's sizes):
6,300 / 20,100 / 21,100 page faults a step at d_model 64 / 128 / 256 without it, 14 / 1 / 0 inside
it, and the steps took 0.82 / 0.87 / 0.95x the time. Inside it, malloc keeps up to 1 GiB of freed
memory at the heap's top (``M_TRIM_THRESHOLD``) and serves requests under 32 MiB from the heap
(``M_MMAP_THRESHOLD``, the most glibc's own adaptive setting would reach); on leaving the outermost
one, ``malloc_trim(0)`` gives the free memory back and the trim threshold becomes 64 MiB: the
settings glibc's own adaptive rule reaches at its most (it raises the mmap threshold to the largest
mapped block freed, up to 32 MiB, and the trim threshold to twice that), since after any ``mallopt``
that rule is off for the process and glibc's starting values (128 KiB each) would map and fault
every array over 128 KiB, each step slower than before the run. The process's peak memory is that of
one step either way: what is kept is memory the next step uses again. Elsewhere than glibc (macOS,
Windows, musl) it does nothing. The trainer holds it for a run (train/trainer.py); a hand-written
training loop can enter it too.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import math
import platform
import sys
import threading
from collections.abc import Iterator

import numpy as np
from numpy.typing import DTypeLike

MIN_BYTES = 1 << 20                       # smaller arrays: malloc reuses its own free lists
MAX_AGE = 4096                            # pooled requests after which an unasked-for free array goes
_LIMIT = 1 << 30                          # bytes the pool may hold, in use or free
# only CPython's reference count says when an array is free; free-threaded builds count per thread
_ENABLED = sys.implementation.name == "cpython" and getattr(sys, "_is_gil_enabled", lambda: True)()

_lock = threading.Lock()
_arrays: list[np.ndarray] = []            # the pool, least recently handed out first
_last: list[int] = []                      # the request count at which each was last handed out
_held = 0                                  # bytes in _arrays
_tick = 0                                  # pooled requests so far


def _refs(arrays: list, i: int) -> int:
    return sys.getrefcount(arrays[i])


# the count _refs gives for an array only its list holds, measured on this interpreter
_FREE_REFS = _refs([np.empty(0)], 0)


def _free_index(shape: tuple, dtype: np.dtype) -> int:
    """Index of a pooled array of this shape and dtype that nobody else holds, or -1."""
    for i in range(len(_arrays)):
        a = _arrays[i]
        if a.shape == shape and a.dtype == dtype:
            del a
            if _refs(_arrays, i) <= _FREE_REFS:
                return i
    return -1


def _free_bytes() -> int:
    """Bytes of the pooled arrays nobody else holds."""
    return sum(_arrays[i].nbytes for i in range(len(_arrays)) if _refs(_arrays, i) <= _FREE_REFS)


def _drop_free(until: int, older_than: int | None = None) -> None:
    """Drop arrays nobody holds, least recently used first, until at most ``until`` bytes are
    held; with ``older_than``, only those last handed out before that request count."""
    global _held
    i = 0
    while i < len(_arrays) and _held > until:
        if older_than is not None and _last[i] >= older_than:
            break                                  # the rest were handed out more recently
        if _refs(_arrays, i) <= _FREE_REFS:
            _held -= _arrays.pop(i).nbytes
            _last.pop(i)
        else:
            i += 1


def empty(shape: int | tuple[int, ...], dtype: DTypeLike) -> np.ndarray:
    """``np.empty(shape, dtype)``, C-ordered, reusing a pooled array nobody holds when one fits."""
    global _held, _tick
    dtype = np.dtype(dtype)
    shape = tuple(int(n) for n in (shape if isinstance(shape, tuple) else (shape,)))
    nbytes = math.prod(shape) * dtype.itemsize                # Python ints: no overflow, no numpy call
    if not _ENABLED or nbytes < MIN_BYTES or nbytes > _LIMIT:
        return np.empty(shape, dtype)
    with _lock:
        _tick += 1
        if _tick % 64 == 0:
            _drop_free(0, older_than=_tick - MAX_AGE)
        i = _free_index(shape, dtype)
        if i >= 0:
            a = _arrays.pop(i)
            _last.pop(i)
        else:
            if _held + nbytes > _LIMIT:
                if _held - _free_bytes() + nbytes > _LIMIT:
                    return np.empty(shape, dtype)  # the arrays in use leave no room: not pooled
                _drop_free(_LIMIT - nbytes)
            a = np.empty(shape, dtype)
            _held += nbytes
        _arrays.append(a)                          # most recently handed out last
        _last.append(_tick)
        return a


def clear() -> None:
    """Let go of every array the pool holds: the free ones are freed now, the ones in use stay
    valid with their users (and are freed when they let go). For the end of a job in a process
    that lives on; the pool fills again from the next request."""
    global _held
    with _lock:
        _arrays.clear()
        _last.clear()
        _held = 0


def held_bytes() -> int:
    """Bytes of the arrays the pool holds now, in use or free."""
    return _held


def limit_bytes() -> int:
    return _LIMIT


def set_limit(nbytes: int) -> None:
    """Let the pool hold at most ``nbytes`` (0 turns pooling off); drops free arrays over it."""
    global _LIMIT
    if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)) or nbytes < 0:
        raise ValueError(f"nbytes must be an int >= 0, got {nbytes!r}")
    with _lock:
        _LIMIT = int(nbytes)
        _drop_free(_LIMIT)


# -- keep_heap: glibc's malloc keeps freed memory between steps --------------------------------------
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3              # glibc's mallopt parameter numbers
_KEEP_TRIM, _KEEP_MMAP = 1 << 30, 32 << 20                 # inside keep_heap()
_AFTER_TRIM = 64 << 20                                     # after it: glibc's adaptive rule at its most
_heap_lock = threading.Lock()
_heap_users = 0


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """The C library, when it is glibc (whose mallopt and malloc_trim keep_heap uses), else None;
    looked up once per process."""
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt.argtypes, libc.mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
        libc.malloc_trim.argtypes, libc.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
    except (OSError, AttributeError):
        return None
    return libc


@contextlib.contextmanager
def keep_heap() -> Iterator[None]:
    """Inside, glibc's malloc keeps freed memory for the next step instead of handing it back to the
    operating system (see the module docstring). Nests, and may be entered from several threads:
    the outermost exit gives the free memory back and lowers the trim threshold to 64 MiB."""
    global _heap_users
    libc = _glibc()
    if libc is None:
        yield
        return
    with _heap_lock:
        _heap_users += 1
        if _heap_users == 1:
            libc.mallopt(_M_MMAP_THRESHOLD, _KEEP_MMAP)
            libc.mallopt(_M_TRIM_THRESHOLD, _KEEP_TRIM)
    try:
        yield
    finally:
        with _heap_lock:
            _heap_users -= 1
            if _heap_users == 0:
                libc.mallopt(_M_TRIM_THRESHOLD, _AFTER_TRIM)
                libc.malloc_trim(0)


def heap_kept() -> bool:
    """Whether a ``keep_heap()`` is active now (in any thread)."""
    return _heap_users > 0
