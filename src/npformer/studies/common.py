"""What every study shares: its settings x seeds trained with the ``Trainer``, one progress bar over
the whole study, the table of means and spreads, the CSV, the report, and the words of a comparison.

A study is a ``Study`` subclass (one module each). It lists its ``settings`` (model overrides and,
where the config cannot say it, a model variant), measures each trained run (``measure``; and the
untrained model, ``before``, where it compares the two), turns the rows into a table, chooses its
sentence from that table, and draws its figure. ``run_study`` does the rest, the same for all.

Spread is the sample standard deviation over the seeds (0 with one seed). ``compare`` calls two
results level when they differ by no more than their spreads added up, or than a floor (half a
percentage point for shares), so a sentence never reads a difference into noise.
"""
from __future__ import annotations

import contextlib
import csv
import io
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np

from ..files import atomic_write_bytes, writing

SHARE_FLOOR = 0.005                     # differences of shares below this (half a point) are level


@dataclass
class Setting:
    """One arm of a study: a label for the table, model config overrides, the CSV columns that
    describe it, and a model variant the config cannot express (``variants.VariantDates``)."""
    label: str                                               # e.g. "4 heads"
    model: dict = field(default_factory=dict)                # model config overrides
    columns: dict = field(default_factory=dict)              # e.g. {"n_heads": 4}
    variant: dict = field(default_factory=dict)              # e.g. {"positions": False}
    data: dict = field(default_factory=dict)                 # task data settings, e.g. {"chunk": 4} (gripper)
    train: dict = field(default_factory=dict)                # train settings under --set's, e.g. {"final_eval_n": 1}


@dataclass
class Options:
    """How a study runs: its budget, its task, --set overrides, where it writes."""
    seeds: int                                               # seeds 0 .. seeds - 1 per setting
    steps: int                                               # optimizer steps per run
    out: Path                                                # where the CSV, PNG and report go
    task: str = "dates"                                      # the task the settings train on
    sets: dict = field(default_factory=dict)                 # parse_overrides' {"model", "train", "data"}
    progress: bool = True                                    # show the study's progress bar
    jobs: int = 1                                            # runs trained at once, each in its own process

    def __post_init__(self) -> None:
        for name, flag in (("seeds", "--seeds"), ("steps", "--steps"), ("jobs", "--jobs")):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{flag} must be an integer >= 1, got {v!r}")


@dataclass
class Result:
    """A finished study: the per-run rows, the table, the sentence, and the files written."""
    rows: list[dict]
    table: list[dict]
    sentence: str
    report: str
    files: list[Path]


class Study:
    """Base class of the studies; see the module docstring."""

    name: ClassVar[str] = ""
    claim: ClassVar[str] = ""                    # the lesson's misconception, word for word
    tasks: ClassVar[tuple[str, ...]] = ("dates",)  # the tasks it runs on; the first is the default
    seeds: ClassVar[int] = 3                     # default seeds per setting
    steps: ClassVar[dict[str, int]] = {}         # default steps per run, by task
    opts: Options | None = None                  # the options of the study being run (``run_study`` sets them)

    def settings(self, task) -> list[Setting]:
        """The study's arms, in the order of the table (``task``: the task they train on)."""
        raise NotImplementedError

    def before(self, trainer, setting: Setting) -> dict:
        """Measurements of the untrained model (called before training); none by default."""
        return {}

    def measure(self, trainer, setting: Setting, before: dict) -> list[dict]:
        """CSV rows of one trained run (the runner adds setting, its columns, seed, steps and seconds)."""
        raise NotImplementedError

    def table(self, rows: list[dict]) -> list[dict]:
        """One row per setting (and stage): means with "_sd" spreads (``summarise``)."""
        raise NotImplementedError

    def sentence(self, table: list[dict]) -> str:
        """What the numbers show, every word of comparison chosen from them (``compare``)."""
        raise NotImplementedError

    def pool(self, rows: list[dict]) -> list[dict]:
        """The rows as the CSV keeps them: by default as measured; a study may add each arm's pooled
        numbers to its rows (``episodes.EpisodeStudy``), so that its sentence quotes CSV values."""
        return rows

    def report(self, table: list[dict], rows: list[dict]) -> str:
        """The printed table (and anything else the study shows before its sentence)."""
        return format_table(table)

    def draw(self, rows: list[dict], table: list[dict], out: Path) -> list[Path]:
        """Write the figure(s), ``out`` first; returns their paths."""
        raise NotImplementedError


