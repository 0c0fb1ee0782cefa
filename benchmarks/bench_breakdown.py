"""Where the time goes: one base training step and one MiniLM batch, by part, beside the products-only bound.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/bench_breakdown.py
    (options: --workloads base,minilm --pairs 5 --minilm-batch 2 --threads N --kernels both
     --figure docs/figures/breakdown.png --by-op ROUNDS; a smoke test: --pairs 1)

Workloads:
- base: bench_transformer.py's model (the paper's base encoder-decoder, d_model 512, 6 + 6 layers,
  a shared 37,000-token vocabulary, final LayerNorms, dropout 0.1 in training mode, float32),
  batch 8 x 32 with some padding; one step = ``model.loss`` (forward, cross-entropy, backward) and
  ``Adam.step`` on every parameter; numpy's BLAS on --threads threads.
- minilm: all-MiniLM-L6-v2, ``SentenceEncoder.encode`` of one batch of 64 texts (batch
  --minilm-batch, default 2, of bench_minilm.py's mixed/words corpus sorted longest first) with
  ``threads=1`` and the BLAS on one thread: what each of the encoder's per-core threads runs (it
  deals a batch into one piece per core), so this is one core's view.

How it is measured, from outside the library: every function defined in ``npformer.ops`` (found
by walking the package, so that ops added later are counted too; of ops/parallel.py, only the
residual sums: its row-block machinery runs its caller's work, whose time stays with the caller,
Adam's with the optimizer), ``Adam.step``, the tokenizer's
``encode`` and ``numpy.matmul`` are replaced, for the run, by a wrapper that times each call on
the calling thread and subtracts the time of the wrapped calls inside it (self time); wherever
the library holds a reference to one of them (a module's global, a dict of functions) it is
swapped, and restored afterwards. No timing code lives in src/. The parts:
    products      numpy.matmul outside the attention ops: the products with weights
    attention     the self time of the attention ops (scores, masks, weighted sums, their products)
    elementwise   every other op: softmax, layer norm, dropout, activations, embedding lookups and
                  their gradients, bias adds
    loss          ops/losses.py (cross-entropy)
    optimizer     Adam.step
    tokenizer     WordPiece (MiniLM only)
    other         the remainder: the step's time (measured without wrappers) less the parts above:
                  Python in the modules and models, residual adds and copies written inline,
                  the workspace pool (the wrappers' own cost is not in it: see below)
Steps with and without the wrappers alternate (``_common.paired``, --pairs pairs after one
warm-up round); each part is its median over the recorded steps, the step its median without
wrappers, and the wrappers' cost (recorded minus plain) is printed.

Beside each part: the products-only bound, the same products (shapes, dtypes and the layout of
each operand, transposed views included, recorded in the last step) timed alone in the same
order, best of 3, on the same threads; and numpy's sgemm peak, the best of 5 float32 2048 x 2048
products on the same threads, in the same run, with the products' FLOPs at that rate.

Kernel sets (--kernels, ops/kernels.py): ``both`` (the default where numba imports) times the base step
twice, on the NumPy references (``numpy``) and with the compiled twins (``auto``), one table and one bar
each, side by side; ``numpy`` or ``auto`` times one. Each table names the twins that ran. MiniLM's
encoding is timed once, under the last set (its in-place GELU and LayerNorm have inference twins).

``--by-op ROUNDS`` then times the base step once more per kernel set and round (the sets taking turns,
after one warm-up round) with every op function as its own part, and prints the medians of those above
1 ms: which op a twin changed, and which have none.

Parity (exit status 1 on a miss): the wrappers change no number. The base model's eval-mode loss
and every gradient, and MiniLM's embeddings, with and without them, within 1e-6 relative.
--figure PATH writes a stacked horizontal bar per workload (matplotlib). About a minute and a half on a
quiet 2-core machine (an estimate from the step times of earlier runs).
"""
from __future__ import annotations

import argparse
import functools
import importlib
import inspect
import pkgutil
import statistics
import sys
import threading
import time
from collections import defaultdict

import numpy as np

from _common import (
    add_threads_arg,
    base_model_and_batch,
    check,
    matmul_signature,
    paired,
    print_setup,
    products_alone,
    set_threads,
    sgemm_peak,
)

