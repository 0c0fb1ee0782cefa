"""What every benchmark shares: one thread count for both sides; a header describing the machine
(cores, L3, numpy's BLAS kernel and threads, torch's threads, the OPENBLAS_* variables, the load
average at the start and the end); paired timing with the order alternating; and parity checks
that stop the run with exit status 1 when the sides did not do the same work.

Threads. ``--threads N`` holds numpy's BLAS to N threads through threadpoolctl and calls
``torch.set_num_threads(N)`` where torch is a side. The default is one thread per physical core
this process may run on: torch's own default, and what OpenBLAS (numpy's BLAS, whose own default
is one thread per logical CPU) reaches on a machine without SMT; matrix products rarely gain from
a core's SMT sibling. No BLAS environment variable is set here: the limit is threadpoolctl's and
is printed.

Users' kernel. OpenBLAS picks its kernels for the CPU it finds unless OPENBLAS_CORETYPE names
one; users' machines set no OPENBLAS_* variable, so every benchmark's docstring runs it under
``env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE``, and the header warns loudly when one is set.

Pairs (``paired``). After a warm-up, each round runs one step of every side back to back, the
order rotated from one round to the next (two sides: A B, B A, A B, ...), so that threads a side
leaves spinning, warm caches and the machine's drift hit every side alike. Reported: each side's
median time, the median of the per-round ratios (ours / the other; with more sides, ours / the
fastest of the others in that round) with its interquartile range, and the median ratio for each
side running first, so that an order effect shows. The verdict: "faster" only when the upper
quartile of the ratios is below 1, "slower" only when the lower quartile is above 1, "level"
otherwise.
"""
from __future__ import annotations

import atexit
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

# environment variables that change which BLAS kernel runs or how many threads it uses
BLAS_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
            "MKL_NUM_THREADS", "GOTO_NUM_THREADS")

MIN_PAIRS = 15      # a claim rests on at least this many pairs after the warm-up
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


def logical_cpus() -> int:
    """Logical CPUs of the machine (all of them, not only those this process may use)."""
    return os.cpu_count() or len(usable_cpus())


def machine_physical_cores() -> int | None:
    """Physical cores of the whole machine (SMT siblings once), from sysfs; None where unreadable."""
    cores = set()
    for c in range(logical_cpus()):
        topo = f"/sys/devices/system/cpu/cpu{c}/topology"
        try:
            with open(f"{topo}/physical_package_id") as f, open(f"{topo}/core_id") as g:
                cores.add((f.read().strip(), g.read().strip()))
        except OSError:
            return None
    return len(cores) or None


def _l3_sysfs() -> tuple[str, str] | None:
    """(size as sysfs writes it, e.g. "32768K"; the CPUs sharing it) of cpu0's level-3 cache."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for entry in sorted(os.listdir(base)):
            if not entry.startswith("index"):
                continue
            with open(f"{base}/{entry}/level") as f:
                if f.read().strip() != "3":
                    continue
            with open(f"{base}/{entry}/size") as f:
                size = f.read().strip()
            try:
                with open(f"{base}/{entry}/shared_cpu_list") as f:
                    return size, f.read().strip()
            except OSError:
                return size, "?"
    except OSError:
        pass
    return None


def l3_bytes() -> int | None:
    """cpu0's L3 in bytes, from sysfs; None where unknown."""
    found = _l3_sysfs()
    if not found:
        return None
    size = found[0].upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1:], 1)
    digits = size.rstrip("KMG")
    return int(digits) * scale if digits.isdigit() else None


