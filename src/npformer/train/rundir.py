"""What a run directory may hold, and the rules for replacing or removing one.

``RUN_FILES`` lists, once, every file npformer writes in a run directory; with the temporaries of
their atomic writes (``.NAME.XXXXXXXX.tmp``) they are the only files ``train --force`` and ``demo``
delete. A directory holding anything else (a file, a folder) is not npformer's to delete: those
commands refuse it with one line naming that entry, before deleting anything.

A run directory that is itself a symbolic link is refused by ``Trainer.start`` and ``resume`` (one
line naming the link and where it points: train there), and so is one holding a link at one of these
names; with ``force=True`` such links are deleted instead, all but one at train.lock, which is refused
in every case (the lock is taken before anything is deleted). Deleting a link removes the link, never
what it points to.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

from ..files import temporary_of
from .checkpoint import CONFIG, LOCK, METRICS, MODEL, OPTIMIZER, STATE
from .probe import PROBE
from .runlog import CURVES, EVAL_LOG, LOG

EXPLORE_PAGE, ACT_FIGURE, ATTENTION_FIGURE = "explore.html", "act.png", "attention.png"
ACT_ANIMATION = "act.gif"                           # npformer act on a run that acts over time (an episode)
DEMOS = "demos.safetensors"                         # demonstrations a task records once and reuses (its cache)
RUN_FILES = frozenset({
    CONFIG, MODEL, OPTIMIZER, STATE, METRICS,       # the run and its checkpoint (train.checkpoint)
    LOG, EVAL_LOG, CURVES,                          # its logs and their plot (train.runlog)
    PROBE,                                          # the probe's attention (train.probe)
    LOCK,                                           # present while a process trains it
    EXPLORE_PAGE,                                   # npformer explore RUN, and the demo
    ACT_FIGURE,                                     # npformer act RUN, and the demo
    ATTENTION_FIGURE,                               # the demo's attention figure
    ACT_ANIMATION,                                  # npformer act RUN: an episode's frames
    DEMOS,                                          # a task's cached demonstrations (rebuilt when missing)
})


def is_run_file(name: str) -> bool:
    """A name npformer writes in a run directory, or the temporary of one."""
    return name in RUN_FILES or temporary_of(name) in RUN_FILES


def refuse_link_dir(run_dir) -> None:
    """ValueError when ``run_dir`` is a symbolic link: npformer trains only into the directory itself."""
    run_dir = Path(run_dir)
    if run_dir.is_symlink():
        raise ValueError(f"run directory {run_dir} is a symbolic link (to {os.readlink(run_dir)}); "
                         f"npformer trains only into a real directory: give its target instead")


def refuse_links(run_dir) -> None:
    """ValueError naming the first of npformer's names that is a symbolic link in ``run_dir``."""
    run_dir = Path(run_dir)
    for name in sorted(RUN_FILES):
        if (run_dir / name).is_symlink():
            raise ValueError(f"{run_dir / name} is a symbolic link; npformer writes only its own files in a "
                             "run directory, never through a link: remove it")


def foreign_entry(run_dir) -> Path | None:
    """The first entry of ``run_dir`` that npformer did not write there (any name not in ``RUN_FILES``
    nor a temporary of one, or a folder under such a name); None when all are npformer's."""
    for p in sorted(Path(run_dir).iterdir()):
        if not is_run_file(p.name) or stat.S_ISDIR(os.lstat(p).st_mode):
            return p
    return None


def clear_run_dir(run_dir, what: str, keep: tuple[str, ...] = ()) -> None:
    """Delete npformer's files in ``run_dir`` (but ``keep``). When it holds anything else, delete nothing
    and raise ValueError naming that entry; ``what`` says which command refuses (e.g. "--force")."""
    run_dir = Path(run_dir)
    other = foreign_entry(run_dir)
    if other is not None:
        raise ValueError(f"{what} deletes only npformer's files, and {other} is not one of them: "
                         f"move it out of {run_dir}, or choose another directory")
    for p in run_dir.iterdir():
        if p.name not in keep:
            p.unlink(missing_ok=True)                                   # a link: the link itself


def check_removable(run_dir, what: str) -> None:
    """ValueError unless ``run_dir`` is a real directory holding only npformer's files."""
    run_dir = Path(run_dir)
    if run_dir.is_symlink() or not run_dir.is_dir():
        kind = "a symbolic link" if run_dir.is_symlink() else "not a directory"
        raise ValueError(f"{what} replaces only npformer's run directories, and {run_dir} is {kind}: "
                         "move it away, or choose another directory")
    other = foreign_entry(run_dir)
    if other is not None:
        raise ValueError(f"{what} replaces only npformer's run directories, and {other} is not npformer's: "
                         f"move it out of {run_dir}, or choose another directory")


def remove_run_dir(run_dir, what: str) -> None:
    """Delete the run directory ``run_dir`` when ``check_removable`` allows it (else its ValueError)."""
    run_dir = Path(run_dir)
    check_removable(run_dir, what)
    clear_run_dir(run_dir, what)
    run_dir.rmdir()