PARTS = ("products", "attention", "elementwise", "loss", "optimizer", "tokenizer", "other")
PART_LABELS = {
    "products": "products with weights", "attention": "attention (scores, masks, weighted sums)",
    "elementwise": "elementwise (softmax, layer norm, dropout, activations, embeddings, bias adds)",
    "loss": "loss (cross-entropy)", "optimizer": "optimizer (Adam)", "tokenizer": "tokenizer (WordPiece)",
    "other": "Python and inline numpy (the remainder)"}
COLORS = {"products": "#4c72b0", "attention": "#dd8452", "elementwise": "#55a868", "loss": "#c44e52",
          "optimizer": "#8172b3", "tokenizer": "#937860", "other": "#bbbbbb"}
SKIP_OPS = {"npformer.ops", "npformer.ops._checks", "npformer.ops._erf_fit"}


# -- the recorder -----------------------------------------------------------------------------

class Recorder:
    """Self time per part of the calls made on one thread while it is on; the products' operands."""

    def __init__(self) -> None:
        self.thread: int | None = None
        self.stack: list = []
        self.parts: dict = defaultdict(float)
        self.products: list = []

    def start(self) -> None:
        self.thread, self.stack, self.parts, self.products = threading.get_ident(), [], defaultdict(float), []

    def stop(self) -> dict:
        self.thread = None
        return dict(self.parts)

    def call(self, fn, part: str, args, kwargs):
        if part == "matmul":
            part = "attention" if any(f[0] == "attention" for f in self.stack) else "products"
            if part == "products":
                self.products.append(matmul_signature(args[0], args[1]))
        frame = [part, 0.0]
        self.stack.append(frame)
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            dt = time.perf_counter() - t0
            self.stack.pop()
            self.parts[part] += dt - frame[1]
            if self.stack:
                self.stack[-1][1] += dt


REC = Recorder()


def timed(fn, part: str):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if REC.thread is None or threading.get_ident() != REC.thread:
            return fn(*args, **kwargs)
        return REC.call(fn, part, args, kwargs)
    return wrapper


def part_of(module: str, name: str) -> str | None:
    if module == "npformer.ops.parallel":
        # the row blocks' machinery carries its caller's work (an op's blocks, Adam's): not wrapped, so
        # its time stays with the caller; only the residual sums it computes are elementwise work
        return "elementwise" if name in ("add", "_add_block") else None
    if module == "npformer.ops.workspace" or name == "_product":
        return "other"                      # allocation bookkeeping and the products' call wrapper
    if module in ("npformer.ops.attention", "npformer.ops.flash_attention") or "attention" in name:
        return "attention"
    if module in ("npformer.ops.losses", "npformer.ops.fused.losses"):
        return "loss"
    if module == "npformer.ops.fused.adam":
        return "optimizer"                  # the Adam twin's wrapper, called inside Adam.step
    return "elementwise"


def op_of(module: str, name: str) -> str | None:
    """``--by-op``: the op-level label, "part: module.function", for the parts below the products."""
    part = part_of(module, name)
    if part in ("elementwise", "loss", "attention"):
        return f"{part}: {module.replace('npformer.ops.', '')}.{name}"
    return part


def install(label=None) -> list:
    """Swap every reference the library holds to an op function (and numpy.matmul, Adam.step, the
    tokenizer's encode) for a timing wrapper. Returns the undo list for ``uninstall``."""
    import npformer.ops
    from npformer.pretrained.tokenizer import WordPieceTokenizer
    from npformer.train.optim import Adam

    for info in pkgutil.iter_modules(npformer.ops.__path__, "npformer.ops."):
        importlib.import_module(info.name)
    wrap: dict = {}
    for name, mod in list(sys.modules.items()):
        if name.startswith("npformer.ops") and name not in SKIP_OPS:
            for attr, obj in vars(mod).items():
                part = (label or part_of)(name, attr) if inspect.isfunction(obj) and obj.__module__ == name else None
                if part is not None:
                    wrap[id(obj)] = (obj, timed(obj, part))
    undo: list = []
    for name, mod in list(sys.modules.items()):
        if not name.startswith("npformer"):
            continue
        for attr, obj in list(vars(mod).items()):
            if id(obj) in wrap and wrap[id(obj)][0] is obj:
                undo.append((setattr, mod, attr, obj))
                setattr(mod, attr, wrap[id(obj)][1])
            elif isinstance(obj, dict) and not attr.startswith("__"):     # tables of functions
                for k, v in list(obj.items()):
                    if isinstance(v, tuple) and any(id(f) in wrap for f in v):
                        undo.append((dict.__setitem__, obj, k, v))
                        obj[k] = tuple(wrap[id(f)][1] if id(f) in wrap else f for f in v)
                    elif id(v) in wrap and wrap[id(v)][0] is v:
                        undo.append((dict.__setitem__, obj, k, v))
                        obj[k] = wrap[id(v)][1]
    for owner, attr, part in ((np, "matmul", "matmul"), (Adam, "step", "optimizer"),
                              (WordPieceTokenizer, "encode", "tokenizer")):
        undo.append((setattr, owner, attr, getattr(owner, attr)))
        setattr(owner, attr, timed(getattr(owner, attr), part))
    return undo


