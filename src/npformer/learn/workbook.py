"""The workbook ``npformer learn init DIR`` writes: ``DIR/transformer.py``, one stub for each exercise in the
lesson's order (each raising NotImplementedError, its docstring the contract and a hint), and
``DIR/README.md``, which says how to check the work; with ``notebook``, also ``DIR/lesson.ipynb``, the
same exercises as notebook cells, each followed by a ``check(...)`` cell (``notebook.py``).

An existing ``transformer.py`` (or, when asked for, ``lesson.ipynb``) is someone's work: it is refused,
or with ``force`` kept first as a ``.bak``. A README.md that differs from the one written here (or is a
link) is left as it is, or with ``force`` kept as a ``.bak`` the same way. A ``.bak`` is the original
itself under a new name (a hard link, or a rename where the file system has none): a link stays a link,
never a copy of what it points to, and a file keeps its permission bits.
"""
from __future__ import annotations

import os
from pathlib import Path

from ..files import atomic_write_bytes, writing
from .notebook import NOTEBOOK, notebook_source

WORKBOOK = "transformer.py"
README = "README.md"

HEADER = '''\
"""Your transformer, one function at a time: the exercises of npformer's lesson.

Replace each `raise NotImplementedError` with your code, in plain NumPy. Check your work with

    npformer learn check {dir}

or one exercise at a time, e.g. `npformer learn check {dir} softmax`.
"""
import numpy as np
'''


def workbook_source(dir_shown: str = ".") -> str:
    """The text of ``transformer.py``: a header, ``import numpy as np``, then every stub."""
    from .exercises import EXERCISES
    stubs = [ex.stub.strip("\n") for ex in EXERCISES.values()]
    return HEADER.format(dir=dir_shown) + "\n\n" + "\n\n\n".join(stubs) + "\n"


def readme_text(dir_shown: str = ".", notebook: bool = False) -> str:
    """The text of ``README.md``: how to check the work, and the exercises with their lesson sections."""
    from .exercises import EXERCISES, section_title
    lines = [
        "# Your transformer workbook",
        "",
        f"`{WORKBOOK}` holds one function for each exercise of npformer's lesson, in the lesson's order.",
        "Each raises `NotImplementedError` until you write it; its docstring gives the contract (shapes,",
        "dtypes, conventions) and a hint.",
        "",
        "Check all of them, or only some:",
        "",
        "```",
        f"npformer learn check {dir_shown}",
        f"npformer learn check {dir_shown} softmax attention",
        "```",
        "",
        "Each exercise is marked pass, fail, error or todo (still the stub). Under a failure comes the input",
        "that exposed it, what came out against what was expected, and the likely mistake, with the section",
        "of `npformer lesson` to read again. Add `--json` for a machine-readable report and `--timeout S` to",
        "change the time limit of 10 s per exercise. `npformer learn quiz` asks the lesson's knowledge check.",
        "",
    ]
    if notebook:
        lines += [
            f"`{NOTEBOOK}` holds the same exercises as Jupyter cells, each followed by a `check(...)` cell that",
            f"grades the function you just ran. `npformer learn check` grades `{WORKBOOK}`, not the notebook.",
            "",
        ]
    lines += [
        "| exercise | lesson section |",
        "|---|---|",
    ]
    lines += [f"| `{ex.signature}` | {ex.section}. {section_title(ex.section)} |" for ex in EXERCISES.values()]
    return "\n".join(lines) + "\n"


def init(dir, force: bool = False, notebook: bool = False) -> list[Path]:
    """Write ``DIR/transformer.py`` and ``DIR/README.md``, and with ``notebook`` ``DIR/lesson.ipynb``;
    returns the files written, backups included.

    Refuses a DIR that already holds a transformer.py (or, with ``notebook``, a lesson.ipynb) unless
    ``force``, which first keeps it as a ``.bak`` (``transformer.py.bak``, or ``transformer.py.1.bak``,
    ... when that name is taken). Nothing is written when it refuses. Without ``force`` an existing
    README.md of other text, or a link, is left as it is (and not in the list).
    """
    dir = Path(dir)
    if dir.exists() and not dir.is_dir():
        raise NotADirectoryError(f"{dir} is a file, not a folder for the workbook")
    shown = str(dir)
    files = [(dir / WORKBOOK, workbook_source(shown).encode()), (dir / README, readme_text(shown, notebook).encode())]
    if notebook:
        files.append((dir / NOTEBOOK, notebook_source().encode()))
    for path in (dir / WORKBOOK, dir / NOTEBOOK) if notebook else (dir / WORKBOOK,):
        if (path.exists() or path.is_symlink()) and not force:
            raise FileExistsError(f"{path} already exists; --force overwrites it after keeping a .bak copy")
    with writing(dir):
        dir.mkdir(parents=True, exist_ok=True)
    written = []
    for path, data in files:
        if path.is_symlink() or (path.exists() and (not path.is_file() or path.read_bytes() != data)):
            if not force:                       # only README.md gets here: the others were refused above
                continue
            written.append(_backup(path))
        atomic_write_bytes(path, data)
        written.append(path)
    return written


def _backup(path: Path) -> Path:
    """Keep ``path`` itself under the first free name of NAME.bak, NAME.1.bak, NAME.2.bak, ...: a hard link to
    it (a link to a link stays a link), or where the file system has none, the original renamed."""
    n = 0
    while True:
        bak = path.with_name(f"{path.name}.bak" if n == 0 else f"{path.name}.{n}.bak")
        if not bak.exists() and not bak.is_symlink():
            with writing(bak):
                try:
                    os.link(path, bak, follow_symlinks=False)
                    return bak
                except FileExistsError:         # taken since: try the next name
                    pass
                except (OSError, NotImplementedError):
                    os.rename(path, bak)
                    return bak
        n += 1
