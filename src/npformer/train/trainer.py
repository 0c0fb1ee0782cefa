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

Run directories (``train.rundir``): ``start`` and ``resume`` refuse one that is a symbolic link or holds
one at a name npformer writes; ``start(force=True)`` deletes only npformer's files and refuses, deleting
nothing, a directory holding anything else. trainer_state.json may name only numpy's bit generators.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import signal
import stat
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from ..files import atomic_write_json, clean_stale_temporaries
from ..ops import workspace
from ..settings import from_dict as settings_from_dict
from ..settings import quoted, reading
from .checkpoint import (
    CONFIG,
    LOCK,
    METRICS,
    MODEL,
    OPTIMIZER,
    STATE,
    RunLock,
    read_config,
    read_json,
    read_safetensors,
    save_checkpoint,
)
from .clip import clip_by_global_norm
from .config import RESUMABLE, TrainConfig, TrainingDiverged
from .optim import Adam, AdamW
from .probe import record_probe
from .rundir import RUN_FILES, clear_run_dir, refuse_link_dir, refuse_links
from .runlog import (
    CURVES,
    EVAL_LOG,
    LOG,
    Progress,
    StepLog,
    append_eval,
    fmt_metrics,
    plot_run,
    read_log,
    truncate_logs,
    write_log_header,
)
from .schedules import make_schedule

# the names a run's users import from here (the config and logs live in config.py and runlog.py)
__all__ = ["RESUMABLE", "TrainConfig", "Trainer", "TrainingDiverged", "plot_run", "read_log"]



# the bit generators a trainer_state.json may name: numpy's own, never any other attribute of np.random
BIT_GENERATORS = {g.__name__: g for g in (np.random.PCG64, np.random.PCG64DXSM, np.random.MT19937,
                                          np.random.Philox, np.random.SFC64)}


def _rng_state(g: np.random.Generator | None) -> Mapping[str, Any]:
    assert g is not None                                         # start, resume or load made it
    return g.bit_generator.state


def _rng_from_state(state, where: str) -> np.random.Generator:
    """The generator whose bit generator's state is ``state``; ValueError naming ``where`` (the file and
    entry) unless it names one of ``BIT_GENERATORS`` and holds a valid state of it."""
    name = state.get("bit_generator") if isinstance(state, dict) else None
    if not isinstance(name, str) or name not in BIT_GENERATORS:
        raise ValueError(f"{where} names bit generator {quoted(name)}; expected one of numpy's "
                         f"{', '.join(BIT_GENERATORS)}")
    bg = BIT_GENERATORS[name]()
    try:
        bg.state = state
    except (TypeError, ValueError, KeyError, OverflowError) as e:
        raise ValueError(f"{where} is not a valid {name} state ({e})") from None
    return np.random.Generator(bg)


def _has_checkpoint(out: Path) -> bool:
    """config.json is there, a regular file (a link there is no run; --force deletes it, start refuses it)."""
    try:
        return stat.S_ISREG(os.lstat(out / CONFIG).st_mode)
    except OSError:
        return False


T = TypeVar("T", bound="Trainer")            # Trainer or a subclass (interop.engine.TorchTrainer)


