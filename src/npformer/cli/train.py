"""``npformer train TASK``: train a model on a task, into a run directory.

    npformer train dates                              # the task's defaults, into runs/dates
    npformer train copy --steps 300 --seed 1 --out runs/copy1
    npformer train text --data book.txt --minutes 10 --set d_model=192 --set lr=1e-3
    npformer train dates --resume --steps 4000        # continue runs/dates to step 4000

One process at a time trains a run directory: while one does, another ``npformer train`` into the same
--out, with or without --resume or --force, stops with one line and exit code 2 (the lock is the
kernel's, so a killed trainer leaves none). A write that fails (disk full) stops with one line naming
the file and exit code 2; the last checkpoint stays, and --resume continues from it. Ctrl-C saves the
step in progress and exits with code 130; a non-finite loss exits with code 1.
"""
from __future__ import annotations

import time
from pathlib import Path

from . import CLIError

HELP = "train a model on a task (copy, dates, text, ...)"
DESCRIPTION = ("Train a model on a task into a run directory (config.json, model.safetensors, optimizer state, "
               "metrics.json, log.csv, curves.png). Tasks: copy, dates, text (--data FILE), and any other "
               "registered task.")


def add_arguments(p) -> None:
    p.add_argument("task", help="the task: copy, dates, text, ...")
    p.add_argument("--out", metavar="DIR", help="run directory (default: runs/TASK)")
    p.add_argument("--steps", type=int, metavar="N", help="train to step N (default: the task's)")
    p.add_argument("--minutes", type=float, metavar="M",
                   help="also stop after M minutes of this invocation (whichever of --steps and --minutes "
                        "comes first; --set steps=none trains by time alone with the noam schedule)")
    p.add_argument("--seed", type=int, metavar="S", help="seed of every random number (default 0)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a model, train or data setting, e.g. d_model=128, train.lr=1e-3 (repeatable)")
    p.add_argument("--data", metavar="FILE", help="the UTF-8 text file of the text task")
    p.add_argument("--text-encoder", choices=("scratch", "minilm"),
                   help="tabletop: read instructions with the policy's own word table (scratch, the default) "
                        "or through the frozen pretrained all-MiniLM-L6-v2 (minilm); the same as "
                        "--set text_encoder=...")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    p.add_argument("--force", action="store_true", help="replace an existing run in --out")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--no-plot", action="store_true", help="do not draw curves.png")


def _duration(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    return f"{m}m{s:02d}s" if m else f"{s}s"


def run(args) -> int:
    from ..data.tasks import get_task, model_kind_classes
    from ..settings import parse_overrides
    from ..train.trainer import TrainConfig, TrainingDiverged

    task_cls = get_task(args.task)
    out = Path(args.out) if args.out else Path("runs") / args.task
    if args.steps is not None and args.steps < 1:
        raise CLIError(f"--steps must be >= 1, got {args.steps}")
    if args.minutes is not None and not args.minutes > 0:
        raise CLIError(f"--minutes must be > 0, got {args.minutes}")
    if args.resume and args.force:
        raise CLIError("--resume and --force contradict each other")
    config_cls, _ = model_kind_classes(task_cls.model_kind)
    sets = parse_overrides(args.set, {"model": config_cls, "train": TrainConfig, "data": task_cls.Settings})
    if args.text_encoder is not None:                            # a data setting of the tabletop task
        if "text_encoder" not in getattr(task_cls.Settings, "__dataclass_fields__", {}):
            raise CLIError(f"--text-encoder is an option of the tabletop task, not of {args.task!r}")
        sets["data"]["text_encoder"] = args.text_encoder
    budget = {}
    if args.steps is not None:
        budget["steps"] = args.steps
    if args.minutes is not None:
        budget["minutes"] = args.minutes

    t0 = time.monotonic()
    trainer = _resume(args, sets, budget, out) if args.resume else _start(args, task_cls, sets, budget, out)
    try:
        metrics = trainer.run(progress=not args.no_progress, plot=not args.no_plot)
    except TrainingDiverged as e:
        import sys
        sys.stderr.write(f"npformer train: {e}\n")
        return 1
    held = metrics["held_out"]
    key = metrics["primary_metric"]
    print(f"done: step {metrics['step']}, held-out {key} {held[key]:.4f} "
          f"(n={held.get('n', '?')}), {_duration(time.monotonic() - t0)} wall, "
          f"{metrics['tokens_per_second']:,.0f} tokens/s")
    print(f"run directory: {out}  (model.safetensors, metrics.json, log.csv"
          f"{'' if args.no_plot else ', curves.png'})")
    return 0


def _resume(args, sets: dict, budget: dict, out: Path):
    """The trainer of the run in ``out``, from its last checkpoint: only train settings may change."""
    from ..train.checkpoint import read_config
    from ..train.trainer import RESUMABLE, Trainer

    if sets["model"] or sets["data"]:
        raise CLIError("--resume continues a run as it was configured: --set may change only "
                       + ", ".join(RESUMABLE))
    if args.seed is not None:
        seed = read_config(out)["train"]["seed"]
        if args.seed != seed:
            raise CLIError(f"{out} was trained with seed {seed}; --resume keeps it (drop --seed)")
    trainer = Trainer.resume(out, task_name=args.task, overrides={**sets["train"], **budget}, data_path=args.data)
    print(f"resuming {args.task} in {out} at step {trainer.step}")
    return trainer


def _start(args, task_cls, sets: dict, budget: dict, out: Path):
    """The trainer of a new run in ``out``: the task's defaults <- --set <- --steps/--minutes <- --seed."""
    from ..train.trainer import TrainConfig, Trainer

    task = task_cls.create(sets["data"], data_path=args.data)
    train_cfg = {**task.default_train_config(), **sets["train"], **budget}
    if args.seed is not None:
        train_cfg["seed"] = args.seed
    trainer = Trainer.start(task, sets["model"], TrainConfig(**train_cfg), out, force=args.force)
    cfg = trainer.cfg
    budget_text = " and ".join(x for x in (f"{cfg.steps} steps" if cfg.steps else "",
                                           f"{cfg.minutes:g} minutes" if cfg.minutes else "") if x)
    print(f"training {task.name}: {type(trainer.model).__name__} with {trainer.model.num_parameters():,} "
          f"parameters, {budget_text}, batch {cfg.batch_size}, seed {cfg.seed} -> {out}")
    return trainer
