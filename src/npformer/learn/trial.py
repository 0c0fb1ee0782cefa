"""Runs the learner's functions on an exercise's cases and writes down what happened, as plain data.

This is the only code that calls the learner's functions. In ``npformer learn check`` it runs in the grading
child, whose records travel to the parent through ``wire.py``; the parent, which never runs the learner's
code, judges them (``checks.judge``). ``LocalTrials`` runs the same code in this process, for
``Exercise.grade`` and for a platform that cannot fork.

``records(functions, exercise, helper)`` runs ``functions[exercise]`` (or, with ``helper``, the function of
that name in the module around it) on every case of that exercise, each on a deep copy of the case's
arguments, and yields one record per case, in order, stopping after the first exception. The record
formats are in ``wire.py``'s docstring.
"""
from __future__ import annotations

import copy
import os
import sys
import traceback
from pathlib import Path
from typing import Iterator

import numpy as np

from .checks import _arrays
from .wire import (
    DTYPES,
    MAX_ARRAY_BYTES,
    MAX_FRAMES,
    MAX_ITEMS,
    MAX_MESSAGE_CHARS,
    MAX_TEXT_CHARS,
    LearnerRaised,
    Missing,
    parse_case,
    parse_error,
    parse_item,
)

# npformer's and NumPy's folders: the grader's frames, not the learner's
_SKIPPED_DIRS: tuple[str, ...] | None = None


def describe(x, depth: int = 0) -> dict:
    """An ITEM: ``x``'s type, and for an array its dtype, shape and data as a plain ndarray."""
    item: dict = {"type": type(x).__name__[:MAX_TEXT_CHARS], "array": isinstance(x, np.ndarray),
                  "exact": type(x) is np.ndarray}
    if item["array"]:
        data = np.array(x, subok=False)                 # the values themselves, whatever the subclass says
        item.update(dtype=data.dtype.name[:MAX_TEXT_CHARS], shape=list(data.shape),
                    data=data if data.dtype.name in DTYPES and data.nbytes <= MAX_ARRAY_BYTES else None)
    if isinstance(x, (tuple, list)):
        item["length"] = len(x)
        if isinstance(x, tuple) and depth == 0:
            item["items"] = [describe(v, 1) for v in x[:MAX_ITEMS]]
    return item


def run_case(fn, case, names) -> dict:
    """Case record: ``fn`` on a copy of ``case.args``; its result, and the arguments' arrays afterwards."""
    given = copy.deepcopy(case.args)
    result = fn(*given)
    inputs = [[[label, describe(a, 1)] for label, a in _arrays(name, arg)]
              for name, arg in zip(names, given, strict=False)]
    return {"kind": "case", "result": describe(result), "inputs": inputs}


def _target(functions: dict, exercise: str, helper: str | None):
    fn = functions.get(exercise)
    if helper is not None:
        fn = (getattr(fn, "__globals__", None) or {}).get(helper)
    return fn


def records(table, functions: dict, exercise: str, helper: str | None = None,
            catch: bool = True) -> Iterator[dict]:
    """One record per case of ``table[helper or exercise]`` (``table``: the exercises by name; see the module's
    docstring); with ``catch`` False the learner's exceptions propagate instead of becoming a "raised" record."""
    ex = table[helper or exercise]
    fn = _target(functions, exercise, helper)
    if not callable(fn):
        yield {"kind": "missing"}
        return
    names = getattr(getattr(ex, "spec", None), "arg_names", ())
    for index, case in enumerate(ex.cases()):
        try:
            record = run_case(fn, case, names)
        except KeyboardInterrupt:
            raise
        except BaseException as e:                  # noqa: B036 (sys.exit in the learner's code is its error)
            if not catch:
                raise
            yield {"kind": "raised", "index": index, "error": error_record(e, getattr(fn, "__code__", None))}
            return
        yield {**record, "index": index}


