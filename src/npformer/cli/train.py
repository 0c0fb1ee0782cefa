"""``npformer train TASK``: train a model on a task, into a run directory.

    npformer train dates                              # the task's defaults, into runs/dates
    npformer train copy --steps 300 --seed 1 --out runs/copy1
    npformer train text --data book.txt --minutes 10 --set d_model=192 --set lr=1e-3
    npformer train dates --resume --steps 4000        # continue runs/dates to step 4000
    npformer train dates --engine torch --nproc 2     # the same run, computed by PyTorch in 2 processes

``--engine torch`` trains ``npformer.to_torch(model)`` with everything else as ``--engine numpy`` does
it (``npformer.interop.engine``); with --nproc N > 1 (or --nnodes M > 1) PyTorch's launcher starts N
workers here (``npformer.interop.launch``), this process holds the run's lock and prepares it (start
or resume) and rank 0 writes it, in npformer's format: every command reads it, --resume with either engine.

One process at a time trains a run directory: while one does, another ``npformer train`` into the same
--out, with or without --resume or --force, stops with one line and exit code 2 (the lock is the
kernel's, so a killed trainer leaves none). A write that fails (disk full) stops with one line naming
the file and exit code 2; the last checkpoint stays, and --resume continues from it. Ctrl-C saves the
step in progress and exits with code 130; a non-finite loss exits with code 1. A torch worker that
dies stops the run with one line naming its rank, exit code 1; the last checkpoint stays.

Run directories (``npformer.train.rundir``): --force deletes only the files npformer writes there; a
directory holding any other file or folder stops it, deleting nothing, with one line naming that entry.
An --out that is a symbolic link, or that holds one at a name npformer writes, stops the command with
one line (exit code 2): npformer trains only into a real directory and never writes through a link.
trainer_state.json may name only numpy's bit generators; another stops --resume with one line.
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
    p.add_argument("--force", action="store_true",
                   help="replace an existing run in --out (deletes only npformer's files; any other file there "
                        "stops it)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (nor its lines in a log)")
    p.add_argument("--no-plot", action="store_true", help="do not draw curves.png")
    g = p.add_argument_group("the torch engine (needs PyTorch: pip install 'npformer[torch]')")
    g.add_argument("--engine", choices=("numpy", "torch"), default="numpy",
                   help="numpy (default): npformer's own forward and backward; torch: npformer.to_torch(model) "
                        "in PyTorch, DistributedDataParallel over --nproc workers")
    g.add_argument("--nproc", type=int, metavar="N", help="torch workers on this machine (default 1); each "
                   "computes its share of every batch, the batch size stays as configured")
    g.add_argument("--device", choices=("cpu", "cuda"), help="cpu (default; gloo) or cuda (nccl, one GPU a worker)")
    g.add_argument("--nnodes", type=int, metavar="M", help="machines in the run (default 1); start the same "
                   "command on each, with its --node-rank")
    g.add_argument("--node-rank", type=int, metavar="R", help="this machine's number, 0 .. M-1; machine 0 "
                   "writes the run directory")
    g.add_argument("--rdzv-endpoint", metavar="HOST:PORT", help="machine 0's address and a free port there, "
                   "where the workers meet (with --nnodes > 1)")


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
    engine = _engine(args, task_cls)
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
    if engine and engine["world"] > 1:
        return _launch(args, task_cls, sets, budget, out, engine, t0)
    trainer = _prepare(args, task_cls, sets, budget, out, engine)
    try:
        metrics = trainer.run(progress=not args.no_progress, plot=not args.no_plot)
    except TrainingDiverged as e:
        import sys
        sys.stderr.write(f"npformer train: {e}\n")
        return 1
    _done(metrics, out, args, t0)
    return 0


def _done(metrics: dict, out: Path, args, t0: float) -> None:
    held = metrics["held_out"]
    key = metrics["primary_metric"]
    print(f"done: step {metrics['step']}, held-out {key} {held[key]:.4f} "
          f"(n={held.get('n', '?')}), {_duration(time.monotonic() - t0)} wall, "
          f"{metrics['tokens_per_second']:,.0f} tokens/s")
    print(f"run directory: {out}  (model.safetensors, metrics.json, log.csv"
          f"{'' if args.no_plot else ', curves.png'})")


def _prepare(args, task_cls, sets: dict, budget: dict, out: Path, engine: dict | None, world: int = 1):
    """The trainer of the run in ``out``, resumed or new, holding its lock; a TorchTrainer attached to
    its device when ``engine`` says torch and this process trains alone (``world`` 1)."""
    from ..train.trainer import Trainer

    trainer_cls = Trainer
    if engine and world == 1:
        from ..interop.engine import TorchTrainer
        trainer_cls = TorchTrainer
    trainer = (_resume(args, sets, budget, out, trainer_cls, world) if args.resume
               else _start(args, task_cls, sets, budget, out, trainer_cls, world))
    if engine and trainer_cls is not Trainer:
        try:
            trainer.attach(engine["device"])
        except BaseException:
            trainer.close()
            raise
    return trainer


def _launch(args, task_cls, sets: dict, budget: dict, out: Path, engine: dict, t0: float) -> int:
    """--engine torch with several workers: this process prepares the run and holds its lock (on machine 0),
    PyTorch's launcher runs the workers, rank 0 trains and writes."""
    from ..interop.launch import launch
    from ..train.checkpoint import METRICS, read_json

    trainer = None
    if engine["node_rank"] == 0:
        trainer = _prepare(args, task_cls, sets, budget, out, engine, engine["world"])
    try:
        code = launch(out, engine["nproc"], engine["device"], engine["nnodes"], engine["node_rank"],
                      engine["rdzv_endpoint"], progress=not args.no_progress, plot=not args.no_plot)
    finally:
        if trainer is not None:
            trainer.close()
    if code == 0 and trainer is not None:
        _done(read_json(out / METRICS), out, args, t0)
    elif code == 0:
        workers = f"{engine['nproc']} workers are" if engine["nproc"] > 1 else "1 worker is"
        print(f"machine {engine['node_rank']}: its {workers} done; machine 0 wrote the run")
    return code


