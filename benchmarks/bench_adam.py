"""Adam alone at a model's size: the compiled twin (one pass) against the NumPy reference, paired, and
the twin's bandwidth against the machine's, measured in the same run by a triad on all cores.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/bench_adam.py
    (options: --params 63e6 --pairs 15 --warmup 2 --settle 0; a smoke test: --params 1e6 --pairs 3)

One float32 parameter of --params elements (the base model's 63 M by default), ``Adam.step`` under
``use_kernels("numba")`` and under ``use_kernels("numpy")``, each side on its own copy, on one thread
(``parallel.limit(1)``), and again the twin on every core against itself on one. Bytes are counted as
28 per float32 parameter: p, m and v read and written, g read. The triad, a = b + s c over three float32
arrays of the same length in a numba ``prange`` loop on every core, is counted as 3 x 4 bytes per
element; its best of 5 is the machine's bandwidth here. Each round checks that the sides agree
(float32 within 1e-6 per tensor; the twin keeps the reference's arithmetic, so they agree bit for bit).
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from _common import add_pairs_args, check, paired, physical_cores, print_paired, print_setup
from npformer import ops
from npformer.ops import kernels, parallel
from npformer.train.optim import Adam


def triad_bandwidth(n: int, threads: int, repeats: int = 5) -> float:
    """Bytes per second of a = b + s c (3 x 4 bytes per float32 element), the best of ``repeats``."""
    nb = kernels.numba_module()

    def triad(a, b, c, s):  # type: ignore[no-untyped-def]
        for i in nb.prange(a.size):
            a[i] = b[i] + s * c[i]

    fn = nb.njit(parallel=True, error_model="numpy")(triad)
    rng = np.random.default_rng(0)
    a, b, c = np.empty(n, np.float32), rng.random(n, np.float32), rng.random(n, np.float32)
    nb.set_num_threads(min(threads, nb.config.NUMBA_NUM_THREADS))
    fn(a, b, c, np.float32(3.0))
    best = min(_timed(lambda: fn(a, b, c, np.float32(3.0))) for _ in range(repeats))
    return 12.0 * n / best


def _timed(f) -> float:  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--params", type=float, default=63e6, help="float32 parameters (default 63e6)")
    add_pairs_args(ap, settle=0.0)
    args = ap.parse_args()
    if kernels.numba_module() is None:
        raise SystemExit("bench_adam needs numba: pip install 'npformer[fast]'")
    n = int(args.params)
    if n < 1:
        raise SystemExit(f"--params must be >= 1, got {args.params}")
    cores = physical_cores()
    print_setup()
    rng = np.random.default_rng(0)
    grads = {"p": rng.standard_normal(n).astype(np.float32)}
    opts = {"twin": Adam({"p": grads["p"] * np.float32(0.5)}, lr=1e-3),
            "reference": Adam({"p": grads["p"] * np.float32(0.5)}, lr=1e-3)}

    def side(mode: str, key: str, threads: int = 1):  # type: ignore[no-untyped-def]
        def run() -> np.ndarray:
            with ops.use_kernels(mode), parallel.limit(threads):
                opts[key].step(grads)
            return opts[key].params["p"]
        return run

    def parity(_: int, out: dict) -> None:
        t, r = (np.asarray(out[k], np.float64) for k in ("twin", "reference"))
        check("adam: twin vs reference", float(np.linalg.norm(t - r) / max(np.linalg.norm(r), 1e-30)), 1e-6)

    print(f"\n== Adam step, {n:,} float32 parameters, one thread ==")
    res = paired({"twin": side("numba", "twin"), "reference": side("numpy", "reference")}, pairs=args.pairs,
                 warmup=args.warmup, each=parity, settle=args.settle)
    print_paired(res, what="reference")
    one = float(np.median(res.times["twin"]))
    print(f"\n== the twin on {cores} thread(s) against itself on one ==")
    res2 = paired({"twin": side("numba", "twin", cores), "one": side("numba", "twin", 1)}, pairs=args.pairs,
                  warmup=args.warmup, settle=args.settle)
    print_paired(res2, what="the twin on one thread")
    many = float(np.median(res2.times["twin"]))
    bw = triad_bandwidth(n, cores)
    ref = float(np.median(res.times["reference"]))
    print(f"\ntriad a = b + s c on {cores} thread(s), best of 5: {bw / 1e9:.1f} GB/s (3 x 4 bytes per element)")
    for label, t in (("reference, 1 thread", ref), ("twin, 1 thread", one), (f"twin, {cores} threads", many)):
        gbs = 28.0 * n / t
        print(f"  Adam {label}: {t * 1e3:.1f} ms, {gbs / 1e9:.1f} GB/s at 28 bytes per parameter, "
              f"{100 * gbs / bw:.0f}% of the triad's")


if __name__ == "__main__":
    main()
