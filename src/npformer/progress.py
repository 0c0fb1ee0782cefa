"""Progress of a long command, decided in one place: a bar where it can redraw itself, plain lines elsewhere.

On a terminal (or in a Jupyter kernel, whose output also understands carriage returns)
``progress_display`` gives tqdm's bar, as before. In a file or a pipe (CI, ``nohup``,
``make demo > log 2>&1``) a bar would leave hundreds of carriage-return updates, so ``Lines`` writes
one plain line per tenth of the work instead, and one where it stopped early; when the total is
unknown (a training budget in minutes), one line a minute. Lines that the command writes itself
(``write``: a held-out evaluation) go to stdout in both cases, as ``tqdm.write`` sends them.

Every command that shows progress (train, study, demo, embed, similar, ``SentenceEncoder.encode``)
asks ``progress_display`` for its bar; ``--no-progress`` is ``enabled=False``.
"""
from __future__ import annotations

import sys
import time
from typing import TextIO

UNKNOWN_TOTAL_EVERY = 60.0          # seconds between lines when the total is not known


def draws_bar(stream) -> bool:
    """Whether a bar redraws in place on ``stream``: a terminal, or a Jupyter kernel's output. A file, a
    pipe, a closed stream or an object without ``isatty`` gets plain lines."""
    if type(stream).__module__.split(".")[0] == "ipykernel":
        return True
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):                       # no isatty, or a closed stream
        return False


def progress_display(total: int | None, desc: str, unit: str, *, enabled: bool = True, initial: int = 0,
             file: TextIO | None = None):
    """A progress display for ``total`` units of work (None: unknown), ``initial`` of them already done,
    on ``file`` (default stderr): tqdm's bar where ``draws_bar``, else ``Lines``. Either has ``update(n)``,
    ``set_postfix_str(text)``, ``write(text)``, ``close()`` and works as a context manager.
    ``enabled=False`` shows nothing (``write`` still prints)."""
    stream = sys.stderr if file is None else file
    if enabled and draws_bar(stream):
        from tqdm.auto import tqdm
        return tqdm(total=total, initial=initial, desc=desc, unit=unit, file=stream, dynamic_ncols=True,
                    mininterval=0.5)
    return Lines(total, desc, unit, stream, initial=initial, quiet=not enabled)


class Lines:
    """The bar's stand-in in a log: a line such as ``train dates: 150/1,500 steps (10%) in 12 s; loss 2.41``
    each time the work passes another tenth of ``total`` (so at most ten), one at ``close`` if the work
    stopped between two of them, and with an unknown total one every ``every`` seconds."""

    def __init__(self, total: int | None, desc: str, unit: str, stream: TextIO, initial: int = 0,
                 quiet: bool = False, every: float = UNKNOWN_TOTAL_EVERY) -> None:
        self.total, self.desc, self.unit, self.stream = total or None, desc, unit, stream
        self.n = self.shown = initial
        self.quiet, self.every, self.postfix, self.closed = quiet, every, "", False
        self.start = self.last = time.monotonic()
        self.tenth = self._tenth(initial)

    def _tenth(self, n: int) -> int:
        return n * 10 // self.total if self.total else 0

    def update(self, n: int = 1) -> None:
        self.n += n
        if self.quiet:
            return
        if self.total:
            if self._tenth(self.n) > self.tenth:
                self.tenth = self._tenth(self.n)
                self._line()
        elif time.monotonic() - self.last >= self.every:
            self._line()

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        self.postfix = s

    def write(self, text: str) -> None:
        print(text, flush=True)

    def close(self) -> None:
        if not (self.quiet or self.closed) and self.n != self.shown:
            self._line()
        self.closed = True

    def __enter__(self) -> Lines:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _line(self) -> None:
        now = time.monotonic()
        done = f"{self.n:,} {self.unit}s"
        if self.total:
            done = f"{self.n:,}/{self.total:,} {self.unit}s ({self.n / self.total:.0%})"
        text = f"{self.desc}: {done} in {_clock(now - self.start)}" + (f"; {self.postfix}" if self.postfix else "")
        sys.stdout.flush()                           # what the command printed before comes first in a shared log
        self.stream.write(text + "\n")
        self.stream.flush()
        self.shown, self.last = self.n, now


def _clock(seconds: float) -> str:
    """0.4 s, 12 s, 3 min 05 s, 1 h 02 min."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    s = int(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s // 60 % 60:02d} min"
