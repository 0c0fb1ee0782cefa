"""Crash-safe files: every write is atomic, and a failed write is one error naming the file.

The bytes go to a temporary file in the same directory (``.NAME.XXXX.tmp``), which is flushed to
disk (fsync) and then renamed over the old file (``os.replace``, atomic on POSIX and Windows). A
crash leaves either the old file or the new one, never a torn one.

A failed write (disk full, a file-size limit, no permission) raises ``WriteError``, one message that
names the file and the cause; its temporary file is removed and the old file stays as it was.

A leaf module: the standard library only (matplotlib is the caller's figure, never imported here).
Run directories and checkpoints, which are written with these, live in ``train.checkpoint``.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
from pathlib import Path


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


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _current_umask()


@contextlib.contextmanager
def _staging(path: Path):
    """Yields (binary file, its path): a new temporary file next to ``path``, flushed to disk (fsync)
    after the block. On any exception, Ctrl-C included, it is removed. The caller renames it."""
    with writing(path):
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    tmp = Path(name)
    f = os.fdopen(fd, "wb")
    try:
        if hasattr(os, "fchmod"):                                     # mkstemp makes 0600; give the usual mode
            with writing(path):
                os.fchmod(fd, 0o666 & ~_UMASK)
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


def clean_stale_temporaries(directory) -> None:
    """Remove the temporary files a crashed write left in ``directory`` (they are never read)."""
    for p in Path(directory).glob(".*.tmp"):
        p.unlink(missing_ok=True)


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
