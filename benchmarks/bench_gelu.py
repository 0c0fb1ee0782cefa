"""Speed and accuracy of npformer's erf and exact GELU against scipy.special.erf (and torch's gelu,
for information) on a float32 array of a million elements.

    python benchmarks/bench_gelu.py [--n 1000000] [--rounds 15]

The candidates run in turn, alternating, round after round, so that a busy machine slows them
all alike; each line reports the median of the rounds. Single-threaded everywhere (numpy's
ufuncs are single-threaded anyway; torch is told to use one thread).
"""
from __future__ import annotations

import argparse
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000, help="array length")
    ap.add_argument("--rounds", type=int, default=15, help="timed rounds per candidate")
    args = ap.parse_args()

    import scipy.special
    from npformer.ops import erf, gelu_backward, gelu_forward

    rng = np.random.default_rng(0)
    x = rng.standard_normal(args.n).astype(np.float32)             # (N,) like normalised pre-activations
    dy = rng.standard_normal(args.n).astype(np.float32)            # (N,)
    out = np.empty_like(x)
    _, cache = gelu_forward(x)

    cands = {
        "scipy.special.erf": lambda: scipy.special.erf(x, out=out),
        "npformer erf": lambda: erf(x),
        "npformer gelu_forward": lambda: gelu_forward(x),
        "npformer gelu_backward": lambda: gelu_backward(dy, cache),
    }
    try:
        import torch
        torch.set_num_threads(1)
        xt, dyt = torch.from_numpy(x), torch.from_numpy(dy)
        cands["torch gelu (1 thread)"] = lambda: torch.nn.functional.gelu(xt)
        cands["torch gelu backward"] = lambda: torch.ops.aten.gelu_backward(dyt, xt)
    except ImportError:
        pass

    times = {k: [] for k in cands}
    for f in cands.values():                                        # warm up
        f()
    for _ in range(args.rounds):
        for name, f in cands.items():
            t0 = time.perf_counter()
            f()
            times[name].append(time.perf_counter() - t0)
    med = {k: float(np.median(v)) for k, v in times.items()}
    base = med["scipy.special.erf"]
    print(f"float32, n = {args.n:,}, median of {args.rounds} alternating rounds")
    for name, t in med.items():
        print(f"  {name:<24} {t * 1e3:8.2f} ms   scipy.erf / this = {base / t:5.2f}x")

    # accuracy against float64 on the same float32 inputs
    x64 = x.astype(np.float64)
    e_err = np.abs(erf(x).astype(np.float64) - scipy.special.erf(x64)).max()
    y32, _ = gelu_forward(x)
    y64, _ = gelu_forward(x64)
    g_err = (np.abs(y32 - y64) / np.maximum(1.0, np.abs(y64))).max()
    print(f"  erf float32 max abs error vs float64: {e_err:.2e}")
    print(f"  gelu float32 max error vs float64, |dy| / max(1, |y|): {g_err:.2e}")


if __name__ == "__main__":
    main()