def _engine(args, task_cls) -> dict | None:
    """The checked --engine options: None for numpy; for torch {"nproc", "device", "nnodes", "node_rank",
    "rdzv_endpoint", "world"}. One-line errors naming the argument."""
    torch_only = {"--nproc": args.nproc, "--device": args.device, "--nnodes": args.nnodes,
                  "--node-rank": args.node_rank, "--rdzv-endpoint": args.rdzv_endpoint}
    if args.engine == "numpy":
        given = [k for k, v in torch_only.items() if v is not None]
        if given:
            raise CLIError(f"{given[0]} is an option of the torch engine: add --engine torch")
        return None
    nproc, nnodes = 1 if args.nproc is None else args.nproc, 1 if args.nnodes is None else args.nnodes
    node_rank = 0 if args.node_rank is None else args.node_rank
    if nproc < 1:
        raise CLIError(f"--nproc must be >= 1, got {nproc}")
    if nnodes < 1:
        raise CLIError(f"--nnodes must be >= 1, got {nnodes}")
    if not 0 <= node_rank < nnodes:
        raise CLIError(f"--node-rank must be in [0, {nnodes}) for --nnodes {nnodes}, got {node_rank}")
    if (nnodes > 1) != (args.rdzv_endpoint is not None):
        raise CLIError("--nnodes > 1 needs --rdzv-endpoint HOST:PORT (machine 0's address and a free port)"
                       if nnodes > 1 else "--rdzv-endpoint is for several machines: give --nnodes too")
    if args.rdzv_endpoint is not None and not _is_endpoint(args.rdzv_endpoint):
        raise CLIError(f"--rdzv-endpoint must be HOST:PORT, e.g. 10.0.0.1:29500, got {args.rdzv_endpoint!r}")
    device = args.device or "cpu"
    _check_torch(device, nproc)
    from ..interop.engine import check_engine_kind
    check_engine_kind(args.task, task_cls.model_kind)
    return {"nproc": nproc, "device": device, "nnodes": nnodes, "node_rank": node_rank,
            "rdzv_endpoint": args.rdzv_endpoint, "world": nproc * nnodes}


def _is_endpoint(text: str) -> bool:
    host, _, port = text.rpartition(":")
    return bool(host) and port.isdigit() and 0 < int(port) < 65536


def _check_torch(device: str, nproc: int) -> None:
    """CLIError unless torch is installed and ``device`` can hold ``nproc`` workers."""
    try:
        import torch
    except ImportError:
        raise CLIError("--engine torch needs PyTorch, which is not installed; "
                       "install it with: pip install 'npformer[torch]'") from None
    if device == "cuda":
        if not torch.cuda.is_available():
            raise CLIError(f"--device cuda: CUDA is not available here (torch {torch.__version__}); use --device cpu")
        if nproc > torch.cuda.device_count():
            raise CLIError(f"--nproc {nproc} with --device cuda needs {nproc} GPUs, one a worker; "
                           f"this machine has {torch.cuda.device_count()}")


def _resume(args, sets: dict, budget: dict, out: Path, trainer_cls, world: int = 1):
    """The trainer of the run in ``out``, from its last checkpoint: only train settings may change."""
    from ..train.checkpoint import read_config
    from ..train.trainer import RESUMABLE

    if sets["model"] or sets["data"]:
        raise CLIError("--resume continues a run as it was configured: --set may change only "
                       + ", ".join(RESUMABLE))
    if args.seed is not None:
        seed = read_config(out)["train"]["seed"]
        if args.seed != seed:
            raise CLIError(f"{out} was trained with seed {seed}; --resume keeps it (drop --seed)")
    _check_workers(read_config(out)["train"]["batch_size"], world)
    trainer = trainer_cls.resume(out, task_name=args.task, overrides={**sets["train"], **budget}, data_path=args.data)
    print(f"resuming {args.task} in {out} at step {trainer.step}")
    return trainer


def _start(args, task_cls, sets: dict, budget: dict, out: Path, trainer_cls, world: int = 1):
    """The trainer of a new run in ``out``: the task's defaults <- --set <- --steps/--minutes <- --seed."""
    from ..train.trainer import TrainConfig

    task = task_cls.create(sets["data"], data_path=args.data)
    train_cfg = {**task.default_train_config(), **sets["train"], **budget}
    if args.seed is not None:
        train_cfg["seed"] = args.seed
    train = TrainConfig(**train_cfg)
    _check_workers(train.batch_size, world)
    trainer = trainer_cls.start(task, sets["model"], train, out, force=args.force)
    cfg = trainer.cfg
    budget_text = " and ".join(x for x in (f"{cfg.steps} steps" if cfg.steps else "",
                                           f"{cfg.minutes:g} minutes" if cfg.minutes else "") if x)
    print(f"training {task.name}: {type(trainer.model).__name__} with {trainer.model.num_parameters():,} "
          f"parameters, {budget_text}, batch {cfg.batch_size}, seed {cfg.seed} -> {out}")
    return trainer


def _check_workers(batch_size: int, world: int) -> None:
    if batch_size < world:
        raise CLIError(f"batch_size {batch_size} is smaller than the {world} workers (--nproc x --nnodes): "
                       "each worker needs at least one example a step")
