"""Crash-safe files: every write is atomic, and a failed write is one error naming the file.

The bytes go to a temporary file in the same directory (``.NAME.XXXXXXXX.tmp``), which is flushed to
disk (fsync) and then renamed over the old file (``os.replace``, atomic on POSIX and Windows). A
crash leaves either the old file or the new one, never a torn one.

Links: nothing here writes through a symbolic link. The temporary is created with ``O_EXCL`` (and
``O_NOFOLLOW``), so a link planted at its name is never opened (another name is drawn), and the rename
replaces a link at ``NAME`` itself, leaving the file it points to as it was. ``open_append``, for
files written in place, refuses a link with one line.

Modes: the new file keeps the permission bits of the regular file it replaces (a 0600 file stays
0600); a new file gets what ``open(NAME, "w")`` would give it (0666 less the umask), because the
temporary is created with mode 0666 and the kernel applies the umask. The umask is never read or set.

A failed write (disk full, a file-size limit, no permission) raises ``WriteError``, one message that
names the file and the cause; its temporary file is removed and the old file stays as it was.

A leaf module: the standard library only (matplotlib is the caller's figure, never imported here).
Run directories and checkpoints, which are written with these, live in ``train.checkpoint``.
"""
from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import re
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)                              # 0 where the OS has none (Windows)
_BINARY = getattr(os, "O_BINARY", 0)
_TEMPORARY = re.compile(r"\.(.+)\.[^.]+\.tmp")                         # .NAME.XXXXXXXX.tmp (older: mkstemp's)


class WriteError(OSError):
    """A file could not be written: "cannot write PATH: CAUSE" (e.g. "No space left on device").
    ``errno`` is the cause's; ``path`` the file meant, not its temporary."""

    def __init__(self, path, cause: OSError) -> None:
        super().__init__(f"cannot write {path}: {cause.strerror or cause}")
        self.errno, self.path = cause.errno, Path(path)


@contextlib.contextmanager
def writing(path):
    """Within the block, an OSError becomes a WriteError naming ``path``."""
    try:
        yield
    except WriteError:
        raise
    except OSError as e:
        raise WriteError(path, e) from None


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:                                                     # e.g. Windows: directories cannot be opened
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def temporary_of(name: str) -> str | None:
    """The file a temporary named ``name`` was staging (``.NAME.XXXXXXXX.tmp`` -> NAME), else None.
    (The random part has no dot; older versions drew it with ``tempfile.mkstemp``.)"""
    m = _TEMPORARY.fullmatch(name)
    return m.group(1) if m else None


def _temporary_names(path: Path) -> Iterator[Path]:
    """Candidate temporary names next to ``path``: ``.NAME.`` + 8 random hex digits + ``.tmp``."""
    while True:
        yield path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"


def _replaced_mode(path: Path) -> int | None:
    """The permission bits to keep: those of the regular file at ``path``; None when there is none
    (nothing, or a link: a link is replaced, and what it points to lends nothing)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return stat.S_IMODE(st.st_mode) & 0o777 if stat.S_ISREG(st.st_mode) else None


def _create_temporary(path: Path) -> tuple[int, Path]:
    """A new, empty temporary file next to ``path`` (its fd and path), never one a link points to:
    O_EXCL fails on any existing name, a planted link included, and then another name is tried."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _BINARY
    for attempt, tmp in enumerate(_temporary_names(path)):
        try:
            return os.open(tmp, flags, 0o666), tmp                    # 0666 less the umask, as open(.., "w")
        except FileExistsError:
            if attempt == 99:
                raise
    raise AssertionError("unreachable: _temporary_names never ends")


@contextlib.contextmanager
def _staging(path: Path):
    """Yields (binary file, its path): a new temporary file next to ``path``, with the mode of the file
    it will replace, flushed to disk (fsync) after the block. On any exception, Ctrl-C included, it
    is removed. The caller renames it."""
    with writing(path):
        mode = _replaced_mode(path)
        fd, tmp = _create_temporary(path)
    f = os.fdopen(fd, "wb")
    try:
        if mode is not None and hasattr(os, "fchmod"):
            with writing(path):
                os.fchmod(fd, mode)
        yield f, tmp
        with writing(path):
            f.flush()
            os.fsync(f.fileno())
            f.close()
    except BaseException:
        with contextlib.suppress(OSError):                            # its buffer may not fit either
            f.close()
        tmp.unlink(missing_ok=True)
        raise


def _stage(path: Path, data: bytes) -> Path:
    """Write ``data`` to a new temporary file next to ``path``, flushed to disk; returns its path."""
    with _staging(path) as (f, tmp), writing(path):
        f.write(data)
    return tmp


def _commit(tmp: Path, path: Path) -> None:
    try:
        with writing(path):
            os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def clean_stale_temporaries(directory, names) -> None:
    """Remove the temporary files a crashed write of one of ``names`` left in ``directory`` (they are
    never read); other files stay. A link is removed itself, never followed."""
    for p in Path(directory).iterdir():
        if temporary_of(p.name) in names:
            p.unlink(missing_ok=True)


def open_in_place(path, flags: int) -> int:
    """``os.open(path, flags | O_NOFOLLOW, 0o666)`` for a file written in place, never through a link:
    a symbolic link there is a WriteError naming it (as is any other failure)."""
    path = Path(path)
    with writing(path):
        try:
            return os.open(path, flags | _NOFOLLOW, 0o666)
        except OSError:
            if path.is_symlink():                                     # Linux says ELOOP, BSDs EMLINK
                raise WriteError(path, OSError(errno.ELOOP, "it is a symbolic link, and npformer never "
                                                            "writes through one")) from None
            raise


def open_append(path):
    """``path`` opened for appending text (created when missing), never through a link."""
    fd = open_in_place(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    return os.fdopen(fd, "a", newline="", encoding="utf-8")


def atomic_write_bytes(path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically (temporary file + fsync + rename)."""
    path = Path(path)
    _commit(_stage(path, data), path)


@contextlib.contextmanager
def atomic_writer(path):
    """Stream bytes into ``path`` atomically: yields a binary file (a temporary next to ``path``);
    a clean end of the block flushes it to disk and renames it over ``path``; an exception (Ctrl-C
    included) removes it and leaves ``path`` as it was. Wrap the block's writes in ``writing(path)``
    for errors that name ``path``."""
    path = Path(path)
    with _staging(path) as (f, tmp):
        yield f
    _commit(tmp, path)


def atomic_write_json(path, obj) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=False) + "\n").encode("utf-8"))


def atomic_savefig(fig, path, **kwargs) -> None:
    """``fig.savefig`` into memory, then an atomic write (a figure is never half-written)."""
    buf = io.BytesIO()
    fig.savefig(buf, format=Path(path).suffix.lstrip(".") or "png", **kwargs)
    atomic_write_bytes(path, buf.getvalue())