def composed(table, functions: dict, exercise: str, index: int, theirs: list, catch: bool = True) -> dict:
    """A "built" record: the correct composition of case ``index`` of ``exercise`` on the learner's helpers
    named in ``theirs`` (``exercises.BuiltOn``); a "raised" record when it raises."""
    try:
        built = table[exercise].compose(functions.get(exercise), index, theirs)
        return {"kind": "built", "result": describe(built)}
    except KeyboardInterrupt:
        raise
    except BaseException as e:                      # noqa: B036
        if not catch:
            raise
        return {"kind": "raised", "index": index, "error": error_record(e, None)}


def error_record(e: BaseException, entry=None) -> dict:
    """An ERROR: the exception's type and message, and the learner's frames from the first one running
    ``entry`` (the learner's function's code, or the workbook's file name) on, less any inside npformer's
    and NumPy's folders, each with its line and its array arguments."""
    tb = list(traceback.walk_tb(e.__traceback__))
    start = next((i for i, (frame, _) in enumerate(tb)
                  if frame.f_code is entry or frame.f_code.co_filename == entry), 0)
    kept = [(frame, line) for frame, line in tb[start:] if not _is_grader(frame.f_code.co_filename)]
    omitted = max(0, len(kept) - MAX_FRAMES)
    if omitted:
        kept = kept[:MAX_FRAMES // 2] + kept[-MAX_FRAMES // 2:]
    frames = []
    for frame, line in kept:
        summary = traceback.FrameSummary(frame.f_code.co_filename, line, frame.f_code.co_name)
        frames.append({"file": frame.f_code.co_filename, "line": int(line or 0), "function": frame.f_code.co_name,
                       "source": (summary.line or "")[:1000], "arguments": _array_arguments(frame)})
    kind = type(e)
    name = kind.__qualname__
    if kind.__module__ not in ("__main__", "builtins"):
        name = f"{kind.__module__}.{name}"
    try:
        message = str(e)
    except Exception:                               # a learner's __str__ may raise too
        message = "<the exception's message could not be shown>"
    return {"type": name[:MAX_TEXT_CHARS], "todo": isinstance(e, NotImplementedError),
            "message": message[:MAX_MESSAGE_CHARS], "frames": frames, "omitted": omitted}


def _array_arguments(frame) -> dict:
    code = frame.f_code
    names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
    found = {}
    for name in names:
        value = frame.f_locals.get(name)
        if isinstance(value, np.ndarray):
            try:
                found[name] = [[int(n) for n in np.shape(np.array(value, subok=False))], str(value.dtype)[:40]]
            except Exception:                       # a subclass that cannot be read: leave it out
                continue
    return found


def _is_grader(filename: str) -> bool:
    global _SKIPPED_DIRS
    if _SKIPPED_DIRS is None:
        _SKIPPED_DIRS = tuple(str(Path(m.__file__).resolve().parent) + os.sep  # type: ignore[arg-type]  # both are files
                              for m in (sys.modules["npformer"], np))
    try:
        resolved = str(Path(filename).resolve())
    except (OSError, ValueError):
        return False
    return resolved.startswith(_SKIPPED_DIRS)


class LocalTrials:
    """The learner's functions run in this process on the cases of ``table`` (the exercises by name), their
    records read as the parent reads the child's. With ``catch`` False (``Exercise.grade``) the learner's
    exceptions propagate unchanged."""

    def __init__(self, table, functions: dict, catch: bool = True):
        self.table, self.functions, self.catch = table, functions, catch

    def run(self, exercise: str, helper: str | None = None):
        for record in records(self.table, self.functions, exercise, helper, self.catch):
            yield read_case(record)

    def compose(self, exercise: str, index: int, theirs: list):
        return read_built(composed(self.table, self.functions, exercise, index, theirs, self.catch))


def read_case(record: dict):
    """The parent's reading of a run's record: an ``Outcome``, or ``Missing`` / ``LearnerRaised`` raised."""
    if record.get("kind") == "missing":
        raise Missing()
    if record.get("kind") == "raised":
        index = record.get("index")
        raise LearnerRaised(parse_error(record.get("error")), index if type(index) is int else None)
    return parse_case(record)


def read_built(record: dict):
    if record.get("kind") == "raised":
        raise LearnerRaised(parse_error(record.get("error")))
    return parse_item(record.get("result"))
