"""A run's logs: log.csv (one row per step), eval.csv (one row per held-out evaluation), curves.png,
and the progress bar. Rows after a checkpoint's step are dropped on resuming (that run takes them again).

The two logs are appended to in place, opened with ``files.open_append`` (never through a symbolic link:
one there is a WriteError naming it); every other write replaces its file atomically."""
from __future__ import annotations

import contextlib
import csv
import io
from pathlib import Path

import numpy as np

from ..files import atomic_savefig, atomic_write_bytes, open_append, writing
from .checkpoint import CONFIG, read_json

LOG, EVAL_LOG, CURVES = "log.csv", "eval.csv", "curves.png"
LOG_FIELDS = ["step", "loss", "lr", "grad_norm", "tokens", "seconds"]


def write_log_header(out: Path) -> None:
    """A fresh log.csv holding only its header (written atomically: a link there is replaced, not followed)."""
    buf = io.StringIO()
    csv.writer(buf).writerow(LOG_FIELDS)
    atomic_write_bytes(out / LOG, buf.getvalue().encode("utf-8"))


def truncate_logs(out: Path, step: int) -> None:
    """Drop log rows after ``step``, the checkpoint's (the interrupted run took them; the resumed run takes
    them again), and a last row cut short by a kill while it was being written."""
    for name in (LOG, EVAL_LOG):
        path = out / name
        if not path.is_file():
            continue
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
        if not rows:
            continue
        keep = [rows[0]] + [r for r in rows[1:] if len(r) == len(rows[0]) and _step_of(r) <= step]
        buf = io.StringIO()
        csv.writer(buf).writerows(keep)
        atomic_write_bytes(path, buf.getvalue().encode("utf-8"))


def _step_of(row: list[str]) -> float:
    """A log row's step; a row whose step is not a whole number (cut short, or not npformer's) sorts last."""
    try:
        return int(row[0])
    except ValueError:
        return float("inf")


def append_eval(out: Path, step: int, metrics: dict) -> None:
    """One row of eval.csv: the step and the numeric metrics, in sorted order (the header, when new); a flag
    (a bool, such as the gripper's ``perturb``) is not a metric and is not written."""
    path = out / EVAL_LOG
    keys = sorted(k for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool))
    with open_append(path) as f, writing(path):
        w = csv.writer(f)
        if f.tell() == 0:                                                # a new (or empty) file
            w.writerow(["step"] + keys)
        w.writerow([step] + [metrics[k] for k in keys])


class StepLog:
    """log.csv, open for appending one row per step; a failed write is a WriteError naming it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = open_append(path)
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


class Progress:
    """The run's progress (``npformer.progress``: a bar, or plain lines in a log), showing a running mean of
    the loss, the learning rate and the recent tokens per second."""

    def __init__(self, bar) -> None:
        self.ema: float | None
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


def fmt_metrics(metrics: dict) -> str:
    return "  ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items())


def read_log(run_dir) -> dict[str, np.ndarray]:
    """log.csv as columns of float arrays (step, loss, lr, grad_norm, tokens, seconds)."""
    rows = list(csv.DictReader(open(Path(run_dir) / LOG, newline="")))
    return {k: np.array([float(r[k]) for r in rows]) for k in LOG_FIELDS}


NOT_PLOTTED = ("step", "loss", "n", "truncated", "mean_steps")


def _numeric(rows: list[dict], key: str) -> bool:
    try:
        [float(r[key]) for r in rows]
    except (TypeError, ValueError):
        return False
    return True


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
    # the rates and scores; not the counts of an episode evaluation, nor a column that is not a number
    # (a run written before flags were left out of eval.csv holds gripper's perturb as False)
    metric_keys = [k for k in (evals[0].keys() if evals else []) if k not in NOT_PLOTTED and _numeric(evals, k)]
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
