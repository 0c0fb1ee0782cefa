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
import signal
import sys
import traceback
import warnings
from pathlib import Path

from .report import Report, Row

MAX_WORKBOOK_BYTES = 1 << 20        # a workbook is a page of code; refuse anything far larger before reading it
MAX_MESSAGE_CHARS = 4000            # a learner's exception can carry any text: keep the table readable
MAX_OUTPUT_CHARS = 100_000          # what one exercise printed, kept in Row.output (a print in a loop is endless)
# npformer's and NumPy's folders: the grader's frames, not the learner's
_SKIPPED_DIRS: tuple[str, ...] | None = None


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
    rows = [_capture_and_grade(name, functions) for name in names]
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
    rows: dict[str, Row] = {}
    while len(rows) < len(names):
        rows.update(_one_child(ctx, source, [n for n in names if n not in rows], timeout))
    return tuple(rows[n] for n in names)


def _one_child(ctx, source, names: list[str], timeout: float) -> dict[str, Row]:
    """Rows for ``names``, in order, until the child is lost: at least the first name gets one."""
    ours, theirs = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(theirs, source, names), daemon=True)
    with warnings.catch_warnings():             # Python 3.12+ warns on fork with threads alive (BLAS's)
        warnings.simplefilter("ignore", DeprecationWarning)
        proc.start()
    theirs.close()
    rows: dict[str, Row] = {}
    try:
        what = f"importing {Path(source[1]).name}" if source[0] == "file" else "starting"
        first = _receive(ours, proc, timeout, what)
        if first[0] != "ready":                 # the workbook's top-level code failed: every exercise inherits it
            return {n: Row(n, "error", first[1]) for n in names}
        for name in names:
            status, message, output = _receive(ours, proc, timeout, name)
            rows[name] = Row(name, "error" if status == "lost" else status, message, output)
            if status == "lost":                # a fresh child grades the rest
                return rows
        return rows
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join()
        ours.close()


def _receive(conn, proc, timeout: float, what: str) -> tuple:
    """The child's next message, or ("lost", why, "") when it took longer than ``timeout`` or ended."""
    if not conn.poll(timeout):
        proc.kill()
        return ("lost", f"{what} took longer than the time limit of {timeout:g} s (an endless loop?)", "")
    try:
        return conn.recv()
    except EOFError:                            # the child ended without a word
        proc.join()
        return ("lost", f"the process ended while {_during(what)}: {_ended(proc.exitcode)}", "")


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


# ----------------------------------------------------------------------------------------------- child

def _child(conn, source, names: list[str]) -> None:
    """Load the learner's functions, say "ready", then send (status, message, output) for each name."""
    devnull = os.open(os.devnull, os.O_WRONLY)  # output written below Python (C code, os.write) goes nowhere
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    sys.stdout = sys.stderr = io.StringIO()
    buffer = io.StringIO()
    try:
        with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
            functions = _load(source)
    except BaseException as e:                  # noqa: B036 (the child is disposable; SystemExit is the learner's)
        conn.send(("load-error", _learner_traceback(e, f"importing {Path(source[1]).name} raised", source[1])))
        return
    conn.send(("ready",))
    for name in names:
        row = _capture_and_grade(name, functions)
        conn.send((row.status, row.message, row.output))
    conn.close()


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


def _capture_and_grade(name: str, functions: dict) -> Row:
    """Grade one exercise with its printing captured: pass/fail from the grader, todo for the stub's
    NotImplementedError, error for any other exception (the learner's traceback)."""
    from .exercises import EXERCISES
    fn = functions.get(name)
    if not callable(fn):
        return Row(name, "error", f"there is no function {name}: {EXERCISES[name].signature} is expected")
    buffer = io.StringIO()
    try:
        with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
            verdict = EXERCISES[name].grade(fn)
    except NotImplementedError:
        return Row(name, "todo", "", _printed(buffer))
    except KeyboardInterrupt:
        raise
    except BaseException as e:                  # noqa: B036 (sys.exit in the learner's code is its error)
        entry = getattr(fn, "__code__", None)
        return Row(name, "error", _learner_traceback(e, f"{name} raised", entry), _printed(buffer))
    message = verdict.message if verdict.status == "fail" else ""
    return Row(name, verdict.status, message, _printed(buffer))


def _printed(buffer: io.StringIO) -> str:
    text = buffer.getvalue()
    return text if len(text) <= MAX_OUTPUT_CHARS else text[:MAX_OUTPUT_CHARS] + "\n... (printing cut short)\n"


def _learner_traceback(e: BaseException, intro: str, entry=None) -> str:
    """The exception with the learner's frames only: from the first frame running ``entry`` (the learner's
    function's code, or the workbook's file name) on, less any inside npformer's and NumPy's folders."""
    frames = list(traceback.walk_tb(e.__traceback__))
    start = next((i for i, (frame, _) in enumerate(frames)
                  if frame.f_code is entry or frame.f_code.co_filename == entry), 0)
    summary = traceback.StackSummary.extract(frames[start:])
    kept = [f for f in summary if not _is_grader(f.filename)]
    lines = [f"{intro}:"] if not kept else [f"{intro} (your code's frames):"]
    lines += [line.rstrip("\n") for line in traceback.format_list(kept)]
    lines += [line.rstrip("\n") for line in traceback.format_exception_only(type(e), e)]
    text = "\n".join(lines)
    return text if len(text) <= MAX_MESSAGE_CHARS else text[:MAX_MESSAGE_CHARS] + " ..."


def _is_grader(filename: str) -> bool:
    global _SKIPPED_DIRS
    if _SKIPPED_DIRS is None:
        import numpy
        _SKIPPED_DIRS = tuple(str(Path(m.__file__).resolve().parent) + os.sep  # type: ignore[arg-type]  # both are files
                              for m in (sys.modules["npformer"], numpy))
    try:
        resolved = str(Path(filename).resolve())
    except (OSError, ValueError):
        return False
    return resolved.startswith(_SKIPPED_DIRS)
