"""Grades a learner's code in a child process, one exercise after another, each with a time limit.

``grade_file(path, names, timeout=...)`` grades the functions of a workbook file (``npformer learn check``);
``grade_functions({name: fn}, timeout=...)`` grades function objects (``npformer.learn.check``). Both
return a ``Report``.

One child grades every exercise in order. The parent waits ``timeout`` seconds for each exercise's
result: an exercise that takes longer (an endless loop) is an error, the child is killed and a fresh
one grades the exercises after it. A child that ends on its own (``os._exit``, a crash in compiled
code, a signal) makes that exercise an error the same way. ``sys.exit`` is an exception like any other.
A workbook is imported in the child by its file path, so its top-level code runs there too; it is
compiled in the parent first, so that a syntax error is one message with its file and line.

The child only runs the learner's functions on the cases (``trial.py``) and sends back plain data: each
output's type, dtype, shape and values, each input's arrays after the call, and for an exception its type,
message and the learner's frames (``wire.py``: JSON and raw array bytes, never a pickle). The parent, which
never imports the workbook, judges that data with its own NumPy and its own float64 references
(``checks.judge``) and writes every diagnosis. Each request carries a fresh random nonce; a record that
does not answer it, in the expected format and order, makes that exercise an error saying the workbook
interfered, and nothing more from that child is read. So the workbook's code, which can change anything
in the child, can change only the data the parent judges: a verdict is not its to write.

In the child, printing goes to a buffer (kept as ``Row.output``), never to the terminal or the
notebook, and an exception's traceback keeps only the learner's frames: those outside npformer and
NumPy. The stub's ``NotImplementedError`` makes the exercise "todo".

The child is forked where the platform can fork: cheap, and a notebook's function, which cannot be
imported by name, reaches it as it is. Elsewhere a workbook file is graded in a spawned child that
imports it, and function objects are graded in this process, without a time limit, which the
report's note says.
"""
from __future__ import annotations

import contextlib
import importlib.util
import io
import math
import multiprocessing
import os
import secrets
import signal
import sys
import time
import warnings
from pathlib import Path

from . import wire
from .report import Report, Row
from .trial import LocalTrials, composed, error_record, read_built, read_case, records
from .wire import ChannelBroken, Garbled, LearnerRaised, Missing, decode, encode, parse_error

MAX_WORKBOOK_BYTES = 1 << 20        # a workbook is a page of code; refuse anything far larger before reading it
MAX_OUTPUT_CHARS = 100_000          # what one exercise printed, kept in Row.output (a print in a loop is endless)


def can_fork() -> bool:
    return "fork" in multiprocessing.get_all_start_methods()


def check_timeout(timeout) -> float:
    """A time limit in seconds: a positive finite number."""
    try:
        value = float(timeout)
    except (TypeError, ValueError):
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    return value


def exercise_names(names=None) -> list[str]:
    """The exercises to grade, in the lesson's order: all of them, or those named (each once)."""
    from .exercises import EXERCISES
    if names is None or len(names) == 0:
        return list(EXERCISES)
    unknown = [n for n in names if n not in EXERCISES]
    if unknown:
        raise ValueError(f"no exercise named {unknown[0]!r}; the exercises are {', '.join(EXERCISES)}")
    return [n for n in EXERCISES if n in set(names)]


def grade_file(path, names=None, *, timeout: float = 10.0) -> Report:
    """Grade the functions of the workbook file ``path`` (a ``transformer.py``): every exercise, or the
    ones in ``names``."""
    timeout = check_timeout(timeout)
    names = exercise_names(names)
    path = Path(path)
    source = _read_workbook(path)
    try:
        compile(source, str(path), "exec")
    except SyntaxError as e:                    # also a file that is not valid UTF-8
        where = f"{e.filename or path}, line {e.lineno}" if e.lineno else str(e.filename or path)
        text = f"\n    {e.text.strip()}" if e.text and e.text.strip() else ""
        message = f"syntax error in {where}: {e.msg}{text}"
        return Report(tuple(Row(n, "error", message) for n in names))
    if can_fork():
        return Report(_grade_in_children(multiprocessing.get_context("fork"), ("file", str(path)), names, timeout))
    return Report(_grade_in_children(multiprocessing.get_context("spawn"), ("file", str(path)), names, timeout))


def grade_functions(functions: dict, *, timeout: float = 10.0) -> Report:
    """Grade function objects, ``{exercise name: fn}``, in the lesson's order."""
    timeout = check_timeout(timeout)
    names = exercise_names(list(functions))
    for name in names:
        if not callable(functions[name]):
            raise TypeError(f"fn must be a function, got {type(functions[name]).__name__} for {name!r}")
    if can_fork():
        return Report(_grade_in_children(multiprocessing.get_context("fork"), ("functions", functions), names,
                                         timeout))
    rows = [_grade_here(name, functions) for name in names]
    return Report(tuple(rows), note="graded in this process: this platform cannot fork, so there is no time "
                                    "limit, and a crash or an exit would end this session")


