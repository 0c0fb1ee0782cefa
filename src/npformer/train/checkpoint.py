"""Run directories and checkpoints.

A run directory holds

    config.json             {"task", "model_kind", "model": {...}, "train": {...}, "data": {...}}
    model.safetensors       the weights under their dotted state_dict names
    optimizer.safetensors   Adam's moments ("exp_avg.<name>", "exp_avg_sq.<name>") and "step"
    trainer_state.json      step, random-generator states, time and tokens so far (resume is exact)
    metrics.json            the latest held-out metrics
    log.csv, eval.csv       the training and evaluation logs; curves.png, their plot
    probe_attention.safetensors   a fixed probe input's attention at each evaluation (train/probe.py)
    train.lock              present while a process trains the run (see ``RunLock``)

Every file is written atomically, with ``npformer.files`` (temporary file, fsync, rename; a failed
write raises ``files.WriteError`` naming the file and leaves the old file as it was), but three that
are written in place: train.lock, and log.csv and eval.csv, appended to row by row. The full list, the
only files ``--force`` and the demo delete, is ``train.rundir.RUN_FILES``.

Links: npformer never writes through a symbolic link planted at one of these names. ``Trainer.start``
and ``resume`` refuse, with one line naming it, a run directory that holds one, or that is one; a
link planted while a run trains is replaced itself by the atomic writes (the rename never follows it;
the file it points to stays as it was) and refused by the three written in place (``O_NOFOLLOW``: one
line naming the file, and the run stops as a failed write does).

A checkpoint is three files. ``save_checkpoint`` first writes all three to temporary files, so a
crash while writing (the slow part) leaves the last good checkpoint untouched; only then does it
rename them, model, optimizer and trainer state last. Each carries its step, and loading checks they
agree, so a crash in the microseconds between two renames is reported, not silently resumed.
No pickle anywhere: safetensors for arrays, JSON for the rest.

One process at a time trains a run: ``RunLock`` holds an OS lock (``fcntl.flock``) on ``train.lock``
in the directory. The kernel drops such a lock when its process ends, however it ends, so a crash or
``kill -9`` leaves at most a stale file that blocks nobody.
"""
from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from .. import settings
from ..files import _fsync_dir, _stage, open_in_place, writing
from ..tensorfile import DTYPES, read_header, read_tensors, safetensors_bytes

CONFIG, MODEL, OPTIMIZER, STATE, METRICS = (
    "config.json", "model.safetensors", "optimizer.safetensors", "trainer_state.json", "metrics.json")
LOCK = "train.lock"


def read_safetensors(path, expect: dict[str, np.ndarray] | None = None) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """(tensors, metadata) of a safetensors file; ValueError naming the file when it is unreadable.

    The header is read and checked alone first (``tensorfile.read_header``: its size, every entry's
    dtype, shape and byte range, the ranges tiling the data). With ``expect`` (name -> array), the
    header's names, shapes and dtypes must also match it (``check_state_matches``) before any tensor
    is read, so a file that disagrees with its config.json takes no memory for its tensors."""
    entries, meta = read_header(path)
    if expect is not None:
        declared = {name: SimpleNamespace(shape=e.shape, dtype=np.dtype(DTYPES[e.dtype][0] or "V2"))
                    for name, e in entries.items()}                          # bfloat16: no numpy dtype
        check_state_matches(expect, declared, str(path))
    return read_tensors(path, entries), meta


def read_json(path) -> dict:
    """A run's JSON file, read with ``settings.read_json``'s limits; one-line errors naming it."""
    return settings.read_json(path, top=dict)


# -- checkpoints ----------------------------------------------------------------------------------

