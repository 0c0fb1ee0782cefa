"""Speed and accuracy of npformer's erf and exact GELU against scipy.special.erf and torch's gelu,
on a float32 array of a million standard-normal elements (like normalised pre-activations).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/bench_gelu.py
    (options: --n 1000000 --pairs 15 --warmup 2 --threads N; a smoke test: --n 100000 --pairs 3)

Three pairs, each npformer against the library a user would otherwise call: erf vs
scipy.special.erf (float32 in and out), gelu_forward vs torch.nn.functional.gelu, gelu_backward
vs torch's gelu backward. Each pair is timed on its own (``_common.paired``): after --warmup
untimed rounds, --pairs rounds of one call of each back to back, the order swapped from one
round to the next; each side's median, the median per-round ratio npformer / other with its
interquartile range, the ratio by which side ran first, and the verdict (faster only when the
upper quartile is below 1). The calls run back to back (--settle 0, unlike the step benchmarks'
0.3 s of rest): one call is a millisecond or less, and after a rest torch's first call wakes its
thread pool (``--settle 0.3`` shows it: torch's GELU forward a median 7.0 ms against 0.29 ms back
to back, on the machine of docs/performance.md): with a rest the pair would time torch's wake-up,
not its GELU, which a step's GELU never pays. The order still alternates. --threads (default: one
per physical core) sets torch's threads; numpy's element-wise loops, and so npformer's erf and GELU
and scipy's erf, run on one core whatever it says, which is what their users get (--twin-threads sets
the compiled twins' threads). The pairs run inside ``workspace.keep_heap()``, as the trainer runs its
steps: otherwise glibc hands each call's 4 MB outputs back to the system and the next call page-faults
them in again. A full run takes a few seconds.

Parity, checked before the timings are printed (exit status 1 on a miss): npformer's float32
erf within its stated 5e-7 of float64 scipy.special.erf, its float64 erf within its stated
relative 1e-15; scipy's and npformer's float32 erf within 6e-7 of each other (5e-7 plus scipy's
float32 rounding); npformer's float32 GELU and its gradient within 1e-6 of npformer's float64
ones (which the tests tie to torch float64), and within 2e-6 of torch's float32 ones (each side
within 1e-6 of exact; torch's float32 gelu measured 9e-7 off), |d| / max(1, |float64 value|).
"""
from __future__ import annotations

import argparse

import numpy as np

from _common import add_pairs_args, add_threads_arg, check, paired, print_paired, print_setup, set_threads

PAIRS = [("npformer erf", "scipy.special.erf"), ("npformer gelu_forward", "torch gelu"),
         ("npformer gelu_backward", "torch gelu backward")]


def scaled_diff(a: np.ndarray, b: np.ndarray, ref: np.ndarray) -> float:
    """max |a - b| / max(1, |ref|): absolute where |ref| < 1, relative above (float32 holds a
    large y = x only to 6e-8 of it)."""
    return float((np.abs(a.astype(np.float64) - b.astype(np.float64)) / np.maximum(1.0, np.abs(ref))).max())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000, help="array length (default 1,000,000)")
    add_pairs_args(ap, pairs=15, warmup=2, settle=0.0)
    add_threads_arg(ap)
    ap.add_argument("--twin-threads", type=int, default=1,
                    help="threads for npformer's compiled twins (parallel.limit; default 1, the library's default)")
    args = ap.parse_args()

    import scipy.special
    import torch

    from npformer.ops import erf, gelu_backward, gelu_forward, kernels, parallel, workspace

    threads = set_threads(args.threads, torch)
    print_setup(torch)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(args.n).astype(np.float32)             # (N,)
    dy = rng.standard_normal(args.n).astype(np.float32)            # (N,)
    xt, dyt = torch.from_numpy(x), torch.from_numpy(dy)
    out = np.empty_like(x)                                          # (N,) scipy writes here
    _, cache = gelu_forward(x)

    def on_twin_threads(f):  # type: ignore[no-untyped-def]
        with parallel.limit(args.twin_threads):
            return f()

    sides = {
        "npformer erf": lambda: erf(x),
        "scipy.special.erf": lambda: scipy.special.erf(x, out=out),
        "npformer gelu_forward": lambda: on_twin_threads(lambda: gelu_forward(x)[0]),
        "torch gelu": lambda: torch.nn.functional.gelu(xt).numpy(),
        "npformer gelu_backward": lambda: on_twin_threads(lambda: gelu_backward(dy, cache)),
        "torch gelu backward": lambda: torch.ops.aten.gelu_backward(dyt, xt).numpy(),
    }
    # inside keep_heap(), as the trainer runs its steps and as bench_transformer.py and bench_small.py time
    # theirs (process-wide: scipy's and torch's sides too): without it each call's fresh 4 MB outputs are
    # handed back to the system and page-faulted in again by the next call, which torch's caching
    # allocator never pays
    with workspace.keep_heap():
        results = [paired({a: sides[a], b: sides[b]}, args.pairs, warmup=args.warmup, settle=args.settle)
                   for a, b in PAIRS]
    timed = kernels.summary()                                        # before the float64 checks below run
    got = {k: v for res in results for k, v in res.out.items()}

    # -- parity: the same values on both sides of each pair, each within its stated error ---------
    x64 = x.astype(np.float64)                                       # (N,) the same inputs, exactly
    erf64 = scipy.special.erf(x64)                                   # (N,)
    check("npformer erf float32 vs scipy float64, max abs", float(np.abs(got["npformer erf"] - erf64).max()), 5e-7)
    check("npformer erf float64 vs scipy float64, max relative",
          float((np.abs(erf(x64) - erf64) / np.abs(erf64)).max()), 1e-15)
    check("npformer erf vs scipy.special.erf, both float32, max abs",
          float(np.abs(got["npformer erf"].astype(np.float64) - got["scipy.special.erf"]).max()), 6e-7)
    y64, c64 = gelu_forward(x64)                                     # (N,) float64 reference
    d64 = gelu_backward(dy.astype(np.float64), c64)                  # (N,)
    check("npformer gelu float32 vs float64", scaled_diff(got["npformer gelu_forward"], y64, y64), 1e-6)
    check("npformer gelu vs torch gelu, float32", scaled_diff(got["npformer gelu_forward"], got["torch gelu"], y64),
          2e-6)
    check("npformer gelu backward float32 vs float64", scaled_diff(got["npformer gelu_backward"], d64, d64), 1e-6)
    check("npformer gelu backward vs torch's, float32",
          scaled_diff(got["npformer gelu_backward"], got["torch gelu backward"], d64), 2e-6)

    print(f"float32, n = {args.n:,}; per pair {args.pairs} rounds, order swapped each round, after {args.warmup} "
          f"warm-up round(s); torch on {threads} thread(s), numpy's element-wise loops on one")
    print(f"kernels of the timed float32 calls: {timed}; compiled twins on {args.twin_threads} thread(s)")
    for res in results:
        print_paired(res)


if __name__ == "__main__":
    main()
