"""The row blocks of element-wise work (ops/parallel.py) on one thread vs on several, side by side.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/bench_parallel.py
    (options: --pairs 15 --warmup 2 --threads N --reps 20; a smoke test: --pairs 1 --warmup 0 --reps 1)

ops/parallel.py runs its row blocks on the calling thread alone unless ``parallel.limit(n)`` asks
for more. This measures that choice on the machine at hand: each case timed in pairs
(``_common.paired``), one side inside ``parallel.limit(1)``, the other inside
``parallel.limit(N)`` (N = --threads, default one per physical core; numpy's BLAS on N threads
either way), the order swapped from one pair to the next. Reported per case: each side's median,
the median per-pair ratio N threads / 1 thread with its interquartile range and the verdict (the N
threads faster only when the upper quartile is below 1).

Cases, float32:
- ops, each side --reps calls in a row, each call after one product of the same size as the layer
  it follows (so that the BLAS's worker threads are as a training step leaves them):
  GELU forward and backward, layer norm forward, softmax, dropout forward, the residual sum
  (``parallel.add``), on a (2048, 512) FFN-sized array and a (32, 4, 64, 64) block of attention
  weights;
- whole DecoderLM training steps (forward, loss, backward, Adam), dropout 0.1, bench_small.py's
  three sizes, inside ``workspace.keep_heap()`` as the trainer runs them.
Every case checks first that both settings give the same bits (the blocks' promise).
"""
from __future__ import annotations

import argparse

import numpy as np

from _common import (
    SMALL_ADAM,
    SMALL_SIZES,
    add_pairs_args,
    add_threads_arg,
    check,
    paired,
    print_paired,
    print_setup,
    set_threads,
    small_batch,
    small_lm,
    small_step,
)
from npformer.ops import activations, dropout, layernorm, parallel, softmax, workspace
from npformer.train import Adam

SHAPES = {"FFN (2048, 512)": ((2048, 512), (512, 512)), "attention (32, 4, 64, 64)": ((32, 4, 64, 64), (256, 256))}


def op_cases(shape: tuple, rng: np.random.Generator) -> dict:
    x = rng.standard_normal(shape).astype(np.float32)                     # (..., C)
    r = rng.standard_normal(shape).astype(np.float32)                     # (..., C)
    c = shape[-1]
    w, b = np.ones(c, np.float32), np.zeros(c, np.float32)                 # (C,)
    _, cdf = activations.gelu_forward(x)
    return {
        "GELU forward": lambda: activations.gelu_forward(x)[0],
        "GELU backward": lambda: activations.gelu_backward(r, cdf),
        "layer norm forward": lambda: layernorm.layernorm_forward(x, w, b)[0],
        "softmax": lambda: softmax.softmax_forward(x)[0],
        "dropout forward": lambda: dropout.dropout_forward(x, 0.1, np.random.default_rng(3))[0],
        "residual sum": lambda: parallel.add(x, r)}


def under(n: int, fn, reps: int, before=None):
    def run():
        with parallel.limit(n):
            for _ in range(reps):
                if before is not None:
                    before()
                out = fn()
        return out
    return run


def step_side(n: int, d: int, layers: int, b: int, t: int):
    """One side of a step case: its own model, Adam and dropout stream; each step with the row blocks on n threads."""
    model, (x, y) = small_lm(d, layers, t), small_batch(b, t)
    model.train()
    opt, rng = Adam(model.state_dict(), **SMALL_ADAM), np.random.default_rng(1)

    def step():
        with parallel.limit(n):
            return small_step(model, opt, x, y, rng)
    return step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_pairs_args(ap, pairs=15, warmup=2)
    ap.add_argument("--reps", type=int, default=20, help="op calls per side and pair (default 20)")
    add_threads_arg(ap)
    args = ap.parse_args()
    if args.reps < 1:
        raise SystemExit(f"--reps must be >= 1, got {args.reps}")
    n = set_threads(args.threads)
    print_setup()
    if n < 2:
        print("one thread: nothing to compare (on a machine with one core; elsewhere pass --threads 2 or more)")
        return
    print(f"row blocks on 1 thread vs {n} threads; numpy's BLAS on {n} thread(s); {args.pairs} pairs, order "
          f"swapped each pair, after {args.warmup} warm-up round(s)")
    rng = np.random.default_rng(0)
    summary = []
    for where, (shape, prod) in SHAPES.items():
        a = rng.standard_normal(prod).astype(np.float32)
        before = lambda a=a: np.matmul(a, a)                                # noqa: E731 - the product before each call
        for name, fn in op_cases(shape, rng).items():
            one, many = under(1, fn, 1)(), under(n, fn, 1)()
            check(f"{name}, {where}: {n} threads vs 1, max abs difference", float(np.abs(many - one).max()), 0.0)
            print(f"\n{name}, {where}, {args.reps} calls a side")
            res = paired({f"{n} threads": under(n, fn, args.reps, before), "1 thread": under(1, fn, args.reps, before)},
                         args.pairs, warmup=args.warmup, settle=0.05)
            summary.append((f"{name}, {where}", print_paired(res)))
    for d, layers, b, t in SMALL_SIZES:
        sides = {f"{n} threads": step_side(n, d, layers, b, t), "1 thread": step_side(1, d, layers, b, t)}
        check(f"DecoderLM d_model {d}: the first step's loss, {n} threads vs 1",
              abs(float(sides[f"{n} threads"]()) - float(sides["1 thread"]())), 0.0)
        print(f"\nDecoderLM training step, d_model {d}, {layers} layers, batch {b} x {t}")
        with workspace.keep_heap():
            res = paired(sides, args.pairs, warmup=args.warmup, settle=args.settle)
        summary.append((f"DecoderLM step, d_model {d}", print_paired(res)))
    print(f"\nsummary, {n} threads / 1 thread, median of the per-pair ratios (IQR), verdict:")
    for label, r in summary:
        print(f"  {label:<44} {r['median']:.2f}x ({r['q1']:.2f}-{r['q3']:.2f}), {r['verdict']}")


if __name__ == "__main__":
    main()
