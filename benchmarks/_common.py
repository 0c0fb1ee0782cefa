"""What every benchmark shares: one thread count for both sides, printed with numpy's BLAS kernel
and torch's threads; the two sides run alternately after a warm-up; medians and their ratio; and
parity checks that stop the run with exit status 1 when the two sides did not do the same work.

Threads. ``--threads N`` holds numpy's BLAS to N threads through threadpoolctl and calls
``torch.set_num_threads(N)`` where torch is a side. The default is one thread per physical core
this process may run on: torch's own default, and what OpenBLAS (numpy's BLAS, whose own default
is one thread per logical CPU) reaches on a machine without SMT; matrix products rarely gain from
a core's SMT sibling. No BLAS environment variable is set here: the limit is threadpoolctl's and
is printed, and BLAS variables the user set (e.g. OPENBLAS_CORETYPE, which picks the kernel) are
printed as they are, so that a run on a forced kernel shows it.

Users' kernel. OpenBLAS picks its kernels for the CPU it finds unless OPENBLAS_CORETYPE names
one; every benchmark's docstring runs it under ``env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE``
so that the kernel is the one a user's numpy picks.
"""
from __future__ import annotations

import os
import statistics
import sys
import time

# environment variables that change which BLAS kernel runs or how many threads it uses
BLAS_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
            "MKL_NUM_THREADS", "GOTO_NUM_THREADS")

_held = []          # the threadpoolctl limits, kept alive (and in force) for the life of the process


def usable_cpus() -> list[int]:
    """The logical CPUs this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def physical_cores() -> int:
    """Physical cores among the usable CPUs (SMT siblings counted once), from Linux's sysfs
    topology; the number of usable CPUs where that is not readable."""
    cpus = usable_cpus()
    cores = set()
    for c in cpus:
        topo = f"/sys/devices/system/cpu/cpu{c}/topology"
        try:
            with open(f"{topo}/physical_package_id") as f, open(f"{topo}/core_id") as g:
                cores.add((f.read().strip(), g.read().strip()))
        except OSError:
            return len(cpus)
    return max(1, len(cores))


def add_threads_arg(parser, default_text: str | None = None) -> None:
    """``--threads N``: BLAS threads for numpy and torch's threads, the same on both sides."""
    parser.add_argument("--threads", type=int, default=None, metavar="N", help=default_text or (
        "numpy's BLAS threads (threadpoolctl) and torch's threads, the same for both sides "
        f"(default: one per physical core, here {physical_cores()})"))


def set_threads(n: int | None, torch=None) -> int:
    """Hold numpy's BLAS to ``n`` threads (None: one per physical core) for the rest of the
    process, and torch to the same when given the torch module. Returns n."""
    from threadpoolctl import threadpool_limits

    n = physical_cores() if n is None else int(n)
    if n < 1:
        raise SystemExit(f"--threads must be >= 1, got {n}")
    _held.append(threadpool_limits(limits=n, user_api="blas"))
    if torch is not None:
        torch.set_num_threads(n)
    return n


def blas_lines() -> list[str]:
    """One line per BLAS library loaded in this process (numpy's, and scipy's own where scipy is
    loaded): kernel, version, the CPU architecture its kernels were chosen for, threads now."""
    from threadpoolctl import threadpool_info

    libs = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    if not libs:
        return ["BLAS: none found by threadpoolctl"]
    lines = []
    for i in libs:
        owner = os.path.basename(os.path.dirname(i["filepath"])).removesuffix(".libs")   # numpy.libs -> numpy
        lines.append(f"{owner} BLAS: {i.get('internal_api')} {i.get('version')}, architecture "
                     f"{i.get('architecture')}, {i.get('num_threads')} thread(s) ({i.get('threading_layer', '?')}; "
                     f"{os.path.basename(i['filepath'])})")
    return lines


