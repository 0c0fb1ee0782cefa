"""Long sequences: peak memory and time of one DecoderLM training step, tiled attention vs exact.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/bench_long_attention.py
    (options: --lengths 1024,2048,4096,8192,16384 --exact-max 4096 --time-at 2048 --repeats 5
     --procs 3 --png long_attention.png [--png-memory-only] --threads N; --crossover (attention op
     alone, T = 64..1,024, the threshold nn/attention.py uses); --tune (block sizes at --time-at);
     --prefill (the KV cache's first step on a T-token prompt, inference); a smoke test:
     --lengths 256,512 --time-at 512 --repeats 2, and --prefill --lengths 256,512 --exact-max 512)

The step: a DecoderLM (d_model 128, 4 heads, 2 layers, d_ff 1024, vocabulary 256, learned
positions, dropout 0.1, float32), batch 1, T tokens, forward, cross-entropy and backward
(``model.loss``), in training mode. "tiled" runs ops/flash_attention.py (what training picks for
long sequences), "exact" the reference ops/attention.py, which keeps the (B, H, T, T) weights; the
path is forced by setting ``npformer.nn.attention.TILED_MIN_SCORES``.

Memory: each (T, path) runs in --procs fresh child processes (default 3), one after another, each
of which reports its peak resident set size (``resource.getrusage(RUSAGE_SELF).ru_maxrss``,
everything the process held: Python, numpy, the model, the step) and the step's time; the table
gives the median peak with the range of the processes' peaks, and the median time. The peaks do
not depend on what else the machine runs; the times do. The exact path is only run up to
--exact-max (at 8,192 it needs several GB; at 16,384 over 10 GB). --png draws the median peaks
(the range as bars) and times against T; --png-memory-only leaves the times out.

Time at --time-at: in this process, the two paths alternate, the order rotating each round (tiled
exact, exact tiled, ...), after a warm-up, without dropout so that both compute the same thing; the
medians and their ratio are printed, and the run exits with status 1 when their losses or gradients
differ. The attention op alone (forward and backward, causal, 4 heads of 32) is timed the same way; there, and in
--crossover and --tune, every tiled variant's gradients must match the exact op's within 1e-4
(relative to the largest entry).

--prefill: the same model in eval mode, a KV cache's first step over a T-token prompt
(``decode.make_stepper(model).step``), then one more token; fresh processes as above. "tiled" is
what the cache picks for a long prompt, "exact" builds the (1, 1, T, T) mask and (1, 4, T, T)
scores; the path is forced by ``npformer.nn.attention.TILED_MIN_SCORES`` too (the cache reads it
there). Both paths' last logits must agree within 1e-4 at the lengths where both run, every tiled process against every
exact one (exit status 1 otherwise).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

from _common import add_threads_arg, alternate, check, print_ratio, print_setup, print_times, set_threads

PATHS = {"tiled": 0, "exact": 2**62}           # TILED_MIN_SCORES that forces each path


def make_model(t: int, dropout: float):
    from npformer.models import DecoderLM, DecoderLMConfig
    cfg = DecoderLMConfig(vocab_size=256, d_model=128, n_heads=4, d_ff=1024, n_layers=2, max_len=t,
                          dropout=dropout)
    return DecoderLM(cfg, rng=0)                                          # float32, training mode


def step(model, ids, seed: int = 0):
    """One training step's forward, loss and backward: (loss, grads)."""
    return model.loss(ids[:, :-1], ids[:, 1:], rng=np.random.default_rng(seed))


def use_path(path: str) -> None:
    import npformer.nn.attention as att
    att.TILED_MIN_SCORES = PATHS[path]


def child(t: int, path: str) -> None:
    """Run in a fresh process: one step at T tokens, print {"peak_mb", "seconds", "loss"} as JSON."""
    use_path(path)
    model = make_model(t, dropout=0.1)
    ids = np.random.default_rng(1).integers(0, 256, size=(1, t + 1))     # (1, T + 1)
    t0 = time.perf_counter()
    loss, grads = step(model, ids)
    seconds = time.perf_counter() - t0
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss          # Linux: kilobytes
    assert np.isfinite(loss) and all(np.isfinite(g).all() for g in grads.values())
    print(json.dumps({"peak_mb": peak_kb / 1024, "seconds": seconds, "loss": loss}))