def uninstall(undo: list) -> None:
    for fn, owner, key, value in reversed(undo):
        fn(owner, key, value)


# -- timing -----------------------------------------------------------------------------------

def flops(sigs: list) -> float:
    total = 0.0
    for sa, _, sb, _, _ in sigs:
        sa, sb = (sa if len(sa) > 1 else (1, *sa)), (sb if len(sb) > 1 else (*sb, 1))   # vectors as matrices
        batch = float(np.prod(np.broadcast_shapes(sa[:-2], sb[:-2]))) if len(sa) > 2 or len(sb) > 2 else 1.0
        total += 2.0 * batch * sa[-2] * sa[-1] * sb[-1]
    return total


def measure(name: str, step, pairs: int) -> dict:
    """Plain and recorded steps alternating; the parts' medians, the step's, the products' signatures."""
    recorded: list = []
    sigs: list = []

    def rec_step():
        REC.start()
        try:
            step()
        finally:
            recorded.append(REC.stop())
            sigs[:] = REC.products

    res = paired({"plain": step, "recorded": rec_step}, pairs, warmup=1)
    recorded = recorded[1:]                                              # the warm-up's
    med = res.medians()
    parts = {p: statistics.median(r.get(p, 0.0) for r in recorded) for p in PARTS if p != "other"}
    parts = {p: v for p, v in parts.items() if v > 0}
    parts["other"] = med["plain"] - sum(parts.values())
    return {"name": name, "step": med["plain"], "recorded": med["recorded"], "parts": parts, "sigs": list(sigs)}


def report(m: dict, threads: int) -> None:
    from threadpoolctl import threadpool_limits

    with threadpool_limits(threads, user_api="blas"):
        m["bound"] = products_alone(m["sigs"])
        m["peak"] = sgemm_peak(repeats=5)
    m["flops"] = flops(m["sigs"])
    m["at_peak"] = m["flops"] / (m["peak"] * 1e9)
    step, bound = m["step"], m["bound"]
    print(f"\n{m['name']}, BLAS on {threads} thread(s): step {step * 1e3:.1f} ms (median without wrappers; "
          f"{m['recorded'] * 1e3:.1f} ms with them, their cost {(m['recorded'] - step) * 1e3:+.1f} ms)")
    print("| part | ms | share of the step | / products-only bound |\n|---|---|---|---|")
    for p, v in m["parts"].items():
        print(f"| {PART_LABELS[p]} | {v * 1e3:.1f} | {v / step:.0%} | {v / bound:.2f} |")
    print(f"| the step | {step * 1e3:.1f} | 100% | {step / bound:.2f} |")
    print(f"products-only bound: the step's {len(m['sigs'])} products with weights alone, best of 3: "
          f"{bound * 1e3:.1f} ms, {m['flops'] / 1e9:.2f} GFLOP at {m['flops'] / bound / 1e9:.0f} GFLOP/s; in the step "
          f"{m['flops'] / m['parts'].get('products', float('nan')) / 1e9:.0f} GFLOP/s")
    print(f"sgemm peak, float32 2048 x 2048, best of 5, {threads} thread(s): {m['peak']:.0f} GFLOP/s; the products "
          f"at that rate {m['at_peak'] * 1e3:.1f} ms; the step runs at {m['flops'] / step / 1e9 / m['peak']:.0%} "
          "of the peak (products' FLOPs over the step's time)", flush=True)