def _read_workbook(path: Path) -> bytes:
    if path.is_dir():
        raise ValueError(f"{path} is a folder; give the workbook file (transformer.py)")
    size = path.stat().st_size                  # a missing file: FileNotFoundError naming it
    if size > MAX_WORKBOOK_BYTES:
        raise ValueError(f"{path} holds {size} bytes, more than a workbook's {MAX_WORKBOOK_BYTES}")
    return path.read_bytes()


# ---------------------------------------------------------------------------------------------- parent

def _grade_in_children(ctx, source, names: list[str], timeout: float) -> tuple[Row, ...]:
    """Grade ``names`` in order in a child; after a child is lost, a fresh one grades the rest."""
    from .exercises import EXERCISES
    for name in names:                          # built here, so that a forked child inherits them too
        EXERCISES[name].cases()
    rows: dict[str, Row] = {}
    while len(rows) < len(names):
        rows.update(_one_child(ctx, source, [n for n in names if n not in rows], timeout))
    return tuple(rows[n] for n in names)


def _one_child(ctx, source, names: list[str], timeout: float) -> dict[str, Row]:
    """Rows for ``names``, in order, until the child is lost: at least the first name gets one."""
    ours, theirs = ctx.Pipe(duplex=True)
    proc = ctx.Process(target=_child, args=(theirs, source), daemon=True)
    with warnings.catch_warnings():             # Python 3.12+ warns on fork with threads alive (BLAS's)
        warnings.simplefilter("ignore", DeprecationWarning)
        proc.start()
    theirs.close()
    trials = RemoteTrials(ours, proc, timeout)
    rows: dict[str, Row] = {}
    try:
        what = f"importing {Path(source[1]).name}" if source[0] == "file" else "starting"
        trials.begin(what)
        try:
            hello = trials.hello()
        except ChannelBroken as e:
            return {n: Row(n, "error", str(e)) for n in names}
        if hello is not None:                   # the workbook's top-level code failed: every exercise inherits it
            return {n: Row(n, "error", hello.text(f"{what} raised")) for n in names}
        for name in names:
            rows[name], alive = _grade_one(name, trials)
            if not alive:                       # a fresh child grades the rest
                return rows
        return rows
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join()
        ours.close()


def _grade_one(name: str, trials) -> tuple[Row, bool]:
    """One exercise's row, judged here from what ``trials`` reports, and whether the child is still usable."""
    from .exercises import EXERCISES
    trials.begin(name)
    status, message = "error", ""
    try:
        verdict = EXERCISES[name].judge(trials)
        status, message = verdict.status, verdict.message if verdict.status == "fail" else ""
    except Missing:
        message = f"there is no function {name}: {EXERCISES[name].signature} is expected"
    except LearnerRaised as e:
        status = "todo" if e.error.todo else "error"
        message = "" if e.error.todo else EXERCISES[name].report_error(e.error, e.index)
    except ChannelBroken as e:
        return Row(name, "error", str(e)), False
    try:
        output = trials.settle()
    except ChannelBroken:                       # the verdict stands; the child is not used again
        return Row(name, status, message), False
    return Row(name, status, message, output), True


class Lost(ChannelBroken):
    """The child took longer than the time limit, or ended."""