class Trainer:
    """Holds one run: its task, model, optimizer, generators and directory. Build it with
    ``Trainer.start`` (a new run) or ``Trainer.resume``; then ``run()``. The directory's lock is
    held from ``start``/``resume`` until ``run()`` returns or raises (or ``close()``)."""

    # a second Ctrl-C aborts without saving; a launched torch worker turns it off (its launcher answers it)
    second_interrupt_aborts = True

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
        self.data_rng: np.random.Generator | None = None     # made by start, resume or load
        self.dropout_rng: np.random.Generator | None = None
        self.grads: dict | None = None         # the last step's gradients, until they are applied
        self.lock: RunLock | None = None
        self.said_smoothing = False            # the note on label smoothing, said once at the first evaluation

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
        refuse_link_dir(out)
        if out.exists() and not out.is_dir():
            raise NotADirectoryError(f"--out {out} exists and is not a directory")
        out.mkdir(parents=True, exist_ok=True)
        lock = RunLock(out)                                              # before looking: a run may be in progress
        try:
            if not force:
                refuse_links(out)
            if _has_checkpoint(out):
                old = read_config(out)
                if old["task"] != task.name:
                    raise ValueError(f"{out} holds a {quoted(old['task'])} run, not a {quoted(task.name)} run; "
                                     "choose another --out")
                if not force:
                    raise ValueError(f"{out} already holds a {quoted(old['task'])} run: --resume continues it, "
                                     "--force starts over (deleting it)")
            if force:
                clear_run_dir(out, "--force", keep=(LOCK,))             # npformer's files only, or nothing
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
        from ..data.tasks import get_task

        out = Path(out_dir)
        refuse_link_dir(out)
        refuse_links(out)
        read_config(out)                                                 # a run directory? (before locking it)
        lock = RunLock(out)
        try:
            config = read_config(out)
            if task_name is not None and config["task"] != task_name:
                raise ValueError(f"{out} holds a {quoted(config['task'])} run, not a {quoted(task_name)} run")
            task_cls = get_task(config["task"])
            if data_path is not None and not task_cls.uses_data_file:
                raise ValueError(f"task {quoted(config['task'])} generates its own data and takes no --data file")
            if data_path is not None and config["data"].get("data_path") != os.path.abspath(data_path):
                raise ValueError(f"{out} was trained on {config['data'].get('data_path')}, not {data_path}")
            bad = sorted(set(overrides or {}) - set(RESUMABLE))
            if bad:
                raise ValueError(f"cannot change {', '.join(bad)} when resuming; only {', '.join(RESUMABLE)}")
            train = settings_from_dict(TrainConfig, {**config["train"], **(overrides or {})}, what="train")
            self = cls.from_config(out, {**config, "train": train.to_dict()})
            self.lock = lock
            self.load()
            atomic_write_json(out / CONFIG, self.config)
            self._truncate_logs()
        except BaseException:
            lock.release()
            raise
        return self

    @classmethod
    def from_config(cls: type[T], out_dir, config: dict) -> T:
        """The trainer of ``config`` (config.json's content) with a fresh model and optimizer: it takes
        no lock and reads and writes nothing (``load()`` then reads the checkpoint). ``resume`` builds
        with it, and so does each worker of the torch engine."""
        from ..data.tasks import get_task, model_config_from_dict

        with reading(Path(out_dir) / CONFIG):                           # its errors name config.json
            task = get_task(config["task"]).from_dict(config["data"])
            train = settings_from_dict(TrainConfig, config["train"], what="train")
            model_config = model_config_from_dict(config["model_kind"], config["model"])
        model = task.build_model(model_config, rng=np.random.default_rng(0))
        return cls(out_dir, task, model, config, train)

    # -- checkpoints -------------------------------------------------------------------------------
    def save(self) -> None:
        state = {"seed": self.cfg.seed, "elapsed_seconds": self.elapsed, "cpu_seconds": self.cpu,
                 "tokens": self.tokens, "data_rng": _rng_state(self.data_rng),
                 "dropout_rng": _rng_state(self.dropout_rng)}
        save_checkpoint(self.out, self.model.state_dict(), self.optimizer.state_dict(), state, self.step)

    def load(self) -> None:
        clean_stale_temporaries(self.out, RUN_FILES)
        for name in (MODEL, OPTIMIZER, STATE):
            if not (self.out / name).is_file():
                raise FileNotFoundError(f"{self.out} has no {name}: nothing to resume")
        weights, wmeta = read_safetensors(self.out / MODEL, expect=self.model.state_dict())
        opt, ometa = read_safetensors(self.out / OPTIMIZER)
        where = self.out / STATE
        state = read_json(where)
        if not isinstance(state, dict):
            raise ValueError(f"{where} is not a JSON object")
        steps = {MODEL: wmeta.get("step"), OPTIMIZER: ometa.get("step"), STATE: str(state.get("step"))}
        if len(set(steps.values())) != 1:
            raise ValueError(f"{self.out}: checkpoint files disagree on the step ({steps}); "
                             "a save was cut short between renames")
        try:
            step = int(state["step"])
            elapsed, cpu = float(state.get("elapsed_seconds", 0.0)), float(state.get("cpu_seconds", 0.0))
            tokens = int(state.get("tokens", 0))
        except (KeyError, TypeError, ValueError, OverflowError):
            raise ValueError(f"{where} lacks a whole 'step' or has a non-numeric time or token count") from None
        data_rng = _rng_from_state(state.get("data_rng"), f"{where}: 'data_rng'")
        dropout_rng = _rng_from_state(state.get("dropout_rng"), f"{where}: 'dropout_rng'")
        self.model.load_state_dict(weights)
        self.optimizer.load_state_dict(opt)
        self.step, self.elapsed, self.cpu, self.tokens = step, elapsed, cpu, tokens
        self.data_rng, self.dropout_rng = data_rng, dropout_rng
        if (self.out / METRICS).is_file():
            self.metrics = read_json(self.out / METRICS)

    # -- logs --------------------------------------------------------------------------------------
    def _write_log_header(self) -> None:
        write_log_header(self.out)

    def _truncate_logs(self) -> None:
        truncate_logs(self.out, self.step)

    def _log_eval(self, metrics: dict) -> None:
        append_eval(self.out, self.step, metrics)

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
        progress: show the progress (on ``out``, default stderr: a bar on a terminal, a line per tenth of the
        steps in a file or a pipe; ``npformer.progress``); plot: draw curves.png at the end."""
        if self.lock is None:                                            # a second run() of this Trainer
            self.lock = RunLock(self.out)
        try:
            return self._run(progress, plot, out)
        finally:
            workspace.clear()              # the process may live on (a study, Jupyter): free the pool's arrays
            self.close()

    def _run(self, progress: bool, plot: bool, out) -> dict:
        from ..progress import progress_display

        cfg = self.cfg
        self.model.train()
        deadline = time.monotonic() + cfg.minutes * 60.0 if cfg.minutes is not None else math.inf
        bar = Progress(progress_display(cfg.steps, f"train {self.task.name}", "step", enabled=progress,
                                        initial=self.step, file=out))
        log = StepLog(self.out / LOG)
        try:
            # for the steps and the evaluations: the BLAS's threads, and malloc keeping the steps' memory
            with _blas_threads(cfg.blas_threads), workspace.keep_heap():
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

    def _train_loop(self, bar: Progress, log: StepLog, deadline: float) -> str:
        """Steps until the budget ends, with the periodic evaluations and checkpoints. Returns why
        it stopped: "steps", "minutes" or "interrupted" (a first Ctrl-C; the step finished)."""
        cfg = self.cfg
        with _StopFlag(self.second_interrupt_aborts) as stop_requested:
            while cfg.steps is None or self.step < cfg.steps:
                if time.monotonic() >= deadline:
                    return "minutes"
                bar.update(*self._train_step(log))
                if stop_requested.is_set():
                    return "interrupted"
                if self.step % cfg.eval_every == 0 and self.step != cfg.steps:
                    log.flush()
                    metrics = self._evaluate_and_save(cfg.eval_n, final=False)
                    self._say_held_out(bar, metrics)
        return "steps"

    def _train_step(self, log: StepLog) -> tuple[float, float, int, float]:
        """One update: batch, loss and gradients, clipping, the optimizer, the log row. Returns
        (loss, lr, tokens, seconds). TrainingDiverged, before anything is updated, on a non-finite
        loss or gradient norm."""
        cfg = self.cfg
        t0, c0 = time.perf_counter(), time.process_time()
        step = self.step + 1
        lr = self.schedule(step)
        batch = self.task.train_batch(self.data_rng, cfg.batch_size)
        loss, norm = self.gradients(batch)
        if not (math.isfinite(loss) and math.isfinite(norm)):
            what = f"loss is {loss}" if not math.isfinite(loss) else f"gradient norm is {norm}"
            log.flush()
            raise TrainingDiverged(f"{what} at step {step}; training stopped. The last good checkpoint "
                                   f"(step {_saved_step(self.out)}) is kept in {self.out}")
        self.apply_gradients(lr)
        dt = time.perf_counter() - t0
        self.step, self.elapsed, self.tokens = step, self.elapsed + dt, self.tokens + batch.n_tokens
        self.cpu += time.process_time() - c0
        log.row(step, f"{loss:.6f}", f"{lr:.6g}", f"{norm:.6g}", batch.n_tokens, f"{self.elapsed:.3f}")
        return loss, lr, batch.n_tokens, dt

    # -- the update; the torch engine (npformer.interop.engine) overrides these two ------------------
    def gradients(self, batch) -> tuple[float, float]:
        """Loss and gradients of one batch, the gradients clipped to ``clip_norm``. Returns (loss, global
        gradient norm before clipping); the gradients wait in ``self.grads`` for ``apply_gradients``."""
        cfg = self.cfg
        loss, self.grads = self.task.loss(self.model, batch, self.dropout_rng, cfg.label_smoothing)
        norm = clip_by_global_norm(self.grads, cfg.clip_norm) if cfg.clip_norm is not None else _norm(self.grads)
        return float(loss), norm

    def apply_gradients(self, lr: float) -> None:
        """The optimizer's update from the last ``gradients``, at learning rate ``lr``."""
        assert self.grads is not None                                    # gradients() came first
        self.optimizer.step(self.grads, lr=lr)
        self.grads = None

    def _evaluate_and_save(self, n: int | None, final: bool, stopped: str | None = None) -> dict:
        metrics = self.evaluate(n)
        self.save()                                                      # metrics.json never runs ahead of
        self._record(metrics, final=final, stopped=stopped)              # the checkpoint, even if a save fails
        record_probe(self.out, self.task, self.model, self.step)        # the explorer's over-training slider
        return metrics

    def _finish(self, stopped: str, bar: Progress, log: StepLog) -> None:
        """The end of a run: save on Ctrl-C (then KeyboardInterrupt), else the final evaluation."""
        log.flush()
        if stopped == "interrupted":
            self.save()
            bar.write(f"interrupted: saved step {self.step} in {self.out}; --resume continues")
            raise KeyboardInterrupt
        metrics = self._evaluate_and_save(self.cfg.final_eval_n, final=True, stopped=stopped)
        self._say_held_out(bar, metrics)

    def _say_held_out(self, bar: Progress, metrics: dict) -> None:
        """The held-out line; at the run's first evaluation with label smoothing, why the held-out loss may
        be below the training loss."""
        bar.write(f"step {self.step}: held-out " + fmt_metrics(metrics))
        if self.cfg.label_smoothing > 0 and "loss" in metrics and not self.said_smoothing:
            self.said_smoothing = True
            bar.write(f"  (the training loss includes label smoothing {self.cfg.label_smoothing:g} and the held-out "
                      f"loss does not, so the held-out loss can be the lower of the two)")


