"""Which implementation an op runs: its NumPy reference, or its compiled twin (``ops/fused/``).

Every op that has a twin keeps its NumPy reference as the code a learner reads and the
specification the twin is tested against (tests/ops/test_twins.py). The choice:

- ``NPFORMER_KERNELS``: ``auto`` (the default: the twins that pay, ``PAYS``, in its dtypes, on arrays of 128K
  elements or more, when numba imports),
  ``numba`` (every twin; an error if numba is missing) or ``numpy`` (the references only);
- ``use_kernels(mode)`` sets the same in code, for the whole process, and restores the previous
  setting when used as a context manager (``with ops.use_kernels("numpy"): ...``);
- ``kernels_used()`` maps each op to the implementation its latest call ran (``"numba"`` or
  ``"numpy"``); ``clear_used()`` forgets them.

numba is imported on a twin's first call, never by ``import npformer`` (``pip install "npformer[fast]"``
brings it). Each kernel compiles on first use with numba's cache on disk (``cache=True``); where no
cache directory is writable it compiles without one and warns once.

Threads: a kernel runs its ``prange`` loops on ``parallel.threads()`` threads (``parallel.limit(n)``;
1 by default). Two compilations exist per kernel, made when first needed: a serial one, used on one
thread, from any thread other than the main one unless numba's threading layer is thread-safe
(``tbb`` or ``omp``; pip's numba may have only ``workqueue``, which a second thread entering a
parallel region at the same time can bring down), and in a forked child (a parallel pool
started in the parent does not survive a fork); and a parallel one otherwise. The kernels split
their work by the array's shape alone and sum across rows in a fixed order, so both give the same bits.
"""
from __future__ import annotations

import os
import threading
import types
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from . import parallel

MODES = ("auto", "numba", "numpy")
ENV = "NPFORMER_KERNELS"
SAFE_LAYERS = ("tbb", "omp")          # numba's thread-safe threading layers
FLOATS = (np.dtype(np.float32), np.dtype(np.float64))   # the dtypes the twins are compiled for

_override: str | None = None          # use_kernels' setting; None: the environment's
_used: dict[str, str] = {}
_calls: dict[tuple[str, str], int] = {}   # (op, implementation) -> calls since clear_used()
_numba: Any = None                    # the numba module once imported
_numba_tried = False
_lock = threading.Lock()
_forked = False                       # in a forked child: serial kernels only
_cache_warned = False


def check_mode(mode: object, where: str = "kernels") -> str:
    """``mode`` if it is one of MODES, else a ValueError naming ``where`` and the choices."""
    if mode not in MODES:
        raise ValueError(f"{where} must be one of {', '.join(MODES)}, got {mode!r}")
    return str(mode)


def mode() -> str:
    """The kernel setting now: ``use_kernels``' if set, else ``NPFORMER_KERNELS`` (default auto)."""
    if _override is not None:
        return _override
    return check_mode(os.environ.get(ENV, "auto") or "auto", ENV)


class use_kernels:
    """``use_kernels("numba" | "numpy" | "auto")`` sets the kernels for the process; as a context
    manager it restores the previous setting on leaving. ``None`` returns to ``NPFORMER_KERNELS``."""

    def __init__(self, mode: str | None) -> None:
        global _override
        if mode is not None:
            check_mode(mode)
            if mode == "numba":
                _require_numba()
        self._old, _override = _override, mode

    def __enter__(self) -> use_kernels:
        return self

    def __exit__(self, *exc: object) -> None:
        global _override
        _override = self._old


def numba_module() -> Any:
    """numba, imported on first use; None where it is not installed."""
    global _numba, _numba_tried
    if not _numba_tried:
        with _lock:
            if not _numba_tried:
                try:
                    import numba
                    _numba = numba
                except ImportError:
                    _numba = None
                _numba_tried = True
    return _numba


def _require_numba() -> Any:
    nb = numba_module()
    if nb is None:
        raise ValueError(f"{ENV}=numba needs numba, which is not installed: pip install 'npformer[fast]'")
    return nb


