"""``npformer study NAME``: one of the lesson's misconceptions, tested on trained models.

    npformer study heads                      # 1-16 heads at d_model 64, 3 seeds x 300 steps
    npformer study positions --seeds 1        # sinusoidal, learned, no positions; shuffled inputs
    npformer study understanding --steps 300  # untrained vs trained, depth, no feed-forward
    npformer study heads --task tabletop      # the heads study on the tabletop policy
    npformer study closed-loop                # the gripper policy: open against closed loop
    npformer study chunks                     # action chunks k = 1, 4, 8, executed three ways
    npformer study drift                      # clean cloning, DART, DAgger at equal labels
    npformer study data                       # success against demonstrations and action bins

Each study trains its settings x seeds with the task's recipe (``--steps`` and ``--set`` change it),
shows one progress bar for the whole study, prints the results table and a sentence chosen from the
numbers, and writes NAME.csv, NAME.png and NAME.txt (the printed report) into --out. The runs train
side by side, one process per core (``--jobs``), each on one BLAS thread; the numbers are the same as
with ``--jobs 1``, only faster. Last it prints
how long the study took and the machine's load average at its start and end, the two figures the
studies page (docs/studies.md) gives beside each study's table.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from ..studies import STUDIES
from . import CLIError

# the default --jobs at most: each worker holds its run's data (3,000 gripper demonstrations peak near 0.8 GB)
DEFAULT_JOBS_CAP = 8
NAMES = tuple(STUDIES)                  # the lesson's misconceptions 1, 2, 3, then the gripper studies
HELP = ("test one of the lesson's misconceptions on trained models (heads, positions, understanding; on the gripper "
        "policy: closed-loop, chunks, drift, data)")
DESCRIPTION = ("Train a study's settings over several seeds, then print its results table and what the numbers "
               "show; write NAME.csv, NAME.png and NAME.txt into --out. Studies: understanding (\"attention "
               "understands the sentence\"), positions (\"attention knows the word order\"), heads (\"more heads "
               "always means a better model\"); and on the gripper policy acting over time: closed-loop, chunks, "
               "drift, data.")


def add_arguments(p) -> None:
    p.add_argument("name", metavar="NAME", help="the study: " + ", ".join(NAMES))
    p.add_argument("--seeds", type=int, metavar="K", help="seeds per setting (default 3)")
    p.add_argument("--steps", type=int, metavar="N", help="training steps per run (default: the study's)")
    p.add_argument("--out", default="runs/studies", metavar="DIR",
                   help="where NAME.csv, NAME.png and NAME.txt go (default: runs/studies)")
    p.add_argument("--task", metavar="TASK", help="the task to train (heads: dates or tabletop; default dates)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a model, train or data setting of every run, e.g. train.lr=3e-3 (repeatable)")
    p.add_argument("--jobs", type=int, metavar="J",
                   help="runs trained at once, each in its own process on one BLAS thread (default: one per core "
                        f"this process may use, at most {DEFAULT_JOBS_CAP} and the number of runs; 1 trains them one "
                        "after another)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (nor its lines in a log)")


def run(args) -> int:
    from ..data.tasks import get_task, model_kind_classes
    from ..settings import parse_overrides
    from ..studies import get_study
    from ..studies.common import Options, run_study
    from ..train.trainer import TrainConfig

    if args.name not in NAMES:
        raise CLIError(f"unknown study {args.name!r}; studies: {', '.join(NAMES)}")
    study = get_study(args.name)
    task = args.task or study.tasks[0]
    for flag, value in (("--seeds", args.seeds), ("--steps", args.steps), ("--jobs", args.jobs)):
        if value is not None and value < 1:
            raise CLIError(f"{flag} must be >= 1, got {value}")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise CLIError(f"--out {out} exists and is not a directory")
    task_cls = get_task(task)
    config_cls, _ = model_kind_classes(task_cls.model_kind)
    sets = parse_overrides(args.set, {"model": config_cls, "train": TrainConfig, "data": task_cls.Settings})
    opts = Options(seeds=args.seeds or study.seeds, steps=args.steps or study.steps.get(task, 1), out=out, task=task,
                   sets=sets, progress=not args.no_progress, jobs=args.jobs or min(usable_cores(), DEFAULT_JOBS_CAP))
    print(f"study {study.name}: \"{study.claim}\" {opts.seeds} seed{'s' if opts.seeds > 1 else ''} x "
          f"{opts.steps} steps per setting, task {task}, {opts.jobs} job{'s' if opts.jobs > 1 else ''}", flush=True)
    load, t0 = _load_average(), time.perf_counter()
    result = run_study(study, opts)
    seconds = round(time.perf_counter() - t0)
    print()
    print(result.report.split("\n\n", 1)[1], end="")
    print("wrote " + ", ".join(str(f) for f in result.files))
    print(f"took {seconds // 60} min {seconds % 60} s; load average {load} at the start, "
          f"{_load_average()} at the end")
    return 0


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity where the system says, else the machine's)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:                                          # macOS, Windows
        return max(1, os.cpu_count() or 1)


def _load_average() -> str:
    """The 1-minute load average, e.g. "1.6" ("unknown" where the system does not say)."""
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except (AttributeError, OSError):
        return "unknown"