def close(label: str, a: np.ndarray, b: np.ndarray) -> None:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    check(label, float(np.abs(a - b).max() / max(float(np.abs(b).max()), 1e-300)), 1e-6)


# -- workloads --------------------------------------------------------------------------------

def training_step(model, src, tgt_in, tgt_out):
    """The base workload's step, a closure: the model in training mode, loss with dropout, Adam on every
    parameter (lr 1e-4, its own rng)."""
    from npformer.train import Adam

    model.train()
    opt = Adam(model.state_dict(), lr=1e-4)
    rng = np.random.default_rng(1)

    def step() -> None:
        _, grads = model.loss(src, tgt_in, tgt_out, rng=rng)
        opt.step(grads)
    return step


def base_workload(pairs: int) -> dict:
    model, cfg, src, tgt_in, tgt_out, V, PAD = base_model_and_batch()
    B, S, T = *src.shape, tgt_in.shape[1]
    model.eval()
    loss0, g0 = model.loss(src, tgt_in, tgt_out)
    g0 = {k: v.copy() for k, v in g0.items()}
    undo = install()
    try:
        REC.start()
        loss1, g1 = model.loss(src, tgt_in, tgt_out)
        REC.stop()
        close("base, eval-mode loss with the wrappers vs without, relative", np.float64(loss1), np.float64(loss0))
        rel = {k: float(np.abs(g1[k] - g0[k]).max() / max(float(np.abs(g0[k]).max()), 1e-30)) for k in g0}
        worst = max(rel, key=rel.__getitem__)
        close(f"base, gradients with the wrappers vs without, worst ({worst}), relative", g1[worst], g0[worst])
        del g0, g1
        return measure(f"base Transformer training step (forward, loss, backward, Adam), batch {B} x {S}/{T}, "
                       f"{model.num_parameters():,} parameters", training_step(model, src, tgt_in, tgt_out), pairs)
    finally:
        uninstall(undo)


def minilm_workload(pairs: int, batch_size: int, which: int) -> dict:
    from threadpoolctl import threadpool_limits

    from bench_minilm import CORPORA, make_sentences
    from npformer.pretrained import SentenceEncoder

    lo, hi, dist, seed = CORPORA[("mixed", "words")]
    texts = make_sentences(4 * batch_size, lo, hi, seed, "words", dist)
    order = np.argsort([-len(t) for t in texts], kind="stable")
    texts = [texts[i] for i in order[which * batch_size:(which + 1) * batch_size]]
    enc = SentenceEncoder.load()
    n_tok = sum(len(s) for s in enc.tokenizer.encode(texts))
    with threadpool_limits(1, user_api="blas"):
        e0 = enc.encode(texts, batch_size=batch_size, threads=1)
        undo = install()
        try:
            REC.start()
            e1 = enc.encode(texts, batch_size=batch_size, threads=1)
            REC.stop()
            close("MiniLM embeddings with the wrappers vs without, relative", e1, e0)
            return measure(f"MiniLM batch of {len(texts)} texts ({n_tok} word pieces, mixed/words corpus, batch "
                           f"{which} by length), one thread", lambda: enc.encode(texts, batch_size=batch_size,
                                                                                   threads=1), pairs)
        finally:
            uninstall(undo)


def by_op(sets: list, rounds: int) -> None:
    """``--by-op``: the base training step's self time per op function, each kernel set in turn for
    ``rounds`` rounds after one warm-up, medians; the ops above 1 ms in either set."""
    from npformer.ops import kernels

    model, cfg, src, tgt_in, tgt_out, V, PAD = base_model_and_batch()
    step = training_step(model, src, tgt_in, tgt_out)
    times: dict = {ks: [] for ks in sets}
    undo = install(op_of)
    try:
        for _ in range(rounds + 1):
            for ks in sets:
                with kernels.use_kernels(ks):
                    REC.start()
                    step()
                    times[ks].append(REC.stop())
    finally:
        uninstall(undo)
    keys = sorted(set().union(*(set(r) for runs in times.values() for r in runs)))
    med = {ks: {k: statistics.median(r.get(k, 0.0) for r in times[ks][1:]) * 1e3 for k in keys} for ks in sets}
    print(f"\nbase training step by op, self time, median of {rounds} round(s) per kernel set (ms):")
    print("| op | " + " | ".join(f"kernels {ks}" for ks in sets) + " |\n|---|" + "---|" * len(sets))
    for k in keys:
        if max(med[ks][k] for ks in sets) > 1.0:
            print(f"| {k} | " + " | ".join(f"{med[ks][k]:.1f}" for ks in sets) + " |")