# The twins that auto runs, with the dtypes they run for: those whose paired benchmark
# (benchmarks/bench_twins.py, a (2048, 512) float32 step's arrays, one thread; Adam also at 20 M and 63 M
# parameters, benchmarks/bench_adam.py) gave a median ratio twin / reference of 0.9 or less (docs/DESIGN.md
# has the figures and those not kept). The float32-only twins evaluate exp and tanh in float32 with
# ``fused/_simd.py``, which vectorizes; their float64 compilations call the C library's exp, erfc and
# tanh one element at a time and are not measured to pay. ``numba`` runs every twin in both dtypes.
_BOTH = frozenset(FLOATS)
_F32 = frozenset({np.dtype(np.float32)})
PAYS: dict[str, frozenset] = {
    "embedding_backward": _BOTH, "layernorm_forward": _BOTH, "layernorm_backward": _BOTH, "adam": _BOTH,
    "dropout_forward": _BOTH, "dropout_add_forward": _BOTH,
    "softmax_forward": _F32, "softmax_backward": _F32,
    "gelu_forward": _F32, "gelu_backward": _F32, "gelu_tanh_forward": _F32, "gelu_tanh_backward": _F32,
    "cross_entropy_forward": _F32, "cross_entropy_backward": _F32,
    "gelu_inference_": _F32, "layernorm_inference": _BOTH}


# auto takes a twin for arrays of this many elements or more (ops/parallel.py's MIN_ELEMENTS, 128K): the
# sizes bench_twins measured. Small models gain nothing from a twin, and a process that never meets a
# large array never imports numba nor loads a kernel (about 1 s).
AUTO_MIN_ELEMENTS = 1 << 17
# Twins auto also takes below AUTO_MIN_ELEMENTS once numba is loaded in the process (an array of that size
# has taken a twin): Adam's, one compiled call per parameter against the reference's ten ufunc calls and two
# scratch arrays, with the same bits (a small model's parameters, none large, took well under half the
# reference's time in a throwaway timing on the AMD EPYC, 2026-12-06). A process of small arrays alone
# still never imports numba.
ANY_SIZE_ONCE_LOADED = frozenset({"adam"})
# Not in PAYS (docs/DESIGN.md lists them with their ratios): the float64 softmax, GELU and cross-entropy.
# ``numba`` still runs them; their tests still hold them.


def twins(op: str, size: int, dtype: Any = None) -> bool:
    """Whether ``op`` on an array of ``size`` elements (of ``dtype``, when given) runs its compiled twin
    now: on ``numba`` every twin; on ``auto`` those in PAYS for arrays of AUTO_MIN_ELEMENTS or more (those in
    ANY_SIZE_ONCE_LOADED at any size once numba is loaded) in a dtype PAYS names for them, when numba
    imports; on ``numpy`` none."""
    m = mode()
    if m == "numpy":
        return False
    if m == "numba":
        _require_numba()
        return True
    dtypes = PAYS.get(op)
    large = size >= AUTO_MIN_ELEMENTS or (op in ANY_SIZE_ONCE_LOADED and _numba is not None)
    return (dtypes is not None and large and (dtype is None or np.dtype(dtype) in dtypes)
            and numba_module() is not None)


def record(op: str, impl: str) -> None:
    """Note that ``op`` ran ``impl`` (``"numba"`` or ``"numpy"``)."""
    _used[op] = impl
    _calls[op, impl] = _calls.get((op, impl), 0) + 1


def kernels_used() -> dict[str, str]:
    """op name -> the implementation its latest call ran, ``"numba"`` or ``"numpy"``."""
    return dict(_used)


def clear_used() -> None:
    _used.clear()
    _calls.clear()


def summary(counts: bool = False) -> str:
    """One line: the ops that ran on each implementation since ``clear_used()`` (for ``npformer info`` and
    the benchmarks); an op that ran on both is named under both (a twin takes large arrays only, on
    ``auto``). counts: each op's number of calls beside it."""
    by: dict[str, list[str]] = {}
    for (op, impl), n in sorted(_calls.items()):
        by.setdefault(impl, []).append(f"{op} ({n:,})" if counts else op)
    return "; ".join(f"{impl}: {', '.join(ops)}" for impl, ops in sorted(by.items())) or "no op has run yet"


