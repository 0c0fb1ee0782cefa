"""Three measured bounds behind choices in docs/DESIGN.md, each a pair of variants timed side by side.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/bench_bounds.py
    (options: --pairs 15 --warmup 2 --settle 0; a smoke test: --pairs 3)

- gelu-tail: the exact GELU twin's forward (``ops/fused/activations.py``, one thread) against the same
  kernel with no erfc tail (the fitted erf alone, Phi clipped to [0, 1]), on 10^6 standard-normal
  float32 elements: what the exact tail costs. Also printed: the tail-free form's largest error against
  float64's exact GELU over x in [-7, -2.5], the region where it would differ from the reference.
- strided-kt: ``q @ k^T`` with k a head of a packed (B, T, 3, H, D) projection, its transposed view as
  attention takes it, against copying k^T contiguous first (the copy inside the timing), at the
  training heads of bench_small's three sizes and the base model (all queries in one product, on numpy's
  BLAS threads), and at MiniLM's heads (12 of 32; one text of 256 keys, 8 of 40, 32 of 12), on one thread
  and in blocks of query rows, as ``attention_inference`` takes them.
- sfc64-lanes: the dropout twin's generator, SFC64 (``ops/fused/dropout.py``): its vector lanes
  (``_fill_lanes``: one, two and four (``LANES``) streams side by side as the lanes of one LLVM vector, each
  into its own buffer, as the twin runs them) against the scalar step ``_next`` in numba's own loops (one
  stream, and four side by side as scalars: the twin's form before the vector lanes); 2^20 64-bit outputs
  each way (the same outputs per stream, checked against numpy's ``random_raw``).

Each pair: ``_common.paired``, the order alternating, each side's median and the median per-round
ratio with its IQR.
"""
from __future__ import annotations

import argparse
import math

import numpy as np
from threadpoolctl import threadpool_limits

from _common import add_pairs_args, check, paired, print_paired, print_setup
from npformer.ops import kernels


def gelu_tail(args) -> None:
    from numba import njit

    from npformer.ops.fused import activations as act
    from npformer.ops.fused.activations import SEG, _consts, _phi, _span, forward_kernel

    @njit(cache=False, error_model="numpy")
    def no_tail(x, y, aux, k):  # type: ignore[no-untyped-def]
        r, c = x.shape
        nseg = (c + SEG - 1) // SEG
        for task in range(r * nseg):
            i, lo, m = _span(task, nseg, c)
            xi, yi, ai = x[i, lo:lo + m], y[i, lo:lo + m], aux[i, lo:lo + m]
            for j in range(m):
                yv, cdf = _phi(xi[j], k)
                cdf = max(cdf, np.float32(0.0))
                ai[j] = cdf
                yi[j] = xi[j] * cdf

    x = np.random.default_rng(0).standard_normal((1, 10**6)).astype(np.float32)       # (1, N)
    k, none = _consts(np.float32), np.empty(0, np.float32)
    y1, a1, y2, a2 = (np.empty_like(x) for _ in range(4))
    with kernels.use_kernels("numba"):
        act.gelu_forward(x[:, :10], None, False)                                    # compiles the twin
    exact = forward_kernel._serial

    res = paired({"exact tail": lambda: exact(x, none, False, k, y1, x, a1),
                  "no tail": lambda: no_tail(x, y2, a2, k)}, args.pairs, warmup=args.warmup, settle=args.settle)
    print("\n== gelu-tail: the exact GELU twin's forward, one thread, 10^6 standard-normal float32 ==")
    print_paired(res)
    t = np.linspace(-7, -2.5, 200_001).reshape(1, -1).astype(np.float32)            # (1, M)
    yt, at = np.empty_like(t), np.empty_like(t)
    no_tail(t, yt, at, k)
    t64 = t.astype(np.float64)
    exact64 = t64 * 0.5 * np.vectorize(math.erfc)(-t64 / math.sqrt(2.0))
    print(f"  the tail-free form's largest |error| against float64 over x in [-7, -2.5]: "
          f"{np.abs(yt - exact64).max():.2e}")


