"""The training loop: batches, the paper's optimizer and schedule, held-out evaluation, logs,
checkpoints, and exact resumption.

One step:
    batch        = task.train_batch(data_rng, batch_size)
    loss, grads  = task.loss(model, batch, dropout_rng, label_smoothing)   (forward + backward)
    norm         = clip_by_global_norm(grads, clip_norm)
    optimizer.step(grads, lr=schedule(step))                                 (in place)

Determinism: every random number comes from generators derived from ``seed`` with
``np.random.SeedSequence(seed).spawn``: one initialises the model, one draws the batches, one the
dropout masks. Evaluation draws its held-out examples from its own fixed seed and consumes nothing
from the training generators. A checkpoint stores the weights, Adam's moments, the step and the
generators' states, so a resumed run takes exactly the steps the uninterrupted run would have.

Stopping: at ``steps``, when ``minutes`` run out, on Ctrl-C (the step in progress finishes and is
saved; a second Ctrl-C aborts at once and keeps the last checkpoint), or at a non-finite loss or
gradient (nothing is updated or saved; the last good checkpoint stays).

Faults: one process at a time trains a run directory. ``start`` and ``resume`` take its lock
(``checkpoint.RunLock``; ``RunLocked`` if another process holds it) and ``run`` gives it back when it
ends, however it ends. A failed write (disk full) raises ``WriteError`` naming the file; the last
checkpoint stays loadable and ``resume`` continues from it.
"""
from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import math
import os
import shutil
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..files import atomic_savefig, atomic_write_bytes, atomic_write_json, clean_stale_temporaries, writing
from ..settings import from_dict as settings_from_dict
from .checkpoint import (
    CONFIG,
    LOCK,
    METRICS,
    MODEL,
    OPTIMIZER,
    STATE,
    RunLock,
    check_state_matches,
    read_config,
    read_json,
    read_safetensors,
    save_checkpoint,
)
from .clip import clip_by_global_norm
from .optim import Adam, AdamW
from .probe import record_probe
from .schedules import make_schedule

LOG, EVAL_LOG, CURVES = "log.csv", "eval.csv", "curves.png"
LOG_FIELDS = ["step", "loss", "lr", "grad_norm", "tokens", "seconds"]


class TrainingDiverged(RuntimeError):
    """The loss or the gradient stopped being finite; the message names the step."""