# -- running ---------------------------------------------------------------------------------------

def check_options(study: Study, opts: Options, settings: list[Setting]) -> None:
    """One clear error for a task the study does not run on, or a --set of a model setting that the
    study's settings set themselves."""
    if opts.task not in study.tasks:
        raise ValueError(f"the {study.name} study runs on {' or '.join(study.tasks)}, not {opts.task!r}")
    clash = sorted(set(opts.sets.get("model", {})) & set().union(*(s.model for s in settings))
                   | set(opts.sets.get("data", {})) & set().union(*(s.data for s in settings)))
    if clash:
        raise ValueError(f"the {study.name} study sets {', '.join(clash)} itself; --set cannot change it")


def _task(opts: Options, setting: Setting):
    from ..data.tasks import get_task
    from .variants import VariantDates

    task_cls = get_task(opts.task)
    data = {**opts.sets.get("data", {}), **setting.data}
    if setting.variant:
        return VariantDates(task_cls.settings_with(data), **setting.variant)
    return task_cls.create(data)


def start_run(opts: Options, setting: Setting, seed: int, run_dir: Path):
    """A ``Trainer`` for one setting and seed: the task's recipe <- one held-out evaluation, at the
    end <- --set <- steps, seed."""
    from ..train.trainer import TrainConfig, Trainer

    task = _task(opts, setting)
    train = {**task.default_train_config(), "eval_every": opts.steps, **setting.train, **opts.sets.get("train", {}),
             "steps": opts.steps, "minutes": None, "seed": seed}
    model = {**opts.sets.get("model", {}), **setting.model}
    return Trainer.start(task, model, TrainConfig(**train), run_dir)


def run_study(study: Study, opts: Options) -> Result:
    """Train every setting x seed, measure, write ``NAME.csv``, ``NAME.png`` and ``NAME.txt`` in
    ``opts.out``; returns the result. The runs train in a temporary directory, removed at the end.

    With ``opts.jobs`` > 1 the runs go to that many worker processes (started fresh, "spawn": no
    thread pool or compiled kernel is inherited half-way), each on one BLAS thread; the rows come
    back in the runs' order and are the same as one job's but for ``seconds``, which then counts a
    run's training beside the others'. A study reads its module's constants in the workers as they
    are imported there, so a test that patches them runs with one job."""
    from ..data.tasks import get_task
    from ..progress import progress_display

    study.opts = opts
    settings = study.settings(get_task(opts.task).create(opts.sets.get("data")))
    check_options(study, opts, settings)
    opts.out.mkdir(parents=True, exist_ok=True)
    runs = [(s, seed) for s in settings for seed in range(opts.seeds)]
    bar = progress_display(len(runs) * opts.steps, f"study {study.name}", "step", enabled=opts.progress)
    rows: list[dict] = []
    try:
        with tempfile.TemporaryDirectory(prefix=f"npformer-study-{study.name}-") as tmp:
            if opts.jobs > 1 and len(runs) > 1:
                rows = _in_workers(study, opts, runs, Path(tmp), bar)
            else:
                for i, (setting, seed) in enumerate(runs):
                    bar.set_postfix_str(f"{setting.label}, seed {seed}")
                    rows += _one_run(study, opts, setting, seed, Path(tmp) / f"run{i}")
                    bar.update(opts.steps)
    finally:
        bar.close()
    return finish(study, rows, opts.out)


