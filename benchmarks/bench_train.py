"""The training targets of issue 4, measured with the commands a user types:

    npformer train copy    -> 100% held-out exact match within 1 minute
    npformer train dates   -> finishes within 5 minutes with >= 99.5% held-out exact match

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/bench_train.py
    (options: copy and/or dates, --repeats 3 --seed 0 --threads N;
     a smoke test: copy --repeats 1 --steps 50, which reports but does not judge the targets)

Each command runs with its defaults, as a subprocess, in a temporary directory; the wall time is
the whole command (start-up, training, evaluations, checkpoints, the figure). There is one side
here, so the tasks take turns instead (copy, dates, copy, dates, ...) for --repeats rounds, and
each task's time is the median of its rounds. A target is met when that median wall time is
within the limit and every round's held-out exact match reaches the bar; the script exits with
status 1, naming the target, when one is missed or a command fails. With --steps the runs are
shorter than the targets assume, so the targets are printed but not judged.

Threads: each command holds numpy's BLAS to its task's ``blas_threads`` during training and
evaluation (1 for copy and dates: their matrices are small, and on shared cores one thread beat
two), which is what a user gets; --threads N passes ``--set blas_threads=N`` instead. Each round
prints the value the run recorded in its config.json, and the BLAS kernel printed first is the
one the commands load (the same numpy in the same environment). A full run takes three rounds of
one copy and one dates training (docs/performance.md gives their times), and 18 minutes if every run
just meets its time target.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import print_setup

TARGETS = {"copy": (60.0, 1.0), "dates": (300.0, 0.995)}      # (seconds at most, exact match at least)


def run_once(task: str, args) -> dict:
    """One ``npformer train TASK`` in a fresh directory: wall seconds and what the run recorded."""
    cmd = [sys.executable, "-m", "npformer", "train", task, "--seed", str(args.seed), "--no-progress"]
    if args.threads is not None:
        cmd += ["--set", f"blas_threads={args.threads}"]
    if args.steps is not None:
        cmd += ["--steps", str(args.steps)]
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / task
        t0 = time.monotonic()
        proc = subprocess.run(cmd + ["--out", str(out)], capture_output=True, text=True)
        wall = time.monotonic() - t0
        if proc.returncode:
            return {"wall": wall, "error": f"exit {proc.returncode}: {proc.stderr.strip()[-500:]}"}
        m = json.loads((out / "metrics.json").read_text())
        config = json.loads((out / "config.json").read_text())
    return {"wall": wall, "step": m["step"], "cpu": m["cpu_seconds"], "exact": m["held_out"]["exact_match"],
            "n": m["held_out"]["n"], "blas_threads": config["train"]["blas_threads"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("tasks", nargs="*", metavar="TASK", help="copy and/or dates (default: both)")
    p.add_argument("--seed", type=int, default=0, help="the seed of every run (default 0, the command's)")
    p.add_argument("--repeats", type=int, default=3, help="runs of each task, taking turns (default 3)")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="BLAS threads of the runs, as --set blas_threads=N (default: the task's own, 1)")
    p.add_argument("--steps", type=int, default=None, metavar="N",
                   help="train N steps instead of the task's default (a smoke test; targets not judged)")
    args = p.parse_args()
    args.tasks = args.tasks or list(TARGETS)
    bad = [t for t in args.tasks if t not in TARGETS]
    if bad:
        p.error(f"unknown task {bad[0]!r}; choose from {', '.join(TARGETS)}")
    if args.repeats < 1 or (args.threads is not None and args.threads < 1):
        p.error("--repeats and --threads must be >= 1")

    import numpy  # noqa: F401  (loads the BLAS that print_setup describes, the one the commands load)

    print_setup()
    print("(the threads above are this script's; each command holds the BLAS to its blas_threads while it "
          "trains and evaluates, printed per round)")
    runs: dict[str, list[dict]] = {t: [] for t in args.tasks}
    failed = []
    for r in range(args.repeats):
        for task in args.tasks:
            res = run_once(task, args)
            runs[task].append(res)
            if "error" in res:
                failed.append(f"{task} round {r + 1} failed ({res['error']})")
                print(f"round {r + 1}: {task}: FAILED after {res['wall']:.1f} s, {res['error']}", flush=True)
                continue
            print(f"round {r + 1}: {task}: {res['wall']:.1f} s wall, {res['step']} steps, {res['cpu']:.1f} CPU s "
                  f"in steps, held-out exact match {res['exact']:.4f} of {res['n']}, BLAS threads "
                  f"{res['blas_threads']}", flush=True)

    missed = []
    for task, rs in runs.items():
        ok = [x for x in rs if "error" not in x]
        if not ok:
            continue
        limit, need = TARGETS[task]
        wall = statistics.median(x["wall"] for x in ok)
        worst = min(x["exact"] for x in ok)
        print(f"{task}: median wall {wall:.1f} s over {len(ok)} run(s) (target <= {limit:.0f} s), lowest held-out "
              f"exact match {worst:.4f} (target >= {need})", end="")
        if args.steps is not None:
            print(" -> not judged (--steps)")
            continue
        time_ok, acc_ok = wall <= limit, worst >= need
        print(f" -> time {'met' if time_ok else 'MISSED'}, accuracy {'met' if acc_ok else 'MISSED'}")
        if not time_ok:
            missed.append(f"{task}: time target missed, median {wall:.1f} s > {limit:.0f} s")
        if not acc_ok:
            missed.append(f"{task}: accuracy target missed, held-out exact match {worst:.4f} < {need}")
    if failed or missed:
        for line in failed + missed:
            print(f"FAILED: {line}", file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