def l3_size() -> str:
    """The L3 cache as Linux reports it: sysfs's cpu0 cache of level 3, else lscpu's "L3 cache" line."""
    found, n = _l3_sysfs(), l3_bytes()
    if found:
        size = f"{n / (1 << 20):.0f} MiB" if n else found[0]
        return f"{size} (shared by CPUs {found[1]})"
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    for line in out.splitlines():
        if line.startswith("L3 cache:"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform
    return platform.processor() or "unknown CPU"


def blas_env_set() -> dict:
    """The OPENBLAS_* variables and the BLAS thread variables that are set in this process."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith("OPENBLAS_") or k in BLAS_ENV}


def load_text() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def machine_block(torch=None, load_start: str | None = None, load_end: str | None = None) -> list[str]:
    """The machine header, a few lines to paste into the docs: cores, L3, numpy's BLAS kernel and
    threads, torch's threads, the BLAS variables set, and the load average (1, 5, 15 minutes)."""
    import numpy as np

    phys = machine_physical_cores()
    usable = len(usable_cpus())
    lines = [f"machine: {cpu_model()}; {phys if phys else '?'} physical cores, {logical_cpus()} logical CPUs"
             + ("" if usable == logical_cpus() else f" ({usable} usable by this process)") + f"; L3 {l3_size()}",
             f"python {sys.version.split()[0]}, numpy {np.__version__}"]
    lines += blas_lines()
    torch = torch if torch is not None else sys.modules.get("torch")
    if torch is not None:
        cap = torch.backends.cpu.get_cpu_capability() if hasattr(torch.backends, "cpu") else "?"
        lines.append(f"torch {torch.__version__}: {torch.get_num_threads()} thread(s), "
                     f"{torch.get_num_interop_threads()} inter-op, CPU capability {cap}")
    env = blas_env_set()
    forced = any(k.startswith("OPENBLAS_") for k in env)
    lines.append("BLAS variables: " + (", ".join(f"{k}={v}" for k, v in env.items()) or
                                       "none set (OPENBLAS_*, OMP/MKL/GOTO_NUM_THREADS), as on users' machines")
                 + (" -- WARNING: users' machines set no OPENBLAS_* variable" if forced else ""))
    lines.append(kernels_line())
    load = f"load average (1, 5, 15 min): {load_start or load_text()} at the start"
    lines.append(load + (f", {load_end} at the end" if load_end is not None else ""))
    return lines


def kernels_line() -> str:
    """The ops' kernels (NPFORMER_KERNELS, ops/kernels.py): the setting, which ran so far, numba's version,
    threading layer and threads."""
    from npformer.ops import kernels
    d = kernels.describe()
    numba = (f"numba {d['numba']}, threading layer {d['threading_layer']}, {d['numba_threads']} thread(s)"
             if d["numba"] else "numba not in use")
    return f"kernels: {d['kernels']} ({kernels.summary()}); {numba}"


_setup: dict = {}


def print_setup(torch=None) -> None:
    """Print the machine header now (load average at the start), and again when the process ends
    with the load average at the end, as one block to paste into the docs. Warn loudly, on stdout
    and stderr, when an OPENBLAS_* variable is set: users' machines don't set them."""
    _setup["torch"] = torch
    if "load" not in _setup:
        _setup["load"] = load_text()
        atexit.register(_print_setup_end)
    print("== machine ==", *machine_block(torch, _setup["load"]), "==", sep="\n", flush=True)
    forced = {k: v for k, v in blas_env_set().items() if k.startswith("OPENBLAS_")}
    if forced:
        msg = (f"WARNING: {', '.join(f'{k}={v}' for k, v in forced.items())} is set: users' machines don't set "
               "OPENBLAS_* variables, so these timings are not what users get. Rerun under "
               "env -u " + " -u ".join(forced))
        print("!" * 100, msg, "!" * 100, sep="\n", flush=True)
        print(msg, file=sys.stderr, flush=True)


def _print_setup_end() -> None:
    try:
        lines = machine_block(_setup.get("torch"), _setup.get("load"), load_text())
    except Exception as e:      # the interpreter is going down; the header must not hide the run's own error
        lines = [f"(machine header unavailable at exit: {e})"]
    print("\n== machine, for the docs (load at the start and the end of the run) ==", *lines, "==",
          sep="\n", flush=True)


def alternate(sides: dict, repeats: int, warmup: int = 1) -> tuple[dict, dict]:
    """Run ``warmup`` untimed rounds, then ``repeats`` timed ones; every round runs each side once, in an
    order rotated by one from the round before (two sides: A B, B A, A B, ...), so that neither the load
    from other programs nor the state one side leaves behind favours a side. sides: name -> function of no
    arguments. Returns ({name: [seconds per round]}, {name: what its last call returned}). Unlike
    ``paired`` it takes no ratios and no rests: bench_long_attention's in-process times use it."""
    if repeats < 1:
        raise SystemExit(f"need at least one timed round, got {repeats}")
    names = tuple(sides)
    out = {}
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(warmup + repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:
            t0 = time.perf_counter()
            out[name] = sides[name]()
            if r >= warmup:
                times[name].append(time.perf_counter() - t0)
    return times, out


def quartiles(xs: list[float]) -> tuple[float, float, float]:
    """(lower quartile, median, upper quartile), linear interpolation between order statistics
    (numpy.percentile's default): [1, 2, 3, 4, 5] -> (2, 3, 4)."""
    if not xs:
        raise ValueError("quartiles of no values")
    v = sorted(xs)

    def at(p):
        pos = p * (len(v) - 1)
        lo = int(pos)
        hi = min(lo + 1, len(v) - 1)
        return v[lo] + (v[hi] - v[lo]) * (pos - lo)
    return at(0.25), at(0.5), at(0.75)


def verdict(ratios: list[float]) -> str:
    """'faster' when the upper quartile of the ratios (ours / other) is below 1, 'slower' when the
    lower quartile is above 1, 'level' otherwise."""
    q1, _, q3 = quartiles(ratios)
    return "faster" if q3 < 1.0 else "slower" if q1 > 1.0 else "level"


@dataclass
class Paired:
    """What ``paired`` measured. times: side -> seconds per round; first: who ran first in each
    round; orders: each round's order; out: what each side's last call returned."""
    names: tuple[str, ...]
    ours: str
    times: dict = field(default_factory=dict)
    first: list = field(default_factory=list)
    orders: list = field(default_factory=list)
    out: dict = field(default_factory=dict)

    @property
    def others(self) -> tuple[str, ...]:
        return tuple(n for n in self.names if n != self.ours)

    @property
    def ratios(self) -> list[float]:
        """Per round: ours / the fastest of the others in that round."""
        return [self.times[self.ours][i] / min(self.times[o][i] for o in self.others)
                for i in range(len(self.first))]

    def medians(self) -> dict:
        return {k: statistics.median(v) for k, v in self.times.items()}

    def by_first(self) -> dict:
        """Side running first -> the median ratio over the rounds it ran first, and how many."""
        r = self.ratios
        out = {}
        for name in self.names:
            mine = [x for x, f in zip(r, self.first, strict=True) if f == name]
            if mine:
                out[name] = (statistics.median(mine), len(mine))
        return out

    def summary(self) -> dict:
        q1, med, q3 = quartiles(self.ratios)
        return {"median": med, "q1": q1, "q3": q3, "verdict": verdict(self.ratios), "pairs": len(self.first),
                "by_first": self.by_first(), "medians": self.medians()}


# seconds of rest before each side's step: the threads the side before left behind stop spinning first
# (OpenBLAS's idle workers poll for about 2^28 cycles, ~0.1 s; torch's OpenMP workers spin a while too), so a
# side is timed on a machine the other has let go of, as a user running one library finds it
SETTLE = 0.3


def paired(sides: dict, pairs: int = 15, warmup: int = 2, ours: str | None = None,
           each: Callable[[int, dict], None] | None = None, timer: Callable[[], float] = time.perf_counter,
           settle: float = SETTLE, sleep: Callable[[float], None] = time.sleep) -> Paired:
    """Time ``sides`` (name -> function of no arguments) in rounds: ``warmup`` untimed rounds, then
    ``pairs`` timed ones; every round runs each side once, one after the other, in an order rotated by
    one from the round before (two sides: A B, B A, A B, ...; three: A B C, B C A, C A B, ...). The
    warm-up rotates too. Before each side, ``settle`` seconds of rest (SETTLE), untimed. ``each(round,
    outputs)``, when given, sees every timed round's outputs (a parity check). ours: the side whose
    ratios are taken (default: the first)."""
    names = tuple(sides)
    if len(names) < 2:
        raise ValueError(f"paired timing needs at least two sides, got {list(names)}")
    if pairs < 1:
        raise SystemExit(f"--pairs must be >= 1, got {pairs}")
    if warmup < 0:
        raise SystemExit(f"--warmup must be >= 0, got {warmup}")
    ours = names[0] if ours is None else ours
    if ours not in sides:
        raise ValueError(f"ours must name a side, one of {list(names)}; got {ours!r}")
    res = Paired(names, ours, {k: [] for k in names})
    for r in range(warmup + pairs):
        order = names[r % len(names):] + names[:r % len(names)]
        out = {}
        for name in order:
            if settle > 0:
                sleep(settle)
            t0 = timer()
            out[name] = sides[name]()
            dt = timer() - t0
            if r >= warmup:
                res.times[name].append(dt)
        res.out = out
        if r >= warmup:
            res.first.append(order[0])
            res.orders.append(order)
            if each is not None:
                each(r - warmup, out)
    return res


def print_paired(res: Paired, unit: str = "ms", width: int = 24, what: str | None = None) -> dict:
    """Each side's median (and the range of its rounds), the median per-round ratio with its IQR,
    the median ratio by which side ran first, and the verdict. Returns ``res.summary()``."""
    scale = {"s": 1.0, "ms": 1e3}[unit]
    s = res.summary()
    for k, v in res.times.items():
        q1, med, q3 = quartiles(v)
        print(f"  {k:<{width}} median {med * scale:9.2f} {unit}  (IQR {q1 * scale:.2f}-{q3 * scale:.2f}, "
              f"range {min(v) * scale:.2f}-{max(v) * scale:.2f})")
    other = what or (res.others[0] if len(res.others) == 1 else "the faster of " + " and ".join(res.others))
    print(f"  ratio {res.ours} / {other}, per pair: median {s['median']:.3f} (IQR {s['q1']:.3f}-{s['q3']:.3f}), "
          f"{s['pairs']} pairs, order rotated each round")
    print("    by the side that ran first: " + "; ".join(
        f"{k} first {m:.3f} ({n} pair{'' if n == 1 else 's'})" for k, (m, n) in s["by_first"].items()))
    rule = {"faster": f"upper quartile {s['q3']:.3f} < 1", "slower": f"lower quartile {s['q1']:.3f} > 1",
            "level": f"IQR {s['q1']:.3f}-{s['q3']:.3f} holds 1"}[s["verdict"]]
    few = f"; only {s['pairs']} pairs: a smoke test, not a claim" if s["pairs"] < MIN_PAIRS else ""
    print(f"  verdict: {res.ours} {s['verdict']} ({rule}{few})", flush=True)
    return s


def add_pairs_args(parser, pairs: int = 15, warmup: int = 2, settle: float = SETTLE) -> None:
    parser.add_argument("--pairs", type=int, default=pairs,
                        help=f"timed pairs after the warm-up, the order rotated each round (default {pairs})")
    parser.add_argument("--warmup", type=int, default=warmup, help=f"untimed rounds first (default {warmup})")
    parser.add_argument("--settle", type=float, default=settle,
                        help=f"seconds of rest before each side's step, so the other side's threads stop spinning "
                             f"(default {settle}; 0: back to back)")


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


def matmul_signature(a, b) -> tuple:
    """What a product's speed depends on: (a's shape, a's layout, b's shape, b's layout, the result dtype).
    A layout is ("C",) contiguous, ("T",) a view with its last two axes swapped (W.T, dy.T, k^T), or
    ("S", strides) for other strides (attention's heads, strided views of a packed projection)."""
    import numpy as np

    def layout(x) -> tuple:  # type: ignore[no-untyped-def]
        if x.flags.c_contiguous:
            return ("C",)
        return ("T",) if x.ndim >= 2 and np.swapaxes(x, -1, -2).flags.c_contiguous else ("S", x.strides)
    a, b = np.asarray(a), np.asarray(b)
    return a.shape, layout(a), b.shape, layout(b), np.result_type(a, b).str


def products_alone(sigs: list, repeats: int = 3) -> float:
    """Seconds: the products of ``matmul_signature``s, in order, operands of the same shapes, dtype and
    layouts made once per signature, best of ``repeats`` (after one untimed round)."""
    import numpy as np

    rng = np.random.default_rng(0)

    def operand(shape, how, dt):  # type: ignore[no-untyped-def]
        if how[0] == "T":
            return np.swapaxes(rng.standard_normal(shape[:-2] + shape[:-3:-1]).astype(dt), -1, -2)
        if how[0] == "S" and min(how[1], default=0) >= 0:      # the same strides over a buffer of its extent
            itemsize = np.dtype(dt).itemsize
            span = sum((n - 1) * st for n, st in zip(shape, how[1], strict=True)) // itemsize + 1
            return np.lib.stride_tricks.as_strided(rng.standard_normal(span).astype(dt), shape, how[1])
        return rng.standard_normal(shape).astype(dt)

    made: dict = {}
    work = []
    for sig in sigs:
        if sig not in made:
            sa, la, sb, lb, dt = sig
            a, b = operand(sa, la, dt), operand(sb, lb, dt)
            made[sig] = (a, b, np.matmul(a, b))
        work.append(made[sig])
    best = float("inf")
    for r in range(repeats + 1):
        t0 = time.perf_counter()
        for a, b, out in work:
            np.matmul(a, b, out=out)
        if r:
            best = min(best, time.perf_counter() - t0)
    return best


def sgemm_peak(n: int = 2048, repeats: int = 5, torch=None) -> float:
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


def base_model_and_batch():
    """The paper's base encoder-decoder as bench_transformer and bench_breakdown time it: d_model 512,
    6 + 6 layers, a shared 37,000-token vocabulary, final norms, float32, seed 0; and a batch of 8 x 32
    source and target tokens with some right padding. Returns (model, cfg, src, tgt_in, tgt_out, V, PAD)."""
    import numpy as np

    from npformer.models import Transformer, TransformerConfig

    B, S, T, V, PAD = 8, 32, 32, 37000, 0
    cfg = TransformerConfig(src_vocab_size=V, tgt_vocab_size=V, final_norm=True)
    rng = np.random.default_rng(0)
    model = Transformer(cfg, rng=rng)                                      # float32

    def batch(n, t):
        ids = rng.integers(1, V, (n, t))                                   # (n, t)
        lengths = rng.integers(t * 3 // 4, t + 1, n)                       # (n,)
        ids[np.arange(t)[None, :] >= lengths[:, None]] = PAD
        return ids

    src, tgt_in = batch(B, S), batch(B, T)                                 # (B, S), (B, T)
    tgt_out = np.roll(tgt_in, -1, axis=1)                                  # (B, T)
    tgt_out[:, -1] = PAD
    return model, cfg, src, tgt_in, tgt_out, V, PAD


# bench_small.py's decoder-only models (d_model, layers, batch, tokens), which bench_parallel.py and
# bench_heap.py train too, and the Adam settings of all three (npformer's defaults, the paper's 5.3)
SMALL_SIZES = ((64, 2, 64, 32), (128, 4, 32, 64), (256, 4, 16, 128))
SMALL_ADAM = {"lr": 1e-3, "betas": (0.9, 0.98), "eps": 1e-9}


def small_lm(d: int, layers: int, t: int, vocab: int = 96, dtype=None):
    """One of the small models: GPT-style DecoderLM (pre-LN, learned positions, GELU), 4 heads,
    d_ff = 4 d_model, at most ``t`` tokens, dropout 0.1, seed 0; float32 unless ``dtype``."""
    import numpy as np

    from npformer.models import DecoderLM, DecoderLMConfig
    cfg = DecoderLMConfig(vocab_size=vocab, d_model=d, n_heads=4, d_ff=4 * d, n_layers=layers, max_len=t,
                          dropout=0.1)
    return DecoderLM(cfg, rng=0, dtype=np.float32 if dtype is None else dtype)


def small_batch(b: int, t: int, vocab: int = 96, seed: int = 0):
    """(x, y): b random sequences of t + 1 tokens, split into inputs and next-token targets, (b, t) each."""
    import numpy as np
    seq = np.random.default_rng(seed).integers(0, vocab, (b, t + 1))     # (B, T + 1)
    return seq[:, :-1].copy(), seq[:, 1:].copy()


def small_step(model, opt, x, y, rng) -> float:
    """One training step of a small model: forward, next-token cross-entropy, backward, Adam."""
    loss, grads = model.loss(x, y, rng=rng)
    opt.step(grads)
    return float(loss)