def prefill_child(t: int, path: str) -> None:
    """In a fresh process: a KV cache's first step on T tokens and one step after it; prints
    {"peak_mb", "seconds", "last"} (the second step's logits) as JSON."""
    from npformer.decode import make_stepper

    use_path(path)                                                        # the KV cache asks nn.attention
    model = make_model(t + 1, dropout=0.1).eval()
    ids = np.random.default_rng(1).integers(0, 256, size=(1, t + 1))     # (1, T + 1)
    t0 = time.perf_counter()
    stepper = make_stepper(model, batch=1)
    stepper.step(ids[:, :t])                                              # (1, T, V): the prompt
    last = stepper.step(ids[:, t:])                                       # (1, 1, V)
    seconds = time.perf_counter() - t0
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"peak_mb": peak_kb / 1024, "seconds": seconds, "last": last.ravel().tolist()}))


def run_child(t: int, path: str, threads: int, flag: str = "--child") -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), flag, str(t), path, "--threads", str(threads)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        return {"error": (res.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(res.stdout.strip().splitlines()[-1])


def run_children(t: int, path: str, threads: int, procs: int, flag: str = "--child") -> dict:
    """``procs`` fresh processes of one (T, path), one after another: the median peak and its range
    over them, the median seconds, and every run's own report (under "runs"); an "error" when one
    of them failed."""
    runs = [run_child(t, path, threads, flag) for _ in range(procs)]
    bad = [r["error"] for r in runs if "error" in r]
    if bad:
        return {"error": f"{len(bad)} of {procs} processes failed: {bad[0]}"}
    peaks = [r["peak_mb"] for r in runs]
    return {"peak_mb": statistics.median(peaks), "peak_min": min(peaks), "peak_max": max(peaks),
            "seconds": statistics.median(r["seconds"] for r in runs), "runs": runs}


STEP_TITLE = ("peak resident memory of one training step (DecoderLM d_model 128, 4 heads, 2 layers, batch 1, "
              "float32, dropout 0.1)")
PREFILL_TITLE = ("peak resident memory and time of a KV cache's prefill on a T-token prompt, then one token "
                 "(the DecoderLM above in eval mode)")


def memory_table(lengths, exact_max: int, threads: int, procs: int, flag: str = "--child",
                 title: str = STEP_TITLE) -> dict:
    print(f"\n{title}:\neach cell the median of {procs} fresh processes, the range of their peaks in brackets "
          f"(load average now {os.getloadavg()[0]:.2f}: it slows the times, not the peaks)")
    print(f"  {'T':>6}  {'tiled MB':>9} {'(min-max)':>13} {'tiled s':>8}  {'exact MB':>9} {'(min-max)':>13} "
          f"{'exact s':>8}")
    rows = {}
    for t in lengths:
        row = {"tiled": run_children(t, "tiled", threads, procs, flag)}
        row["exact"] = run_children(t, "exact", threads, procs, flag) if t <= exact_max else {"skipped": True}
        rows[t] = row
        cells = []
        for p in ("tiled", "exact"):
            r = row[p]
            if "peak_mb" in r:
                span = f"({r['peak_min']:.0f}-{r['peak_max']:.0f})"
                cells.append(f"{r['peak_mb']:9.0f} {span:>13} {r['seconds']:8.2f}")
            else:
                cells.append(f"{'(not run)' if 'skipped' in r else 'failed':>32}")
        print(f"  {t:>6}  {cells[0]}  {cells[1]}", flush=True)
        for p in ("tiled", "exact"):
            if "error" in row[p]:
                print(f"    {p} at T={t} failed: {row[p]['error']}")
    return rows


def step_times(t: int, repeats: int) -> float:
    """Both paths alternately at T tokens, no dropout; exit 1 when they disagree. Returns tiled/exact."""
    model = make_model(t, dropout=0.0)
    ids = np.random.default_rng(1).integers(0, 256, size=(1, t + 1))     # (1, T + 1)

    def run(path):
        def f():
            use_path(path)
            return step(model, ids)
        return f

    print(f"\none training step at T = {t} (forward, loss, backward; no dropout), alternating:")
    times, out = alternate({"tiled": run("tiled"), "exact": run("exact")}, repeats)
    med = print_times(times)
    ratio = print_ratio(med, "tiled", "exact")
    (lt, gt), (le, ge) = out["tiled"], out["exact"]
    check("loss |tiled - exact|", abs(lt - le), 1e-4)
    worst = max(float(np.abs(gt[k] - ge[k]).max() / max(np.abs(ge[k]).max(), 1e-30)) for k in ge)
    check("worst gradient, relative to its largest entry", worst, 1e-3)
    return ratio


def op_sides(t: int, batch: int = 1, causal: bool = True, blocks=None):
    from npformer.ops import attention_backward, attention_forward
    from npformer.ops.flash_attention import flash_attention_backward, flash_attention_forward
    rng = np.random.default_rng(0)
    q, k, v, dout = (rng.normal(size=(batch, 4, t, 32)).astype(np.float32) for _ in range(4))   # (B, H, T, D)
    sides = {"exact": lambda: attention_backward(dout, attention_forward(q, k, v, causal=causal)[2])}
    for bq, bk in blocks or [(None, None)]:
        kw = {} if bq is None else {"block_q": bq, "block_k": bk}
        name = "tiled" if bq is None else f"tiled {bq}x{bk}"
        sides[name] = (lambda kw=kw: flash_attention_backward(dout, flash_attention_forward(
            q, k, v, causal=causal, **kw)[1]))
    return sides


def check_op(out: dict, label: str) -> None:
    """Every tiled side's gradients (dq, dk, dv) against the exact op's, relative to the largest entry."""
    worst = max(float(np.abs(a - b).max() / np.abs(b).max())
                for name, grads in out.items() if name != "exact"
                for a, b in zip(grads, out["exact"], strict=True))
    check(label, worst, 1e-4)


def op_times(t: int, repeats: int) -> float:
    print(f"\nthe attention op alone at T = {t} (causal, forward + backward, 1 x 4 heads of 32, float32):")
    times, out = alternate(op_sides(t), repeats)
    med = print_times(times)
    ratio = print_ratio(med, "tiled", "exact")
    check_op(out, "op gradients, relative")
    return ratio


def crossover(repeats: int) -> None:
    print("\nthe attention op alone, forward + backward, causal, 4 heads of 32, float32, B x T = 4,096 tokens:")
    for t in (64, 128, 256, 512, 1024):
        times, out = alternate(op_sides(t, batch=max(1, 4096 // t)), repeats)
        med = {k: float(np.median(v)) for k, v in times.items()}
        print(f"  T = {t:5d}: exact {med['exact'] * 1e3:8.1f} ms, tiled {med['tiled'] * 1e3:8.1f} ms, "
              f"tiled / exact {med['tiled'] / med['exact']:.2f}", flush=True)
        check_op(out, f"T = {t}: op gradients, relative")


def tune(t: int, repeats: int) -> None:
    blocks = [(bq, bk) for bq in (64, 128, 256) for bk in (128, 256, 512, 1024)]
    print(f"\nblock sizes at T = {t} (the op alone, causal, forward + backward), alternating:")
    times, out = alternate(op_sides(t, blocks=blocks), repeats)
    print_times(dict(sorted(times.items(), key=lambda kv: np.median(kv[1]))))
    check_op(out, f"op gradients of every block size against the exact op's, relative (worst of {len(blocks)})")


def draw(rows: dict, path: str, procs: int, times: bool = True) -> None:
    """Peak memory against T (the median of the fresh processes, their range as bars) and, unless
    ``times`` is false, the step's median seconds beside it."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2 if times else 1, figsize=(10, 4) if times else (5.5, 4), squeeze=False)
    axes = axes[0]
    for p, style in (("tiled", "o-"), ("exact", "s--")):
        ts = [t for t, r in rows.items() if "peak_mb" in r[p]]
        mid = np.array([rows[t][p]["peak_mb"] for t in ts])
        span = np.array([[mid[i] - rows[t][p]["peak_min"], rows[t][p]["peak_max"] - mid[i]] for i, t in enumerate(ts)])
        axes[0].errorbar(ts, mid, yerr=span.T.reshape(2, -1), fmt=style, capsize=3, label=p)
        if times:
            axes[1].plot(ts, [rows[t][p]["seconds"] for t in ts], style, label=p)
    labels = (f"peak resident memory (MB), median of {procs}", "seconds per step")
    for ax, label in zip(axes, labels, strict=False):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length T")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].axhline(1536, color="grey", lw=0.8, label="1.5 GB")
    for ax in axes:
        ax.legend()
    fig.suptitle("DecoderLM training step (d_model 128, 4 heads, 2 layers, batch 1, float32)",
                 fontsize="large" if times else "medium")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", default="1024,2048,4096,8192,16384", help="T values of the memory table")
    ap.add_argument("--exact-max", type=int, default=4096, help="longest T the exact path runs (default 4096)")
    ap.add_argument("--time-at", type=int, default=2048, help="T of the alternating timing (default 2048)")
    ap.add_argument("--repeats", type=int, default=5, help="timed rounds of each side (default 5)")
    ap.add_argument("--procs", type=int, default=3,
                    help="fresh processes per memory measurement, their median reported (default 3)")
    ap.add_argument("--png", default=None, help="draw memory and time against T into this PNG")
    ap.add_argument("--png-memory-only", action="store_true",
                    help="leave the time panel out of the PNG (for a run on a busy machine: load "
                         "changes the times, not the peaks)")
    ap.add_argument("--crossover", action="store_true", help="only: the op alone at T = 64..1,024")
    ap.add_argument("--tune", action="store_true", help="only: block sizes of the op at --time-at")
    ap.add_argument("--prefill", action="store_true", help="only: the KV cache's prefill at --lengths")
    ap.add_argument("--child", nargs=2, metavar=("T", "PATH"), help=argparse.SUPPRESS)
    ap.add_argument("--prefill-child", nargs=2, metavar=("T", "PATH"), help=argparse.SUPPRESS)
    add_threads_arg(ap)
    args = ap.parse_args()
    threads = set_threads(args.threads)
    if args.procs < 1:
        raise SystemExit(f"--procs must be >= 1, got {args.procs}")
    if args.child:
        child(int(args.child[0]), args.child[1])
        return
    if args.prefill_child:
        prefill_child(int(args.prefill_child[0]), args.prefill_child[1])
        return
    print_setup()
    if args.crossover:
        crossover(args.repeats)
        return
    if args.tune:
        tune(args.time_at, args.repeats)
        return
    lengths = [int(x) for x in args.lengths.split(",")]
    if args.prefill:
        rows = memory_table(lengths, args.exact_max, threads, args.procs, "--prefill-child", PREFILL_TITLE)
        for t, row in rows.items():
            if "runs" in row["tiled"] and "runs" in row["exact"]:       # every process of each path
                diff = max(float(np.abs(np.subtract(a["last"], b["last"])).max())
                           for a in row["tiled"]["runs"] for b in row["exact"]["runs"])
                check(f"prefill at T={t}, next-token logits |tiled - exact|, worst of "
                      f"{args.procs} x {args.procs} process pairs", diff, 1e-4)
    else:
        rows = memory_table(lengths, args.exact_max, threads, args.procs)
        op_times(args.time_at, args.repeats)
        step_times(args.time_at, args.repeats)
        if args.png:
            draw(rows, args.png, args.procs, times=not args.png_memory_only)
    failed = [f"{p} at T={t}" for t, r in rows.items() for p in r if "error" in r[p]]
    if failed:
        print("FAILED: " + ", ".join(failed), file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