def _in_workers(study: Study, opts: Options, runs: list, tmp: Path, bar) -> list[dict]:
    """The runs on ``opts.jobs`` worker processes; their rows in the runs' order. A worker that dies
    fails the study (``BrokenProcessPool``) rather than hang it, and leaving early (an error in a run,
    Ctrl-C) ends the other workers at once rather than wait for their runs."""
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    done: dict[int, list[dict]] = {}
    pool = ProcessPoolExecutor(min(opts.jobs, len(runs)), mp_context=multiprocessing.get_context("spawn"))
    try:
        pending = {pool.submit(_worker_run, (i, study, opts, setting, seed, tmp / f"run{i}")): i
                   for i, (setting, seed) in enumerate(runs)}
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for f in finished:
                del pending[f]
                i, done[i] = f.result()
                setting, seed = runs[i]
                bar.set_postfix_str(f"{setting.label}, seed {seed}")                  # the run just finished
                bar.update(opts.steps)
    except BaseException as e:
        for proc in list((getattr(pool, "_processes", None) or {}).values()):    # the executor keeps them there
            proc.terminate()
        pool.shutdown(wait=False, cancel_futures=True)
        if isinstance(e, BrokenProcessPool):
            raise ChildProcessError("a worker process of the study ended abruptly (killed, or out of memory?); "
                                    "--jobs 1 trains the runs one after another in this process") from e
        raise
    pool.shutdown()
    return [row for i in range(len(runs)) for row in done[i]]


def _worker_run(task: tuple) -> tuple[int, list[dict]]:
    """One run in a worker process, on one BLAS thread (the workers share the cores): (its index, its rows)."""
    from ..train.trainer import _blas_threads

    i, study, opts, setting, seed, run_dir = task
    with _blas_threads(1):
        return i, _one_run(study, opts, setting, seed, run_dir)


def _one_run(study: Study, opts: Options, setting: Setting, seed: int, run_dir: Path) -> list[dict]:
    trainer = start_run(opts, setting, seed, run_dir)
    before = study.before(trainer, setting)
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):                      # the trainer's own held-out lines
        trainer.run(progress=False, plot=False)
    seconds = time.perf_counter() - t0
    head = {"setting": setting.label, **setting.columns, "seed": seed, "steps": opts.steps}
    return [{**head, **row, "seconds": round(seconds, 2)} for row in study.measure(trainer, setting, before)]


def probe_size(trainer, default: int) -> int:
    """How many held-out examples a study's own measurements use: ``default``, or fewer when the
    run's final evaluation was made smaller (``--set final_eval_n=N``, as the tests do)."""
    return min(default, trainer.cfg.final_eval_n or default)


def finish(study: Study, rows: list[dict], out: Path) -> Result:
    """The table, sentence, report and files from the measured rows (also used on hand-made rows)."""
    out = Path(out)
    rows = study.pool(rows)
    table = study.table(rows)
    sentence = study.sentence(table)
    report = f"{study.name}: \"{study.claim}\"\n\n{study.report(table, rows)}\n\n{sentence}\n"
    files = [write_csv(out / f"{study.name}.csv", rows)]
    files += study.draw(rows, table, out / f"{study.name}.png")
    text = out / f"{study.name}.txt"
    atomic_write_bytes(text, report.encode("utf-8"))
    return Result(rows, table, sentence, report, files + [text])


def write_csv(path: Path, rows: list[dict]) -> Path:
    """``rows`` as CSV (columns in first-seen order), written atomically. Keys that start with "_"
    carry arrays for a figure and are left out."""
    cols = list(dict.fromkeys(k for r in rows for k in r if not k.startswith("_")))
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    w.writeheader()
    w.writerows({k: _cell(r.get(k, "")) for k in cols} for r in rows)
    with writing(path):
        atomic_write_bytes(path, buf.getvalue().encode("utf-8"))
    return path