@dataclass
class TrainConfig:
    steps: int | None = 1000             # optimizer updates in all; None = until `minutes` run out
    minutes: float | None = None         # wall-clock budget of this invocation (None = no limit)
    batch_size: int = 64                 # examples per step
    optimizer: str = "adam"              # "adam" (L2 weight decay) or "adamw" (decoupled decay)
    schedule: str = "noam"               # "noam" (paper 5.3), "cosine" (warmup + cosine) or "constant"
    lr: float = 1e-3                     # peak learning rate of "cosine", the rate of "constant"
    lr_scale: float = 1.0                # factor on the "noam" rate d_model^-0.5 * min(s^-0.5, s * w^-1.5)
    warmup: int = 400                    # warmup steps (noam and cosine)
    min_lr: float = 0.0                  # where "cosine" ends
    beta1: float = 0.9                   # Adam's first-moment decay (paper: 0.9)
    beta2: float = 0.98                  # Adam's second-moment decay (paper: 0.98)
    eps: float = 1e-9                    # Adam's epsilon (paper: 1e-9)
    weight_decay: float = 0.0            # decay of the weight matrices (not biases or LayerNorm)
    clip_norm: float | None = 1.0        # clip the global gradient norm to this (None = no clipping)
    label_smoothing: float = 0.1         # paper 5.4: 0.1
    eval_every: int = 250                # evaluate held-out data and save a checkpoint every N steps
    eval_n: int = 500                    # held-out examples per periodic evaluation
    final_eval_n: int | None = None      # held-out examples of the final evaluation (None: the task's default)
    seed: int = 0                        # the one seed every random number derives from
    blas_threads: int | None = None      # BLAS threads during training steps (None: numpy's default)

    def __post_init__(self) -> None:
        if self.steps is None and self.minutes is None:
            raise ValueError("give a budget: steps or minutes (or both)")
        if self.steps is not None and self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        if self.minutes is not None and not self.minutes > 0:
            raise ValueError(f"minutes must be > 0, got {self.minutes}")
        if self.blas_threads is not None and self.blas_threads < 1:
            raise ValueError(f"blas_threads must be >= 1 or None, got {self.blas_threads}")
        if self.final_eval_n is not None and self.final_eval_n < 1:
            raise ValueError(f"final_eval_n must be >= 1 or None, got {self.final_eval_n}")
        for name in ("batch_size", "eval_every", "eval_n"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.optimizer not in ("adam", "adamw"):
            raise ValueError(f"optimizer must be 'adam' or 'adamw', got {self.optimizer!r}")
        if self.schedule not in ("noam", "cosine", "constant"):
            raise ValueError(f"schedule must be 'noam', 'cosine' or 'constant', got {self.schedule!r}")
        if self.warmup < 0 or (self.schedule == "noam" and self.warmup < 1):
            raise ValueError(f"warmup must be >= 1 for noam and >= 0 otherwise, got {self.warmup}")
        if not (self.lr >= 0 and self.lr_scale >= 0 and self.min_lr >= 0 and self.weight_decay >= 0):
            raise ValueError("lr, lr_scale, min_lr and weight_decay must be >= 0, got "
                             f"{self.lr}, {self.lr_scale}, {self.min_lr}, {self.weight_decay}")
        if not (0 <= self.beta1 < 1 and 0 <= self.beta2 < 1 and self.eps > 0):
            raise ValueError(f"need 0 <= beta1, beta2 < 1 and eps > 0, got {self.beta1}, {self.beta2}, {self.eps}")
        if self.clip_norm is not None and not self.clip_norm > 0:
            raise ValueError(f"clip_norm must be > 0 or None, got {self.clip_norm}")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {self.label_smoothing}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# settings that may change when resuming (the rest would make the resumed run a different run)
RESUMABLE = ("steps", "minutes", "eval_every", "eval_n", "final_eval_n", "blas_threads")


def _rng_state(g: np.random.Generator) -> dict:
    return g.bit_generator.state


def _rng_from_state(state: dict) -> np.random.Generator:
    bg = getattr(np.random, state["bit_generator"])()
    bg.state = state
    return np.random.Generator(bg)


def _has_checkpoint(out: Path) -> bool:
    return (out / CONFIG).is_file()


class Trainer:
    """Holds one run: its task, model, optimizer, generators and directory. Build it with
    ``Trainer.start`` (a new run) or ``Trainer.resume``; then ``run()``. The directory's lock is
    held from ``start``/``resume`` until ``run()`` returns or raises (or ``close()``)."""

    def __init__(self, out_dir: Path, task, model, config: dict, train: TrainConfig) -> None:
        self.out, self.task, self.model, self.config, self.cfg = Path(out_dir), task, model, config, train
        params = model.state_dict()
        opt_cls = AdamW if train.optimizer == "adamw" else Adam
        self.optimizer = opt_cls(params, lr=train.lr, betas=(train.beta1, train.beta2), eps=train.eps,
                                 weight_decay=train.weight_decay, decay=lambda k, p: p.ndim >= 2)
        d_model = int(config["model"].get("d_model", 1))
        self.schedule = make_schedule(train.schedule, d_model=d_model, warmup=train.warmup, lr=train.lr,
                                      lr_scale=train.lr_scale, total_steps=train.steps, min_lr=train.min_lr)
        self.step = 0
        self.elapsed = 0.0                     # training seconds, all invocations together
        self.cpu = 0.0                         # CPU seconds of those steps (all threads), ditto
        self.tokens = 0                        # tokens read, all invocations together
        self.metrics: dict = {}
        self.data_rng = self.dropout_rng = None
        self.lock: RunLock | None = None

    def close(self) -> None:
        """Give back the run directory's lock (``run()`` does so when it ends)."""
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    # -- construction ------------------------------------------------------------------------------
    @classmethod
    def start(cls, task, model_config, train: TrainConfig, out_dir, force: bool = False) -> "Trainer":
        """A new run in ``out_dir``. An existing run there is an error unless ``force`` (then it is replaced)."""
        out = Path(out_dir)
        if isinstance(model_config, dict):
            model_config = task.model_config(model_config)                 # checked before touching the disk
        if out.exists() and not out.is_dir():
            raise NotADirectoryError(f"--out {out} exists and is not a directory")
        out.mkdir(parents=True, exist_ok=True)
        lock = RunLock(out)                                              # before looking: a run may be in progress
        try:
            if _has_checkpoint(out):
                old = read_config(out)
                if old["task"] != task.name:
                    raise ValueError(f"{out} holds a {old['task']!r} run, not a {task.name!r} run; "
                                     "choose another --out")
                if not force:
                    raise ValueError(f"{out} already holds a {old['task']!r} run: --resume continues it, "
                                     "--force starts over (deleting it)")
                for p in out.iterdir():                                  # all but the lock we hold
                    if p.name == LOCK:
                        continue
                    if p.is_dir() and not p.is_symlink():
                        shutil.rmtree(p)
                    else:
                        p.unlink()
            init_rng, data_rng, dropout_rng = (np.random.default_rng(s) for s in
                                               np.random.SeedSequence(train.seed).spawn(3))
            model = task.build_model(model_config, rng=init_rng)
            config = {"task": task.name, "model_kind": task.model_kind, "model": dataclasses.asdict(model_config),
                      "train": train.to_dict(), "data": task.to_dict()}
            self = cls(out, task, model, config, train)
            self.lock = lock
            self.data_rng, self.dropout_rng = data_rng, dropout_rng
            atomic_write_json(out / CONFIG, config)
            (out / EVAL_LOG).unlink(missing_ok=True)
            self._write_log_header()
            self.save()                                                  # step 0: a checkpoint exists from the start
            record_probe(out, task, model, 0)                            # the probe's attention before training
        except BaseException:
            lock.release()
            raise
        return self

    @classmethod
    def resume(cls, out_dir, task_name: str | None = None, overrides: dict | None = None,
               data_path: str | None = None) -> "Trainer":
        """Continue the run in ``out_dir`` from its last checkpoint. ``overrides`` may change only
        the budget and evaluation settings (RESUMABLE)."""
        from ..data.tasks import get_task, model_config_from_dict

        out = Path(out_dir)
        read_config(out)                                                 # a run directory? (before locking it)
        lock = RunLock(out)
        try:
            config = read_config(out)
            if task_name is not None and config["task"] != task_name:
                raise ValueError(f"{out} holds a {config['task']!r} run, not a {task_name!r} run")
            task_cls = get_task(config["task"])
            if data_path is not None and not task_cls.uses_data_file:
                raise ValueError(f"task {config['task']!r} generates its own data and takes no --data file")
            if data_path is not None and config["data"].get("data_path") != os.path.abspath(data_path):
                raise ValueError(f"{out} was trained on {config['data'].get('data_path')}, not {data_path}")
            task = task_cls.from_dict(config["data"])
            bad = sorted(set(overrides or {}) - set(RESUMABLE))
            if bad:
                raise ValueError(f"cannot change {', '.join(bad)} when resuming; only {', '.join(RESUMABLE)}")
            train = settings_from_dict(TrainConfig, {**config["train"], **(overrides or {})}, what="train")
            config = {**config, "train": train.to_dict()}
            model_config = model_config_from_dict(config["model_kind"], config["model"])
            model = task.build_model(model_config, rng=np.random.default_rng(0))
            self = cls(out, task, model, config, train)
            self.lock = lock
            self.load()
            atomic_write_json(out / CONFIG, config)
            self._truncate_logs()
        except BaseException:
            lock.release()
            raise
        return self

    # -- checkpoints -------------------------------------------------------------------------------
    def save(self) -> None:
        state = {"seed": self.cfg.seed, "elapsed_seconds": self.elapsed, "cpu_seconds": self.cpu,
                 "tokens": self.tokens, "data_rng": _rng_state(self.data_rng),
                 "dropout_rng": _rng_state(self.dropout_rng)}
        save_checkpoint(self.out, self.model.state_dict(), self.optimizer.state_dict(), state, self.step)

    def load(self) -> None:
        clean_stale_temporaries(self.out)
        for name in (MODEL, OPTIMIZER, STATE):
            if not (self.out / name).is_file():
                raise FileNotFoundError(f"{self.out} has no {name}: nothing to resume")
        weights, wmeta = read_safetensors(self.out / MODEL)
        check_state_matches(self.model.state_dict(), weights, str(self.out / MODEL))
        opt, ometa = read_safetensors(self.out / OPTIMIZER)
        state = read_json(self.out / STATE)
        steps = {MODEL: wmeta.get("step"), OPTIMIZER: ometa.get("step"), STATE: str(state.get("step"))}
        if len(set(steps.values())) != 1:
            raise ValueError(f"{self.out}: checkpoint files disagree on the step ({steps}); "
                             "a save was cut short between renames")
        self.model.load_state_dict(weights)
        self.optimizer.load_state_dict(opt)
        self.step = int(state["step"])
        self.elapsed = float(state.get("elapsed_seconds", 0.0))
        self.cpu = float(state.get("cpu_seconds", 0.0))
        self.tokens = int(state.get("tokens", 0))
        self.data_rng = _rng_from_state(state["data_rng"])
        self.dropout_rng = _rng_from_state(state["dropout_rng"])
        if (self.out / METRICS).is_file():
            self.metrics = read_json(self.out / METRICS)

    # -- logs --------------------------------------------------------------------------------------
    def _write_log_header(self) -> None:
        with writing(self.out / LOG), open(self.out / LOG, "w", newline="") as f:
            csv.writer(f).writerow(LOG_FIELDS)

    def _truncate_logs(self) -> None:
        """Drop log rows after the checkpoint's step (the interrupted run took them; we take them again)."""
        for name in (LOG, EVAL_LOG):
            path = self.out / name
            if not path.is_file():
                continue
            rows = list(csv.reader(open(path, newline="")))
            if not rows:
                continue
            keep = [rows[0]] + [r for r in rows[1:] if r and int(r[0]) <= self.step]
            buf = io.StringIO()
            csv.writer(buf).writerows(keep)
            atomic_write_bytes(path, buf.getvalue().encode("utf-8"))

    def _log_eval(self, metrics: dict) -> None:
        path = self.out / EVAL_LOG
        keys = sorted(k for k, v in metrics.items() if isinstance(v, (int, float)))
        new = not path.is_file()
        with writing(path), open(path, "a", newline="") as f:
            w = csv.writer(f)
            if new:
                w.writerow(["step"] + keys)
            w.writerow([self.step] + [metrics[k] for k in keys])

    # -- evaluation --------------------------------------------------------------------------------
    def evaluate(self, n: int | None) -> dict:
        self.model.eval()
        try:
            return self.task.evaluate(self.model, n=n, seed=self.cfg.seed)
        finally:
            self.model.train()

    def _record(self, metrics: dict, final: bool, stopped: str | None = None) -> None:
        self.metrics = {"task": self.task.name, "step": self.step, "final": final,
                        "primary_metric": self.task.primary_metric, "held_out": metrics,
                        "elapsed_seconds": round(self.elapsed, 3), "cpu_seconds": round(self.cpu, 3),
                        "tokens": self.tokens,
                        "tokens_per_second": round(self.tokens / max(self.elapsed, 1e-9), 1),
                        "parameters": self.model.num_parameters()}
        if stopped:
            self.metrics["stopped"] = stopped
        self._log_eval(metrics)
        atomic_write_json(self.out / METRICS, self.metrics)

    def plot(self) -> Path:
        """curves.png: training loss, learning rate and the held-out metrics against the step."""
        return plot_run(self.out)

    # -- the loop ----------------------------------------------------------------------------------
    def run(self, progress: bool = True, plot: bool = True, out=None) -> dict:
        """Train until the budget ends; returns metrics.json's content. Raises TrainingDiverged on a
        non-finite loss or gradient, KeyboardInterrupt after saving on Ctrl-C, WriteError when a file
        cannot be written (the last checkpoint stays). The directory's lock is given back at the end.
        progress: show the tqdm bar (on ``out``, default stderr); plot: draw curves.png at the end."""
        if self.lock is None:                                            # a second run() of this Trainer
            self.lock = RunLock(self.out)
        try:
            return self._run(progress, plot, out)
        finally:
            self.close()

    def _run(self, progress: bool, plot: bool, out) -> dict:
        from tqdm.auto import tqdm

        cfg = self.cfg
        self.model.train()
        deadline = time.monotonic() + cfg.minutes * 60.0 if cfg.minutes is not None else math.inf
        bar = _Progress(tqdm(total=cfg.steps, initial=self.step, disable=not progress, unit="step",
                             dynamic_ncols=True, desc=f"train {self.task.name}", file=out, mininterval=0.5))
        log = _StepLog(self.out / LOG)
        try:
            with _blas_threads(cfg.blas_threads):                        # for the steps and the evaluations
                stopped = self._train_loop(bar, log, deadline)
                self._finish(stopped, bar, log)
        except OSError:
            plot = False                                                 # the disk may be full: write no more
            raise
        finally:
            bar.close()
            log.close()
            try:
                if plot:
                    self.plot()
            except Exception as e:  # a plotting problem must not hide the training result
                print(f"(could not draw {CURVES}: {e})")
        return self.metrics

    def _train_loop(self, bar: _Progress, log: _StepLog, deadline: float) -> str:
        """Steps until the budget ends, with the periodic evaluations and checkpoints. Returns why
        it stopped: "steps", "minutes" or "interrupted" (a first Ctrl-C; the step finished)."""
        cfg = self.cfg
        with _StopFlag() as stop_requested:
            while cfg.steps is None or self.step < cfg.steps:
                if time.monotonic() >= deadline:
                    return "minutes"
                bar.update(*self._train_step(log))
                if stop_requested.is_set():
                    return "interrupted"
                if self.step % cfg.eval_every == 0 and self.step != cfg.steps:
                    log.flush()
                    metrics = self._evaluate_and_save(cfg.eval_n, final=False)
                    bar.write(f"step {self.step}: held-out " + _fmt(metrics))
        return "steps"

    def _train_step(self, log: _StepLog) -> tuple[float, float, int, float]:
        """One update: batch, loss and gradients, clipping, the optimizer, the log row. Returns
        (loss, lr, tokens, seconds). TrainingDiverged, before anything is updated, on a non-finite
        loss or gradient norm."""
        cfg = self.cfg
        t0, c0 = time.perf_counter(), time.process_time()
        step = self.step + 1
        lr = self.schedule(step)
        batch = self.task.train_batch(self.data_rng, cfg.batch_size)
        loss, grads = self.task.loss(self.model, batch, self.dropout_rng, cfg.label_smoothing)
        loss = float(loss)
        norm = clip_by_global_norm(grads, cfg.clip_norm) if cfg.clip_norm is not None else _norm(grads)
        if not (math.isfinite(loss) and math.isfinite(norm)):
            what = f"loss is {loss}" if not math.isfinite(loss) else f"gradient norm is {norm}"
            log.flush()
            raise TrainingDiverged(f"{what} at step {step}; training stopped. The last good checkpoint "
                                   f"(step {_saved_step(self.out)}) is kept in {self.out}")
        self.optimizer.step(grads, lr=lr)
        dt = time.perf_counter() - t0
        self.step, self.elapsed, self.tokens = step, self.elapsed + dt, self.tokens + batch.n_tokens
        self.cpu += time.process_time() - c0
        log.row(step, f"{loss:.6f}", f"{lr:.6g}", f"{norm:.6g}", batch.n_tokens, f"{self.elapsed:.3f}")
        return loss, lr, batch.n_tokens, dt

    def _evaluate_and_save(self, n: int | None, final: bool, stopped: str | None = None) -> dict:
        metrics = self.evaluate(n)
        self.save()                                                      # metrics.json never runs ahead of
        self._record(metrics, final=final, stopped=stopped)              # the checkpoint, even if a save fails
        record_probe(self.out, self.task, self.model, self.step)        # the explorer's over-training slider
        return metrics

    def _finish(self, stopped: str, bar: _Progress, log: _StepLog) -> None:
        """The end of a run: save on Ctrl-C (then KeyboardInterrupt), else the final evaluation."""
        log.flush()
        if stopped == "interrupted":
            self.save()
            bar.write(f"interrupted: saved step {self.step} in {self.out}; --resume continues")
            raise KeyboardInterrupt
        metrics = self._evaluate_and_save(self.cfg.final_eval_n, final=True, stopped=stopped)
        bar.write(f"step {self.step}: held-out " + _fmt(metrics))


class _StepLog:
    """log.csv, open for appending one row per step; a failed write is a WriteError naming it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with writing(path):
            self._file = open(path, "a", newline="")
        self._writer = csv.writer(self._file)

    def row(self, *values) -> None:
        with writing(self.path):
            self._writer.writerow(values)

    def flush(self) -> None:
        with writing(self.path):
            self._file.flush()

    def close(self) -> None:
        with contextlib.suppress(OSError):                              # rows that no longer fit: resume takes
            self._file.close()                                           # those steps again anyway


class _Progress:
    """The tqdm bar, showing a running mean of the loss, the rate and the recent tokens per second."""

    def __init__(self, bar) -> None:
        self.bar, self.ema, self.tokens, self.seconds = bar, None, 0.0, 0.0

    def update(self, loss: float, lr: float, tokens: int, seconds: float) -> None:
        self.ema = loss if self.ema is None else 0.95 * self.ema + 0.05 * loss
        self.tokens, self.seconds = 0.9 * self.tokens + tokens, 0.9 * self.seconds + seconds
        self.bar.update(1)
        self.bar.set_postfix_str(f"loss {self.ema:.4f}  lr {lr:.2e}  {self.tokens / self.seconds:,.0f} tok/s",
                                 refresh=False)

    def write(self, text: str) -> None:
        self.bar.write(text)

    def close(self) -> None:
        self.bar.close()


def _fmt(metrics: dict) -> str:
    return "  ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items())


def _norm(grads) -> float:
    from .clip import global_norm
    return global_norm(grads)


def _saved_step(out: Path) -> int | str:
    try:
        return int(read_json(out / STATE)["step"])
    except (OSError, ValueError, KeyError):
        return "none"


def _blas_threads(n: int | None):
    """A context limiting BLAS to ``n`` threads (threadpoolctl), or doing nothing for None.

    Why: the matrices of these CPU-sized models are small (e.g. (1664, 64) x (64, 128)), and
    OpenBLAS's worker threads spin while they wait; with other programs on the cores, two threads
    made a dates step 4-7x slower than one (measured on 2 shared cores). The limit holds only
    inside the training loop and is undone after it."""
    if n is None:
        return contextlib.nullcontext()
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:                                                  # optional: then BLAS keeps its default
        return contextlib.nullcontext()
    return threadpool_limits(limits=n, user_api="blas")


class _StopFlag:
    """Ctrl-C during training: the first finishes the step and saves, the second aborts at once."""

    def __init__(self) -> None:
        self._set = False
        self._old = None

    def is_set(self) -> bool:
        return self._set

    def _handler(self, signum, frame) -> None:
        if self._set:
            raise KeyboardInterrupt
        self._set = True
        print("\nstopping after this step and saving (Ctrl-C again to abort without saving)", flush=True)

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handler)
        return self

    def __exit__(self, *exc) -> None:
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)


def read_log(run_dir) -> dict[str, np.ndarray]:
    """log.csv as columns of float arrays (step, loss, lr, grad_norm, tokens, seconds)."""
    rows = list(csv.DictReader(open(Path(run_dir) / LOG, newline="")))
    return {k: np.array([float(r[k]) for r in rows]) for k in LOG_FIELDS}


def plot_run(run_dir) -> Path:
    """Draw the run's curves into curves.png (atomically); returns its path."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    log = read_log(run_dir)
    evals = list(csv.DictReader(open(run_dir / EVAL_LOG, newline=""))) if (run_dir / EVAL_LOG).is_file() else []
    config = read_json(run_dir / CONFIG)
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    ax = axes[0]
    ls = config["train"].get("label_smoothing", 0.0)
    what = f"train, label smoothing {ls:g}" if ls else "train"          # smoothing lifts the floor above 0
    if len(log["step"]):
        ax.plot(log["step"], log["loss"], lw=0.6, alpha=0.35, color="C0", label=f"{what} (each step)")
        k = max(1, len(log["loss"]) // 50)
        smooth = np.convolve(log["loss"], np.ones(k) / k, mode="valid")
        ax.plot(log["step"][k - 1:], smooth, color="C0", label=f"{what} (mean of {k})")
    if evals and "loss" in evals[0]:
        ax.plot([float(r["step"]) for r in evals], [float(r["loss"]) for r in evals], "o-", color="C3",
                ms=3, label="held-out")
    ax.set(xlabel="step", ylabel="cross-entropy (nats/token)", title="loss", yscale="log")
    ax.legend(fontsize=8)
    axes[1].plot(log["step"], log["lr"], color="C2")
    axes[1].set(xlabel="step", ylabel="learning rate", title=f"schedule: {config['train']['schedule']}")
    ax = axes[2]
    metric_keys = [k for k in (evals[0].keys() if evals else []) if k not in ("step", "loss", "n")]
    for i, key in enumerate(metric_keys):
        ax.plot([float(r["step"]) for r in evals], [float(r[key]) for r in evals], "o-", ms=3,
                color=f"C{i + 4}", label=key)
    ax.set(xlabel="step", title="held-out metrics")
    if metric_keys:
        ax.legend(fontsize=8)
    fig.suptitle(f"npformer train {config['task']}")
    fig.subplots_adjust(left=0.06, right=0.99, bottom=0.14, top=0.84, wspace=0.28)  # fixed: tight_layout renders twice
    path = run_dir / CURVES
    atomic_savefig(fig, path, dpi=110)
    plt.close(fig)
    return path
