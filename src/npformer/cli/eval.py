"""``npformer eval DIR``: score a trained run on its task's held-out data and print the metrics as JSON.

The default draw (the run's seed, the task's default size) is the one training ended with, so
``npformer eval runs/dates`` reproduces metrics.json's held-out numbers.
"""
from __future__ import annotations

import json

HELP = "score a trained run on held-out data (JSON)"
DESCRIPTION = "Evaluate a run directory on its task's held-out split; prints JSON."


def add_arguments(p) -> None:
    p.add_argument("run", metavar="DIR", help="a run directory written by npformer train")
    p.add_argument("--seed", type=int, metavar="S", help="seed of the held-out draw (default: the run's seed)")
    p.add_argument("--n", type=int, metavar="N", help="held-out examples (default: the task's)")


def run(args) -> int:
    from ..train.checkpoint import load_run
    from . import CLIError

    if args.n is not None and args.n < 1:
        raise CLIError(f"--n must be >= 1, got {args.n}")
    r = load_run(args.run)
    seed = r.config["train"].get("seed", 0) if args.seed is None else args.seed
    metrics = r.task.evaluate(r.model, n=args.n, seed=seed)
    print(json.dumps({"task": r.config["task"], "run": str(r.path), "step": r.step, "seed": seed,
                      "primary_metric": r.task.primary_metric, **metrics}, indent=2))
    return 0