def strided_kt(args) -> None:
    from npformer.ops.inference import INFERENCE_BLOCK

    shapes = [("bench_small d_model 64", 64, 4, 32, 16, None), ("bench_small d_model 128", 32, 4, 64, 32, None),
              ("bench_small d_model 256", 16, 4, 128, 64, None), ("the base model", 8, 8, 32, 64, None),
              ("MiniLM, 1 text of 256 keys", 1, 12, 256, 32, 1), ("MiniLM, 8 texts of 40", 8, 12, 40, 32, 1),
              ("MiniLM, 32 texts of 12", 32, 12, 12, 32, 1)]
    print("\n== strided-kt: q @ k^T, k a head of the packed projection: its transposed view against a "
          "contiguous copy of k^T (the copy timed) ==")
    for name, b, h, t, d, threads in shapes:
        qkv = np.random.default_rng(0).standard_normal((b, t, 3, h, d)).astype(np.float32)  # (B, T, 3, H, D)
        q, k = qkv.transpose(2, 0, 3, 1, 4)[:2]                                        # (B, H, T, D) views
        out = np.empty((b, h, t, t), np.float32)                                        # (B, H, T, T)
        # training attention takes all queries at once; attention_inference (MiniLM) in blocks of rows
        rows = t if threads is None else max(1, INFERENCE_BLOCK // (t * d))

        def scores(k_t, q=q, out=out, rows=rows, t=t):  # type: ignore[no-untyped-def]
            for i in range(0, t, rows):
                np.matmul(q[..., i:i + rows, :], k_t, out=out[..., i:i + rows, :])

        with threadpool_limits(threads):
            res = paired({"view": lambda k=k, f=scores: f(np.swapaxes(k, -1, -2)),
                          "copy first": lambda k=k, f=scores: f(np.ascontiguousarray(np.swapaxes(k, -1, -2)))},
                         args.pairs, warmup=args.warmup, settle=args.settle)
        where = f", one thread, queries {rows} at a time" if threads else ""
        print(f"\n{name}: {b} x {h} heads of {t} x {d}{where}")
        print_paired(res, unit="ms")


def sfc64_lanes(args) -> None:
    from numba import njit

    from npformer.ops.fused.dropout import _fill1, _fill2, _fill4, _next

    jit = njit(cache=False, error_model="numpy")

    @jit
    def one(st, raw):                               # raw (lanes, R): stream v's outputs in raw[v]
        a0, b0, c0, k0 = st[0, 0], st[0, 1], st[0, 2], st[0, 3]
        r0 = raw[0]
        for j in range(raw.shape[1]):
            t0, a0, b0, c0, k0 = _next(a0, b0, c0, k0)
            r0[j] = t0

    @jit
    def four(st, raw):
        a0, b0, c0, k0 = st[0, 0], st[0, 1], st[0, 2], st[0, 3]
        a1, b1, c1, k1 = st[1, 0], st[1, 1], st[1, 2], st[1, 3]
        a2, b2, c2, k2 = st[2, 0], st[2, 1], st[2, 2], st[2, 3]
        a3, b3, c3, k3 = st[3, 0], st[3, 1], st[3, 2], st[3, 3]
        r0, r1, r2, r3 = raw[0], raw[1], raw[2], raw[3]
        for j in range(raw.shape[1]):
            t0, a0, b0, c0, k0 = _next(a0, b0, c0, k0)
            t1, a1, b1, c1, k1 = _next(a1, b1, c1, k1)
            t2, a2, b2, c2, k2 = _next(a2, b2, c2, k2)
            t3, a3, b3, c3, k3 = _next(a3, b3, c3, k3)
            r0[j], r1[j], r2[j], r3[j] = t0, t1, t2, t3

    def vector(fill):                               # the twin's call, on a copy of the states
        @jit
        def run(st, raw):
            fill(st[:raw.shape[0]].copy(), raw, raw.shape[1])
        return run

    def stream(v: int) -> np.random.SFC64:
        return np.random.SFC64(np.random.SeedSequence(1, spawn_key=(v,)))

    states = np.array([stream(v).state["state"]["state"] for v in range(4)], np.uint64)   # (4, 4)
    n = 1 << 20
    runs = {"scalar, one stream": (one, 1), "scalar, four streams": (four, 4),
            "vector, one stream": (vector(_fill1), 1), "vector, two streams": (vector(_fill2), 2),
            "vector, four streams": (vector(_fill4), 4)}
    bufs = {name: np.empty((lanes, n // lanes), np.uint64) for name, (_, lanes) in runs.items()}
    wrong = 0
    for name, (fn, _) in runs.items():
        raw = bufs[name]
        fn(states, raw)
        wrong += sum(int((raw[v] != stream(v).random_raw(raw.shape[1])).sum()) for v in range(raw.shape[0]))
    check("sfc64-lanes: outputs that differ from numpy's random_raw", wrong, 0)
    print("\n== sfc64-lanes: 2^20 SFC64 outputs, one thread ==")

    def side(name: str):
        fn = runs[name][0]
        return lambda: fn(states, bufs[name])

    for a, b in (("vector, four streams", "scalar, four streams"), ("vector, one stream", "scalar, one stream"),
                 ("vector, two streams", "vector, one stream"), ("vector, four streams", "vector, one stream")):
        print_paired(paired({a: side(a), b: side(b)}, args.pairs, warmup=args.warmup, settle=args.settle))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_pairs_args(ap, settle=0.0)
    ap.add_argument("--only", default="gelu-tail,strided-kt,sfc64-lanes", help="comma-separated, of those three")
    args = ap.parse_args()
    if kernels.numba_module() is None:
        raise SystemExit("bench_bounds needs numba: pip install 'npformer[fast]'")
    print_setup()
    probes = {"gelu-tail": gelu_tail, "strided-kt": strided_kt, "sfc64-lanes": sfc64_lanes}
    for name in args.only.split(","):
        if name not in probes:
            raise SystemExit(f"--only: expected some of {', '.join(probes)}, got {name!r}")
        probes[name](args)


if __name__ == "__main__":
    main()