def print_setup(torch=None) -> None:
    """Print the machine, the BLAS kernels and threads, and torch's threads where torch is a side."""
    import numpy as np

    env = {k: os.environ[k] for k in BLAS_ENV if k in os.environ}
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}; {len(usable_cpus())} usable CPUs, "
          f"{physical_cores()} physical cores, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for line in blas_lines():
        print(line)
    print("BLAS environment: " + (", ".join(f"{k}={v}" for k, v in env.items()) or "none set"))
    if torch is not None:
        cap = torch.backends.cpu.get_cpu_capability() if hasattr(torch.backends, "cpu") else "?"
        print(f"torch {torch.__version__}: {torch.get_num_threads()} thread(s) (torch.get_num_threads()), "
              f"{torch.get_num_interop_threads()} inter-op, CPU capability {cap}, MKL "
              f"{'yes' if torch.backends.mkl.is_available() else 'no'}")


def alternate(sides: dict, repeats: int, warmup: int = 1) -> tuple[dict, dict]:
    """Run each side ``warmup`` times untimed, then ``repeats`` rounds of A, B, A, B, ... so that
    load from other programs hits all sides alike. sides: name -> function of no arguments.
    Returns ({name: [seconds per round]}, {name: what its last call returned})."""
    if repeats < 1:
        raise SystemExit(f"need at least one timed round, got {repeats}")
    out = {}
    for _ in range(warmup):
        for name, fn in sides.items():
            out[name] = fn()
    times = {name: [] for name in sides}
    for _ in range(repeats):
        for name, fn in sides.items():
            t0 = time.perf_counter()
            out[name] = fn()
            times[name].append(time.perf_counter() - t0)
    return times, out


def medians(times: dict) -> dict:
    return {k: statistics.median(v) for k, v in times.items()}


def print_times(times: dict, unit: str = "ms", width: int = 24) -> dict:
    """One line per side: median, min and max of its rounds. Returns the medians (seconds)."""
    scale = {"s": 1.0, "ms": 1e3}[unit]
    med = medians(times)
    for k, v in times.items():
        print(f"  {k:<{width}} median {med[k] * scale:9.2f} {unit}  (min {min(v) * scale:.2f}, "
              f"max {max(v) * scale:.2f}, {len(v)} rounds)")
    return med


def print_ratio(med: dict, a: str, b: str) -> float:
    """Print and return median(a) / median(b); > 1 means a takes longer."""
    r = med[a] / med[b]
    faster, x = (b, r) if r > 1 else (a, 1 / r)
    print(f"  ratio of medians {a} / {b}: {r:.2f}  ({faster} is {x:.2f}x as fast)")
    return r


def check(label: str, diff: float, tol: float) -> None:
    """A parity check: print the difference; exit with status 1 when it exceeds ``tol`` (or is NaN)."""
    ok = diff <= tol
    d, t = (f"{diff}", f"{tol}") if isinstance(diff, int) else (f"{diff:.3e}", f"{tol:.0e}")
    print(f"parity: {label}: {d} (tolerance {t}) -> {'ok' if ok else 'MISMATCH'}", flush=True)
    if not ok:
        print(f"MISMATCH: {label}: {d} > {t}: the two sides did not do the same work", file=sys.stderr)
        raise SystemExit(1)


def sgemm_peak(n: int = 2048, repeats: int = 3, torch=None) -> float:
    """GFLOP/s of the best of ``repeats`` float32 (n, n) @ (n, n) products (2 n^3 FLOPs each) in
    numpy, or in torch when given the torch module: the machine's practical matrix-product rate
    on the threads set, the yardstick for a benchmark's achieved GFLOP/s. The operands are made
    once; one untimed product first."""
    import numpy as np

    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)   # (n, n)
    out = np.empty_like(a)                                                    # (n, n)
    if torch is None:
        def mm():
            np.matmul(a, a, out=out)
    else:
        ta, tout = torch.from_numpy(a), torch.from_numpy(out)

        def mm():
            torch.mm(ta, ta, out=tout)
    mm()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        mm()
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n ** 3 / best / 1e9