def save_checkpoint(run_dir, model_state: dict[str, np.ndarray], optimizer_state: dict[str, np.ndarray],
                    trainer_state: dict, step: int) -> None:
    """Write model, optimizer and trainer state for ``step``: all staged first, then renamed."""
    run_dir = Path(run_dir)
    meta = {"format": "npformer", "step": str(step)}
    payloads = [
        (run_dir / MODEL, safetensors_bytes(model_state, meta)),
        (run_dir / OPTIMIZER, safetensors_bytes(optimizer_state, meta)),
        (run_dir / STATE, (json.dumps({**trainer_state, "step": step}, indent=2) + "\n").encode("utf-8")),
    ]
    staged: list[tuple[Path, Path]] = []
    try:
        for path, data in payloads:
            staged.append((_stage(path, data), path))
    except BaseException:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        raise
    for i, (tmp, path) in enumerate(staged):
        try:
            with writing(path):
                os.replace(tmp, path)
        except BaseException:
            for later, _ in staged[i:]:
                later.unlink(missing_ok=True)
            raise
    _fsync_dir(run_dir)


# -- one trainer per run directory ----------------------------------------------------------------

class RunLocked(OSError):
    """Another process holds the run directory's lock (it is training that run)."""


try:                                                                   # POSIX
    import fcntl

    def _try_lock(fd: int) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True
except ImportError:                                                    # Windows
    import msvcrt

    def _try_lock(fd: int) -> bool:
        os.lseek(fd, 0, os.SEEK_SET)
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)  # type: ignore[attr-defined]  # Windows only; mypy checks as Linux
        except OSError:
            return False
        return True


class RunLock:
    """An exclusive lock on a run directory, held from construction until ``release()`` (or until
    the process ends: the kernel drops the lock then). ``RunLocked`` when another process holds it.

    The lock is on ``train.lock``, which holds the holder's pid for the error message and is
    removed on release. Removing it races with a process that opened it just before: that one
    then holds a lock on a file no longer in the directory, so after locking we check that the
    file we locked is still the one named ``train.lock``, and try again if not."""

    def __init__(self, run_dir) -> None:
        self.path, self._fd = Path(run_dir) / LOCK, None
        while True:
            fd = open_in_place(self.path, os.O_RDWR | os.O_CREAT)         # a link there: refused, never truncated
            if not _try_lock(fd):
                pid = _read_pid(fd)
                os.close(fd)
                raise RunLocked(f"{self.path.parent} is being trained by another process"
                                f"{f' (pid {pid})' if pid else ''}: wait for it to end, or choose another --out")
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        self._fd = fd
        with contextlib.suppress(OSError):                            # the pid only informs; a full disk may refuse it
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())

    def release(self) -> None:
        """Remove the lock file and drop the lock; a second call does nothing."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:                                                           # while still locked: never another's file
            self.path.unlink(missing_ok=True)
            removed = True
        except OSError:                                                # Windows: an open file cannot be removed
            removed = False
        os.close(fd)
        if not removed:                                                # (and there, nobody can remove a file
            with contextlib.suppress(OSError):                        # another process holds open)
                self.path.unlink(missing_ok=True)

    def __del__(self) -> None:
        self.release()

    def __enter__(self) -> "RunLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _read_pid(fd: int) -> int | None:
    try:
        return int(os.pread(fd, 32, 0).decode().strip())
    except (OSError, ValueError, AttributeError):                     # unreadable, empty, or no pread
        return None


@dataclass
class Run:
    """A loaded run directory: the task, the model (eval mode) and the saved JSON."""
    path: Path
    config: dict
    task: Any                   # the run's Task subclass (load_run checks the name it was asked for)
    model: Any                  # the model its task builds (load_run checks the kind it was asked for)
    step: int
    metrics: dict = field(default_factory=dict)
    trainer_state: dict = field(default_factory=dict)


def read_config(run_dir) -> dict:
    """config.json of a run directory, checked for its sections; one-line errors otherwise."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run directory not found: {run_dir}")
    if not (run_dir / CONFIG).is_file():
        raise FileNotFoundError(f"{run_dir} is not an npformer run directory (no {CONFIG})")
    config = read_json(run_dir / CONFIG)
    for key, typ in (("task", str), ("model_kind", str), ("model", dict), ("train", dict), ("data", dict)):
        if not isinstance(config.get(key) if isinstance(config, dict) else None, typ):
            raise ValueError(f"{run_dir / CONFIG} lacks a valid {settings.quoted(key)} entry")
    return config