class RemoteTrials:
    """The parent's side of the grading child: each request gets a fresh random nonce, and only records
    that answer it, in the expected order and format, are read; everything before ``timeout`` seconds from
    ``begin`` on. A child that breaks this raises ``ChannelBroken`` and is not asked again."""

    def __init__(self, conn, proc, timeout: float):
        self.conn, self.proc, self.timeout = conn, proc, timeout
        self.what, self.deadline, self.output = "", 0.0, ""
        self.open: str | None = None            # the nonce of a request not yet answered to its end

    def begin(self, what: str) -> None:
        self.what, self.deadline, self.output = what, time.monotonic() + self.timeout, ""

    def hello(self):
        """None when the workbook was imported, else its ``LearnerError``."""
        record = self._next()
        if record.get("kind") == "ready" and len(record) == 1:
            return None
        if record.get("kind") == "load-error":
            return parse_error(record.get("error"))
        raise Garbled(self._garbled("a first message that is neither ready nor an error"))

    def run(self, exercise: str, helper: str | None = None):
        from .exercises import EXERCISES
        n = len(EXERCISES[helper or exercise].cases())
        nonce = self._request({"do": "run", "exercise": exercise, "helper": helper})
        for index in range(n):
            record = self._answer(nonce)
            kind = record.get("kind")
            if kind == "missing" and index == 0:
                self._end(nonce)
                raise Missing()
            if kind not in ("case", "raised") or record.get("index") != index:
                raise Garbled(self._garbled(f"a record out of order ({kind!r} for case {index})"))
            if kind == "raised":
                self._end(nonce)
            yield read_case(record)
        self._end(nonce)

    def compose(self, exercise: str, index: int, theirs: list):
        nonce = self._request({"do": "compose", "exercise": exercise, "index": index, "theirs": list(theirs)})
        record = self._answer(nonce)
        if record.get("kind") not in ("built", "raised"):
            raise Garbled(self._garbled("a record that is not the composition asked for"))
        self._end(nonce)
        return read_built(record)

    def settle(self) -> str:
        """Read what is left of the last answer; what the exercise printed."""
        if self.open is not None:
            self._end(self.open)
        return self.output

    def _request(self, request: dict) -> str:
        self.settle()
        nonce = secrets.token_hex(16)
        self.conn.send_bytes(encode({**request, "nonce": nonce}))
        self.open = nonce
        return nonce

    def _answer(self, nonce: str) -> dict:
        record = self._next()
        if record.get("nonce") != nonce:
            raise Garbled(self._garbled("a record that answers no request of the grader"))
        return record

    def _end(self, nonce: str) -> None:
        """Skip the rest of the answer to ``nonce`` (cases after a verdict) up to its end."""
        while True:
            record = self._answer(nonce)
            if record.get("kind") == "end":
                output = record.get("output")
                if not isinstance(output, str):
                    raise Garbled(self._garbled("an end without its output"))
                self.output = _printed(self.output + output)
                self.open = None
                return
            if record.get("kind") not in ("case", "raised", "built", "missing"):
                raise Garbled(self._garbled("a record of an unknown kind"))

    def _next(self) -> dict:
        if not self.conn.poll(max(0.0, self.deadline - time.monotonic())):
            self.proc.kill()
            raise Lost(f"{self.what} took longer than the time limit of {self.timeout:g} s (an endless loop?)")
        try:
            data = self.conn.recv_bytes(wire.MAX_MESSAGE_BYTES)
        except EOFError:                        # the child ended without a word
            self.proc.join()
            raise Lost(f"the process ended while {_during(self.what)}: {_ended(self.proc.exitcode)}") from None
        except OSError:                         # longer than any answer, or a torn one
            raise Garbled(self._garbled("a message it cannot read")) from None
        try:
            return decode(data)
        except Garbled as e:
            raise Garbled(self._garbled(str(e))) from None

    def _garbled(self, why: str) -> str:
        return (f"the workbook interfered with the grading while {_during(self.what)}: the grader received {why}, "
                f"so nothing more from that process counts")


def _during(what: str) -> str:
    return what if what.startswith(("importing", "starting")) else f"grading {what}"


def _ended(code) -> str:
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name} (a crash)"
    return f"exit status {code} (os._exit, or a crash in compiled code)"


def _printed(text: str) -> str:
    return text if len(text) <= MAX_OUTPUT_CHARS else text[:MAX_OUTPUT_CHARS] + "\n... (printing cut short)\n"


# ----------------------------------------------------------------------------------------------- child

def _child(conn, source) -> None:
    """Load the learner's functions, say "ready", then answer the parent's requests with plain records
    (``trial.py``, ``wire.py``) until the parent closes the pipe. Nothing here judges anything."""
    devnull = os.open(os.devnull, os.O_WRONLY)  # output written below Python (C code, os.write) goes nowhere
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    sys.stdout = sys.stderr = io.StringIO()
    buffer = io.StringIO()
    try:
        with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
            functions = _load(source)
    except BaseException as e:                  # noqa: B036 (the child is disposable; SystemExit is the learner's)
        conn.send_bytes(encode({"kind": "load-error", "error": error_record(e, source[1])}))
        return
    conn.send_bytes(encode({"kind": "ready"}))
    from .exercises import EXERCISES
    while True:
        try:
            request = decode(conn.recv_bytes())
        except EOFError:
            return
        nonce, buffer = request["nonce"], io.StringIO()
        with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
            if request["do"] == "run":
                for record in records(EXERCISES, functions, request["exercise"], request["helper"]):
                    conn.send_bytes(encode({**record, "nonce": nonce}))
            else:
                record = composed(EXERCISES, functions, request["exercise"], request["index"], request["theirs"])
                conn.send_bytes(encode({**record, "nonce": nonce}))
        conn.send_bytes(encode({"kind": "end", "nonce": nonce, "output": _printed(buffer.getvalue())}))


def _load(source) -> dict:
    kind, what = source
    if kind == "functions":
        return what
    spec = importlib.util.spec_from_file_location("transformer", what)
    assert spec is not None and spec.loader is not None            # a .py path always has both
    module = importlib.util.module_from_spec(spec)
    sys.modules["transformer"] = module
    spec.loader.exec_module(module)
    return vars(module)


class _CapturedTrials(LocalTrials):
    """In-process grading where the platform cannot fork: the learner's exceptions become data, as in
    the child, and what their code prints is kept."""

    def begin(self, what: str) -> None:
        self.output = ""

    def settle(self) -> str:
        return self.output


def _grade_here(name: str, functions: dict) -> Row:
    from .exercises import EXERCISES
    trials = _CapturedTrials(EXERCISES, functions, catch=True)
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
        row, _ = _grade_one(name, trials)
    return Row(row.name, row.status, row.message, _printed(buffer.getvalue()))