def draw(results: list, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from npformer.files import atomic_savefig

    fig, axes = plt.subplots(len(results), 1, figsize=(9, 1.9 * len(results) + 0.6), squeeze=False)
    for ax, m in zip(axes[:, 0], results, strict=True):
        left = 0.0
        for p, v in m["parts"].items():
            v = max(v, 0.0) * 1e3
            ax.barh(0, v, left=left, color=COLORS[p], label=PART_LABELS[p], height=0.5)
            left += v
        ax.axvline(m["bound"] * 1e3, color="black", linestyle="--", label="products alone (bound)")
        ax.axvline(m["at_peak"] * 1e3, color="black", linestyle=":", label="products at the sgemm peak")
        ax.set_yticks([])
        ax.set_xlim(0, max(max(sum(max(v, 0.0) for v in r["parts"].values()), r["bound"]) for r in results
                           if r["name"].split(",")[0] == m["name"].split(",")[0]) * 1e3 * 1.05)
        ax.set_xlabel("ms")
        ax.set_title(m["name"], fontsize=8, loc="left")
    handles, labels = {}, []
    for ax in axes[:, 0]:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in handles:
                handles[lab] = h
                labels.append(lab)
    fig.legend([handles[lab] for lab in labels], labels, loc="lower center", ncol=3, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.18 if len(results) > 1 else 0.3, 1, 1))
    atomic_savefig(fig, path, dpi=120)
    plt.close(fig)
    print(f"figure: {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="base,minilm", help="comma-separated: base, minilm")
    ap.add_argument("--pairs", type=int, default=5, help="plain and recorded steps, alternating (default 5)")
    ap.add_argument("--minilm-batch", type=int, default=2,
                    help="which batch of the mixed corpus, longest first (0-3; default 2)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--kernels", choices=("both", "numpy", "auto"), default=None,
                    help="the base step on the NumPy references, with the compiled twins, or both side by side "
                         "(default: both where numba imports, else numpy)")
    ap.add_argument("--by-op", type=int, default=0, metavar="ROUNDS",
                    help="then the base step's time per op function, ROUNDS rounds per kernel set (default 0: not)")
    ap.add_argument("--figure", metavar="PATH", help="write the stacked bars here (a .png or .svg)")
    add_threads_arg(ap)
    args = ap.parse_args()
    workloads = [w for w in args.workloads.split(",") if w]
    if not workloads or any(w not in ("base", "minilm") for w in workloads):
        ap.error(f"--workloads: expected some of base, minilm, got {args.workloads!r}")
    if not 0 <= args.minilm_batch <= 3:
        ap.error(f"--minilm-batch must be 0-3, got {args.minilm_batch}")
    if args.batch_size < 1 or args.pairs < 1:
        ap.error("--batch-size and --pairs must be >= 1")

    from npformer.ops import kernels

    sets = {"both": ["numpy", "auto"], None: ["numpy", "auto"] if kernels.numba_module() else ["numpy"]}.get(
        args.kernels, [args.kernels])
    threads = set_threads(args.threads)
    print_setup()
    results = []
    if "base" in workloads:
        for ks in sets:
            with kernels.use_kernels(ks):
                kernels.clear_used()
                m = base_workload(args.pairs)
                m["name"] += f"; kernels {ks}" + (" (compiled twins)" if ks != "numpy" else " (the NumPy references)")
                print(f"\nkernels {ks}: {kernels.summary()}")
                results.append(m)
                report(m, threads)
    if "minilm" in workloads:
        results.append(minilm_workload(args.pairs, args.batch_size, args.minilm_batch))
        report(results[-1], 1)
    if args.figure:
        draw(results, args.figure)
    if args.by_op:
        by_op(sets, args.by_op)


if __name__ == "__main__":
    main()