def describe() -> dict[str, Any]:
    """The setting, numba's version, its threading layer and thread count, and the twins the setting runs
    (auto: PAYS, on arrays of AUTO_MIN_ELEMENTS or more); numba is not imported when the setting is numpy."""
    m = mode()
    out: dict[str, Any] = {"kernels": m, "numba": None, "threading_layer": None, "numba_threads": None,
                           "twins": []}
    nb = numba_module() if m != "numpy" else None
    if nb is not None:
        out["numba"] = nb.__version__
        out["threading_layer"] = threading_layer()
        out["numba_threads"] = parallel.threads()
        out["twins"] = sorted(_described(op) for op in PAYS) if m == "auto" else "all"
    return out


def _described(op: str) -> str:
    """An auto twin's name with what limits it: float32 only, any size once numba is loaded."""
    notes = ([] if PAYS[op] == _BOTH else ["float32"]) + (["any size once numba is loaded"]
                                                          if op in ANY_SIZE_ONCE_LOADED else [])
    return f"{op} ({', '.join(notes)})" if notes else op


def threading_layer() -> str:
    """numba's threading layer once a parallel kernel has run, else what it would choose."""
    nb = numba_module()
    if nb is None:
        return "none"
    try:
        return str(nb.threading_layer())
    except ValueError:        # no parallel region has run yet
        return f"not started (config: {nb.config.THREADING_LAYER})"


class TwinCache(tuple):
    """A cache made by a twin whose backward needs its own twin (the reference's cache differs)."""

    __slots__ = ()


def _variant(fn: Callable[..., Any], suffix: str) -> Callable[..., Any]:
    """A copy of fn under its own qualified name, so that its two compilations have their own cache files."""
    g = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__ + suffix, fn.__defaults__, fn.__closure__)
    g.__qualname__ = fn.__qualname__ + suffix
    g.__module__ = fn.__module__
    return g


def _compile(fn: Callable[..., Any], parallel_: bool) -> Any:
    """fn compiled (nogil: a kernel touches no Python object, so the caller's other Python threads, such
    as SentenceEncoder.encode's, run on while it works)."""
    global _cache_warned
    nb = _require_numba()
    py = _variant(fn, "__parallel" if parallel_ else "__serial")
    try:
        return nb.njit(cache=True, parallel=parallel_, error_model="numpy", nogil=True)(py)
    except RuntimeError as e:                           # no writable cache directory
        if not _cache_warned:
            _cache_warned = True
            warnings.warn(f"npformer: numba kernels compile without a cache ({e}); set NUMBA_CACHE_DIR to a "
                          "writable directory to keep them between runs", RuntimeWarning, stacklevel=3)
        return nb.njit(cache=False, parallel=parallel_, error_model="numpy", nogil=True)(py)


class Kernel:
    """A twin's kernel: ``fn`` (with ``prange`` loops) compiled serial or parallel when first called."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self._serial: Any = None
        self._parallel: Any = None

    def __call__(self, *args: Any) -> Any:
        n = parallel.threads()
        nb = _require_numba()                       # imported here too when a kernel is called directly
        if n > 1 and not _forked and _parallel_allowed(nb):
            if self._parallel is None:
                self._parallel = _compile(self.fn, True)
            nb.set_num_threads(min(n, nb.config.NUMBA_NUM_THREADS))
            return self._parallel(*args)
        if self._serial is None:
            self._serial = _compile(self.fn, False)
        return self._serial(*args)


def _parallel_allowed(nb: Any) -> bool:
    """Parallel kernels from this thread: the main thread, or any thread under a thread-safe layer."""
    if threading.current_thread() is threading.main_thread():
        return True
    try:
        return str(nb.threading_layer()) in SAFE_LAYERS
    except ValueError:
        return False


def _after_fork() -> None:
    global _forked
    _forked = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