def run_seed(run) -> int:
    """A loaded run's training seed (config.json's train.seed, 0 when absent); a value that is not a
    non-negative int is a FileFormatError naming the file."""
    seed = (run.config.get("train") or {}).get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise settings.FileFormatError(f"{Path(run.path) / CONFIG}: train.seed must be a non-negative int, "
                                       f"got {seed!r}")
    return seed


def load_run(run_dir, task: str | None = None, model_kind: str | tuple[str, ...] | None = None) -> Run:
    """Load a run directory's task and trained model, checking what the caller expects.

    task / model_kind: when given, a run of another task or kind is a ValueError naming both.
    The weights must match the shapes config.json implies, key by key. A link in the directory that
    leads outside it is refused (``settings.check_links``), before any file is read."""
    from ..data.tasks import get_task, model_config_from_dict

    run_dir = Path(run_dir)
    settings.check_links(run_dir)                                         # a link leading outside: refused
    config = read_config(run_dir)
    if task is not None and config["task"] != task:
        raise ValueError(f"{run_dir} holds a {settings.quoted(config['task'])} run, not a {settings.quoted(task)} run")
    kinds = (model_kind,) if isinstance(model_kind, str) else model_kind
    if kinds is not None and config["model_kind"] not in kinds:
        raise ValueError(f"{run_dir} holds a {config['model_kind']} model ({settings.quoted(config['task'])} task); "
                         f"this command needs a {' or '.join(kinds)} model")
    with settings.reading(run_dir / CONFIG):                              # its errors name config.json
        task_cls = get_task(config["task"])
        if task_cls.model_kind != config["model_kind"]:
            raise ValueError(f"{run_dir / CONFIG}: task {settings.quoted(config['task'])} uses a "
                             f"{task_cls.model_kind} model, not {settings.quoted(config['model_kind'])}")
        the_task = task_cls.from_dict(config["data"])
        model_config = model_config_from_dict(config["model_kind"], config["model"])
    model = the_task.build_model(model_config, rng=np.random.default_rng(0))
    if not (run_dir / MODEL).is_file():
        raise FileNotFoundError(f"{run_dir} has no {MODEL} yet (training has not saved a checkpoint)")
    tensors, meta = read_safetensors(run_dir / MODEL, expect=model.state_dict())
    model.load_state_dict(tensors)
    model.eval()
    state = read_json(run_dir / STATE) if (run_dir / STATE).is_file() else {}
    metrics = read_json(run_dir / METRICS) if (run_dir / METRICS).is_file() else {}
    with settings.reading(run_dir / MODEL):
        step = int(meta.get("step", state.get("step", 0)))
    return Run(run_dir, config, the_task, model, step, metrics, state)


def check_state_matches(own: dict[str, np.ndarray], loaded: Mapping[str, np.ndarray | SimpleNamespace],
                        where: str) -> None:
    """ValueError (one line) unless ``loaded`` has exactly ``own``'s keys, shapes and dtypes."""
    missing = sorted(set(own) - set(loaded))
    unexpected = sorted(set(loaded) - set(own))
    if missing or unexpected:
        raise ValueError(f"{where} does not match config.json: missing {missing[:3]}, unexpected {unexpected[:3]}")
    for k, a in own.items():
        b = loaded[k]
        if b.shape != a.shape:
            raise ValueError(f"{where} does not match config.json: {k} has shape {tuple(b.shape)}, "
                             f"the config gives {tuple(a.shape)}")
        if b.dtype != a.dtype:
            raise ValueError(f"{where}: {k} has dtype {b.dtype}, expected {a.dtype}")
