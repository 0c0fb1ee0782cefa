"""Two revisions of npformer side by side: the small models' training step, each side in its own processes.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/bench_revisions.py --base REV
    (options: --rounds 12 --steps 15 --sizes 0,1,2; a smoke test: --rounds 2 --steps 2)

What a change to the package did to a step, without torch in the ratio: ``--base`` (a git revision) is
checked out into a temporary worktree (removed at the end), and the working tree's code is compared with
it. Each round starts one fresh process per side, the order swapped from one round to the next; a process
times ``--steps`` training steps of bench_small.py's sizes (DecoderLM forward, next-token cross-entropy,
backward, Adam; float32, dropout 0.1; inside ``workspace.keep_heap()``; after 3 untimed steps) and prints
each size's median step. Reported per size: each side's median over the rounds, and the median per-round
ratio working tree / base with its interquartile range (the working tree faster only when the upper quartile
is below 1). Fresh processes, so each side compiles or loads its own kernels (numba keys a kernel's disk
cache by its source file: the base's worktree has its own). Both sides run this interpreter, with numpy's
BLAS and numba as installed; each side imports its own ``src``.

Before timing, each side's loss after three steps at each size is printed: equal bits say the change left the
arithmetic alone (tensor for tensor, the steps' loss agrees to the last bit only if every op did).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import MIN_PAIRS, SMALL_SIZES, print_setup, quartiles

ROOT = Path(__file__).resolve().parents[1]


def worker(sizes: list[int], steps: int) -> None:
    """In a fresh process with one side's src on the path: 'loss' lines, then one line of median ms per size."""
    import time

    import numpy as np
    from threadpoolctl import threadpool_limits

    from _common import SMALL_ADAM, physical_cores, small_batch, small_lm, small_step
    from npformer.ops import workspace
    from npformer.train import Adam

    threadpool_limits(physical_cores())
    medians, losses = [], []
    for idx in sizes:
        d, layers, b, t = SMALL_SIZES[idx]
        model = small_lm(d, layers, t)
        model.train()
        opt = Adam(model.state_dict(), **SMALL_ADAM)
        x, y = small_batch(b, t)
        rng = np.random.default_rng(1)
        with workspace.keep_heap():
            loss = [small_step(model, opt, x, y, rng) for _ in range(3)][-1]
            times = []
            for _ in range(steps):
                t0 = time.perf_counter()
                small_step(model, opt, x, y, rng)
                times.append(time.perf_counter() - t0)
        losses.append(float(loss).hex())
        medians.append(float(np.median(times)) * 1e3)
    print("loss " + " ".join(losses))
    print("ms " + " ".join(f"{m:.4f}" for m in medians))


def run_side(src: Path, sizes: list[int], steps: int) -> tuple[list[str], list[float]]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    env["PYTHONPATH"] = os.pathsep.join([str(src), str(ROOT / "benchmarks")])
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--sizes", ",".join(map(str, sizes)),
           "--steps", str(steps)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=src.parent)
    if r.returncode != 0:
        raise SystemExit(f"bench_revisions: the side at {src} failed:\n{r.stderr[-2000:]}")
    lines = dict(line.split(" ", 1) for line in r.stdout.strip().splitlines() if " " in line)
    return lines["loss"].split(), [float(v) for v in lines["ms"].split()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", help="the git revision to compare the working tree with (a commit, a tag, HEAD~3)")
    ap.add_argument("--rounds", type=int, default=12, help="rounds, one fresh process a side each (default 12)")
    ap.add_argument("--steps", type=int, default=15, help="timed steps a process and size (default 15)")
    ap.add_argument("--sizes", default="0,1,2", help="bench_small.py's sizes by index: 0 d_model 64, 1 128, 2 256")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
        if not sizes or any(not 0 <= s < len(SMALL_SIZES) for s in sizes):
            raise ValueError
    except ValueError:
        raise SystemExit(f"--sizes: expected indices in 0..{len(SMALL_SIZES) - 1}, comma-separated, "
                         f"got {args.sizes!r}") from None
    if args.rounds < 1 or args.steps < 1:
        raise SystemExit("--rounds and --steps must be at least 1")
    if args.worker:
        worker(sizes, args.steps)
        return
    if not args.base:
        raise SystemExit("--base: name the git revision to compare with")
    rev = subprocess.run(["git", "rev-parse", "--verify", f"{args.base}^{{commit}}"], cwd=ROOT,
                         capture_output=True, text=True)
    if rev.returncode != 0:
        raise SystemExit(f"--base: not a commit of this repository: {args.base!r}")
    commit = rev.stdout.strip()
    print_setup()
    print(f"base {args.base} ({commit[:12]}) against the working tree; {args.rounds} rounds of one fresh "
          f"process a side, the order swapped each round; {args.steps} timed steps a process and size")
    with tempfile.TemporaryDirectory(prefix="npformer-base-") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", "--quiet", str(tree), commit], cwd=ROOT, check=True)
        try:
            sides = {"base": tree / "src", "working tree": ROOT / "src"}
            times: dict[str, list[list[float]]] = {name: [] for name in sides}
            for r in range(args.rounds):
                for name in (("base", "working tree") if r % 2 == 0 else ("working tree", "base")):
                    losses, ms = run_side(sides[name], sizes, args.steps)
                    if r == 0:
                        print(f"  {name:12s} loss after 3 steps, per size: {' '.join(losses)}")
                    times[name].append(ms)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)
    for i, idx in enumerate(sizes):
        d, layers, b, t = SMALL_SIZES[idx]
        base = [row[i] for row in times["base"]]
        new = [row[i] for row in times["working tree"]]
        q1, med, q3 = quartiles([n / o for n, o in zip(new, base, strict=True)])
        verdict = "faster" if q3 < 1 else ("slower" if q1 > 1 else "level")
        if args.rounds < MIN_PAIRS:
            verdict += f" (only {args.rounds} rounds: a smoke test, not a claim)"
        print(f"d_model {d:3d}, {layers} layers, {b} x {t}: base {statistics.median(base):.2f} ms, working tree "
              f"{statistics.median(new):.2f} ms; working tree / base per round: median {med:.3f} "
              f"(IQR {q1:.3f}-{q3:.3f}), {verdict}")


if __name__ == "__main__":
    main()
