"""Each compiled twin (src/npformer/ops/fused) against its NumPy reference, paired, on one thread.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/bench_twins.py
    (options: --rows 2048 --width 512 --pairs 15 --warmup 2 --settle 0; a smoke test: --rows 64 --pairs 3)

Arrays of a base-model step's size: (rows, width) float32 activations (rows = B * T), an attention
block's (B, H, T, T) scores, Adam over 20 M float32 parameters, a (rows, 8000) logits array; the
inference twins (MiniLM's encoding) on the same activations (``--rows 512 --width 384`` is a MiniLM
feed-forward block's shape: 512 rows of 384, hidden 1536). Every op is timed as the same public function
under ``use_kernels("numba")`` and under ``use_kernels("numpy")`` (``_common.paired``: the order
alternating, the median per-round ratio twin / reference with its IQR). Each side has its own copy of
the inputs, made before the timing; an in-place op (softmax, dropout with the residual add, Adam) works
on its side's copy round after round, so both sides see the same inputs in each round, to rounding.
With ``--compare-threads``, each twin instead runs on 2 numba threads against itself on 1
(``parallel.limit``), the measurement behind ``parallel.limit``'s default for the twins.
Each round's outputs are compared (float32: within 1e-6 per tensor, as tests/ops/test_twins.py), and a
miss ends the run with status 1. A twin is kept where the median ratio is 0.9 or less (docs/DESIGN.md).
"""
from __future__ import annotations

import argparse

import numpy as np

from _common import add_pairs_args, check, paired, print_paired, print_setup
from npformer import ops
from npformer.ops import kernels, parallel
from npformer.train.optim import Adam


def cases(rows: int, width: int) -> dict:
    """name -> (setup() -> args, call(*args) -> outputs tuple)."""
    rng = np.random.default_rng(0)
    f32 = np.float32
    x = rng.standard_normal((rows, width)).astype(f32)                  # (N, E)
    dy = rng.standard_normal((rows, width)).astype(f32)                 # (N, E) an upstream gradient
    h = rng.standard_normal((rows, 4 * width)).astype(f32)              # (N, F)
    bias = rng.standard_normal(4 * width).astype(f32)                   # (F,)
    w, b = np.ones(width, f32), np.zeros(width, f32)
    t = max(8, int(round((rows / 32) ** 0.5 * 8)))
    scores = rng.standard_normal((max(1, rows // t), 8, t, t)).astype(f32)   # (B, H, T, T)
    mask = np.tri(t, t, dtype=bool)                                     # (T, T) causal
    logits = rng.standard_normal((rows, 8000)).astype(f32)              # (N, V)
    targets = rng.integers(0, 8000, rows)
    ids = rng.integers(0, 8000, rows)
    n_params = 5_000_000 * rows // 2048                                 # 20 MB of float32 at the default size
    grad = {"p": rng.standard_normal(n_params).astype(f32)}             # (P,)

    def ln(x):
        y, c = ops.layernorm_forward(x, w, b)
        return (y, *ops.layernorm_backward(dy, c))

    def gelu(h):
        y, c = ops.gelu_forward(h, bias)
        return y, ops.gelu_backward(h, c)

    def gelu_tanh(h):
        y, c = ops.gelu_tanh_forward(h, bias)
        return y, ops.gelu_tanh_backward(h, c)

    def softmax(s):
        y, c = ops.softmax_forward(s, out=s, scale=0.125, mask=mask)
        return y.copy(), ops.softmax_backward(scores, c, scale=0.125)

    def dropout_add(y):
        return ops.dropout_add_forward(y, x, 0.1, np.random.default_rng(1), out=y)

    def dropout(y):
        return ops.dropout_forward(y, 0.1, np.random.default_rng(1), out=y)

    def xent(lg):
        loss, c = ops.cross_entropy_forward(lg, targets, label_smoothing=0.1)
        return loss, ops.cross_entropy_backward(1.0, c)

    def emb(d):
        return (ops.embedding_backward(d, (ids, (8000, width))),)

    def adam(opt):
        opt.step(grad)
        return (opt.params["p"],)

    def gelu_inference(buf):                 # in place on a fresh copy of h each round (the copy on both sides)
        np.copyto(buf, h)
        return (ops.gelu_inference_(buf, bias),)

    def ln_inference(buf):                   # LN(x + dy), the post-LN block's norm of its residual sum
        return (ops.layernorm_inference(x, w, b, out=buf, residual=dy),)

    return {"layernorm fwd+bwd": (lambda: (x,), ln), "gelu fwd+bwd (bias)": (lambda: (h,), gelu),
            "gelu_tanh fwd+bwd (bias)": (lambda: (h,), gelu_tanh),
            "softmax scale+mask fwd+bwd": (lambda: (scores.copy(),), softmax),
            "dropout + residual": (lambda: (x.copy(),), dropout_add), "dropout": (lambda: (x.copy(),), dropout),
            "cross-entropy fwd+bwd": (lambda: (logits,), xent), "embedding backward": (lambda: (x,), emb),
            "adam step": (lambda: (Adam({"p": grad["p"] * f32(0.5)}, lr=1e-3),), adam),
            "gelu inference (bias, in place; with a copy of h)": (lambda: (np.empty_like(h),), gelu_inference),
            "layernorm inference (residual)": (lambda: (np.empty_like(x),), ln_inference)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=2048)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--only", default="", help="comma-separated words: run only the cases whose name holds one")
    ap.add_argument("--compare-threads", action="store_true", help="each twin on 2 threads against itself on 1")
    add_pairs_args(ap, settle=0.0)
    args = ap.parse_args()
    if kernels.numba_module() is None:
        raise SystemExit("bench_twins needs numba: pip install 'npformer[fast]'")
    print_setup()
    only = [w for w in args.only.split(",") if w]
    for name, (setup, call) in cases(args.rows, args.width).items():
        if only and not any(w in name for w in only):
            continue
        inputs = {"twin": setup(), "reference": setup()}             # each side's own, made before timing
        with ops.use_kernels("numba"):
            call(*setup())                                               # compile (or load) before timing

        def side(mode: str, key: str, call=call, inputs=inputs) -> tuple:
            with ops.use_kernels(mode):
                if args.compare_threads:
                    with parallel.limit(2 if key == "twin" else 1):
                        return call(*inputs[key])
                return call(*inputs[key])

        def parity(_: int, out: dict, name=name) -> None:
            for t, r in zip(out["twin"], out["reference"], strict=True):
                t64, r64 = np.asarray(t, np.float64), np.asarray(r, np.float64)
                check(f"{name}: twin vs reference", float(np.linalg.norm(t64 - r64) / max(np.linalg.norm(r64), 1e-30)),
                      1e-6)

        print(f"\n== {name} ==")
        ref_mode = "numba" if args.compare_threads else "numpy"
        sides = {"twin": lambda s=side: s("numba", "twin"),
                 "reference": lambda s=side, m=ref_mode: s(m, "reference")}
        res = paired(sides, pairs=args.pairs, warmup=args.warmup, each=parity, settle=args.settle)
        print_paired(res, what="the twin on 1 thread" if args.compare_threads else "reference")


if __name__ == "__main__":
    main()
