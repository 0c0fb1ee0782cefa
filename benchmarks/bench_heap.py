"""Training steps with and without ``workspace.keep_heap()``: page faults and time per step.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/bench_heap.py
    (options: --processes 3 --steps 10 --threads N; a smoke test: --processes 1 --steps 2)

glibc's malloc hands the top of its heap back to the operating system when more than a threshold
of it is free, as at the end of every training step, and the next step faults those pages in
again; ``keep_heap()`` (ops/workspace.py), which the trainer holds for a run, keeps them. Its
settings hold for the whole process, and glibc's own adaptive ones cannot be restored once changed,
so the two settings cannot alternate in one process: each runs in fresh processes instead,
--processes of each, alternating (plain, kept, plain, kept, ...). A process builds the DecoderLM of
bench_small.py's three sizes (GPT-style, dropout 0.1, float32), takes 3 untimed steps (forward, loss,
backward, Adam) and then --steps timed ones, and reports the median step time and the page faults
per step (``ru_minflt``). Printed per size: each setting's median over its processes, and the ratio
kept / plain. Both settings must give the same loss after the same steps (exit status 1 if not).
Elsewhere than glibc keep_heap does nothing, and the script says so and exits.
"""
from __future__ import annotations

import argparse
import functools
import json
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

from _common import (
    SMALL_ADAM,
    SMALL_SIZES,
    add_threads_arg,
    check,
    print_setup,
    set_threads,
    small_batch,
    small_lm,
    small_step,
)


def child(kept: bool, steps: int) -> dict:
    import contextlib

    from npformer.ops import workspace
    from npformer.train import Adam
    out = {}
    with workspace.keep_heap() if kept else contextlib.nullcontext():
        for d, layers, b, t in SMALL_SIZES:
            model, (x, y) = small_lm(d, layers, t), small_batch(b, t)
            model.train()
            opt, rng = Adam(model.state_dict(), **SMALL_ADAM), np.random.default_rng(1)
            step = functools.partial(small_step, model, opt, x, y, rng)
            for _ in range(3):
                step()
            times, f0 = [], resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            for _ in range(steps):
                t0 = time.perf_counter()
                loss = step()
                times.append(time.perf_counter() - t0)
            faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / steps
            out[str(d)] = {"ms": statistics.median(times) * 1e3, "faults": faults, "loss": loss}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--processes", type=int, default=3, help="fresh processes per setting (default 3)")
    ap.add_argument("--steps", type=int, default=10, help="timed steps per size and process (default 10)")
    ap.add_argument("--child", choices=["plain", "kept"], help=argparse.SUPPRESS)
    add_threads_arg(ap)
    args = ap.parse_args()
    if args.processes < 1 or args.steps < 1:
        raise SystemExit("--processes and --steps must be >= 1")
    threads = set_threads(args.threads)
    if args.child:
        print(json.dumps(child(args.child == "kept", args.steps)))
        return
    from npformer.ops import workspace
    print_setup()
    if workspace._glibc() is None:
        print("this C library is not glibc: keep_heap does nothing here, nothing to compare")
        return
    print(f"DecoderLM training steps, plain vs inside workspace.keep_heap(), {args.processes} fresh process(es) "
          f"each, alternating; {args.steps} timed steps per size after 3 untimed; numpy's BLAS on {threads} "
          "thread(s)")
    runs: dict = {"plain": [], "kept": []}
    for _ in range(args.processes):
        for setting in runs:
            cmd = [sys.executable, __file__, "--child", setting, "--steps", str(args.steps), "--threads", str(threads)]
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                print(done.stderr, file=sys.stderr)
                raise SystemExit(f"the {setting} process failed (exit status {done.returncode})")
            runs[setting].append(json.loads(done.stdout.strip().splitlines()[-1]))
    for d, layers, b, t in SMALL_SIZES:
        k = str(d)
        check(f"d_model {d}: the loss after the same steps, plain vs kept",
              abs(runs["plain"][0][k]["loss"] - runs["kept"][0][k]["loss"]), 0.0)
        med = {s: (statistics.median(r[k]["ms"] for r in runs[s]), statistics.median(r[k]["faults"] for r in runs[s]))
               for s in runs}
        print(f"  d_model {d:>3}, {layers} layers, batch {b} x {t}: plain {med['plain'][0]:6.1f} ms, "
              f"{med['plain'][1]:8,.0f} page faults a step; kept {med['kept'][0]:6.1f} ms, {med['kept'][1]:8,.0f} "
              f"faults; kept / plain {med['kept'][0] / med['plain'][0]:.2f}")


if __name__ == "__main__":
    main()