def _cell(v):
    return f"{v:.6g}" if isinstance(v, float) else v


# -- numbers and words -----------------------------------------------------------------------------

def mean_sd(values) -> tuple[float, float]:
    """(mean, sample standard deviation; 0 for one value) of a list of numbers, leaving out NaN (a
    share of nothing, e.g. of a model's errors when it made none); (NaN, NaN) when nothing is left."""
    a = np.asarray(list(values), dtype=np.float64)
    a = a[~np.isnan(a)]
    if not a.size:
        return float("nan"), float("nan")
    return float(a.mean()), float(a.std(ddof=1)) if a.size > 1 else 0.0


def summarise(rows: list[dict], keys: list[str], by: str = "setting") -> list[dict]:
    """One row per value of ``by`` (first-seen order): n, and ``key``/``key_sd`` for each key."""
    groups: dict = {}
    for r in rows:
        groups.setdefault(r[by], []).append(r)
    table = []
    for label, rs in groups.items():
        row = {by: label, "n": len(rs)}
        for k in keys:
            row[k], row[f"{k}_sd"] = mean_sd(r[k] for r in rs)
        table.append(row)
    return table


def compare(a: tuple[float, float], b: tuple[float, float], floor: float = SHARE_FLOOR) -> str:
    """How (mean, sd) ``b`` stands to ``a``: "higher", "lower" or "level" (within the spreads or the floor)."""
    diff = b[0] - a[0]
    if abs(diff) <= max(a[1] + b[1], floor):
        return "level"
    return "higher" if diff > 0 else "lower"


VERDICTS = {"higher": "ahead", "lower": "behind", "level": "level"}


def verdict(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> str:
    """How arm ``b`` stands to arm ``a``, each (success, its spread over seeds, Wilson low, Wilson high):
    "ahead", "behind", or "level" when their 95% intervals overlap or ``compare`` finds the difference
    within the seeds' spreads (or half a point)."""
    if b[2] <= a[3] and a[2] <= b[3]:
        return "level"
    return VERDICTS[compare((a[0], a[1]), (b[0], b[1]))]


def pct(mean: float, sd: float | None = None) -> str:
    """0.9712, 0.012 -> "97.1% ± 1.2%"; without sd "97.1%"; NaN (a share of nothing) -> "-"."""
    if np.isnan(mean):
        return "-"
    return f"{mean:.1%}" if sd is None else f"{mean:.1%} ± {sd:.1%}"


def get(table: list[dict], key: str, label: str, by: str = "setting") -> tuple[float, float]:
    """(mean, sd) of ``key`` in the table row whose ``by`` is ``label``."""
    row = next(r for r in table if r[by] == label)
    return row[key], row[f"{key}_sd"]


def format_table(table: list[dict], percent: tuple[str, ...] = (), decimals: dict | None = None) -> str:
    """A plain-text table: one line per row; (mean, sd) pairs as "mean ± sd", ``percent`` keys as %,
    other numbers with ``decimals[key]`` decimals (default 4)."""
    if not table:
        return "(no rows)"
    keys = [k for k in table[0] if not k.endswith("_sd")]
    cells = [[_fmt(r, k, k in percent, (decimals or {}).get(k, 4)) for k in keys] for r in table]
    widths = [max(len(k), *(len(c[i]) for c in cells)) for i, k in enumerate(keys)]
    lines = ["  ".join(k.ljust(w) for k, w in zip(keys, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(cs, widths, strict=True)) for cs in cells]
    return "\n".join(lines)


def _fmt(row: dict, key: str, percent: bool, decimals: int) -> str:
    v, sd = row[key], row.get(f"{key}_sd")
    if isinstance(v, float) and percent:
        return pct(v, sd)
    if isinstance(v, float):
        return f"{v:.{decimals}f}" if sd is None else f"{v:.{decimals}f} ± {sd:.{decimals}f}"
    return str(v)