def _norm(grads) -> float:
    from .clip import global_norm
    return global_norm(grads)


def _saved_step(out: Path) -> int | str:
    try:
        return int(read_json(out / STATE)["step"])
    except (OSError, ValueError, KeyError):
        return "none"


@contextlib.contextmanager
def _blas_threads(n: int | None):
    """A context limiting BLAS to ``n`` threads (threadpoolctl); doing nothing for None (the BLAS's
    default). The row blocks of large element-wise work (ops/parallel.py) keep their own setting,
    one thread unless the caller entered ``parallel.limit``: more threads made the steps slower.

    Why: the matrices of these CPU-sized models are small (e.g. (1664, 64) x (64, 128)), and
    OpenBLAS's worker threads spin while they wait; with other programs on the cores, two threads
    made a dates step 4-7x slower than one (measured on 2 shared cores). The limit holds only
    inside the training loop and is undone after it."""
    if n is None:
        yield
        return
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:                                                  # optional: then BLAS keeps its default
        blas: Any = contextlib.nullcontext()
    else:
        blas = threadpool_limits(limits=n, user_api="blas")
    with blas:
        yield


class _StopFlag:
    """Ctrl-C during training: the first finishes the step and saves; the second aborts at once when
    ``again_aborts``, and is ignored otherwise (a launched worker: its launcher answers the second)."""

    def __init__(self, again_aborts: bool = True) -> None:
        self._set = False
        self._old: Any = None                  # the SIGINT handler to put back (signal.signal's answer)
        self.again_aborts = again_aborts

    def is_set(self) -> bool:
        return self._set

    def _handler(self, signum, frame) -> None:
        if self._set:
            if self.again_aborts:
                raise KeyboardInterrupt
            return
        self._set = True
        again = " (Ctrl-C again to abort without saving)" if self.again_aborts else ""
        print(f"\nstopping after this step and saving{again}", flush=True)

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handler)
        return self

    def __exit__(self, *exc) -> None:
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)


