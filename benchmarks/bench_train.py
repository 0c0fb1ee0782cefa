"""The training targets of issue 4, measured with the commands a user types:

    npformer train copy    -> 100% held-out exact match within 1 minute
    npformer train dates   -> finishes within 5 minutes with >= 99.5% held-out exact match

Each command runs with its defaults in a temporary directory; the wall time is the whole command
(start-up, training, evaluations, checkpoints, the figure). Prints one line per task.

    python benchmarks/bench_train.py [copy] [dates] [--seed S]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGETS = {"copy": (60.0, 1.0), "dates": (300.0, 0.995)}      # (seconds at most, exact match at least)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("tasks", nargs="*", metavar="TASK", help="copy and/or dates (default: both)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    args.tasks = args.tasks or list(TARGETS)
    bad = [t for t in args.tasks if t not in TARGETS]
    if bad:
        p.error(f"unknown task {bad[0]!r}; choose from {', '.join(TARGETS)}")
    exe = [sys.executable, "-m", "npformer"]
    print(f"cpus: {os.cpu_count()}, load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    for task in args.tasks:
        with tempfile.TemporaryDirectory() as d:
            out = Path(d) / task
            t0 = time.monotonic()
            proc = subprocess.run(exe + ["train", task, "--out", str(out), "--seed", str(args.seed), "--no-progress"],
                                  capture_output=True, text=True)
            wall = time.monotonic() - t0
            if proc.returncode:
                print(f"{task}: FAILED (exit {proc.returncode}): {proc.stderr.strip()[-300:]}")
                continue
            m = json.loads((out / "metrics.json").read_text())
            held = m["held_out"]
            limit, need = TARGETS[task]
            ok = wall <= limit and held["exact_match"] >= need
            print(f"{task}: {wall:.1f} s wall (target <= {limit:.0f} s), {m['step']} steps, "
                  f"{m['cpu_seconds']:.1f} CPU s in steps, held-out exact match {held['exact_match']:.4f} "
                  f"of {held['n']} (target >= {need}) -> {'MET' if ok else 'NOT MET'}")


if __name__ == "__main__":
    main()
