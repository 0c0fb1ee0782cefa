"""The report on an exception the learner's code raised, written in the parent from plain data
(``wire.LearnerError``): at most three lines.

1. the case's input, its shapes and dtypes (``checks.describe``);
2. the learner's line that raised; inside a helper of their own, the call in their code that passed it
   the bad shape, with the shapes it passed;
3. the exception, and what it points to where the data shows it: a helper of an exercise given an array
   with another number of axes than its contract's, a mask that gained axes, an input used transposed.
"""
from __future__ import annotations

import re

import numpy as np

from .checks import Case, Spec, describe
from .wire import Frame, LearnerError

MAX_SHOWN = 300                     # characters of the exception's message in line 3


def _shapes(arguments: dict) -> str:
    return ", ".join(f"{name} {tuple(shape)} {dtype}" for name, (shape, dtype) in arguments.items())


def where(error: LearnerError) -> str:
    """Line 2: the learner's line that raised, or their call into the helper that raised."""
    frames = error.frames
    if not frames:
        return ""
    last = frames[-1]
    if len(frames) == 1:
        return f'File "{last.file}", line {last.line}, in {last.function}: {last.source}'
    caller = frames[-2]
    passed = _shapes(last.arguments) or "no arrays"
    return (f'File "{caller.file}", line {caller.line}, in {caller.function}: {caller.source} passed '
            f"{passed} to {last.function}, which raised at line {last.line}: {last.source}")


def _arrays(spec: Spec, case: Case) -> dict[str, np.ndarray]:
    return {n: a for n, a in zip(spec.arg_names, case.args, strict=False) if isinstance(a, np.ndarray)}


def _contract_ndims(table, function: str, argument: str) -> set[int] | None:
    """The numbers of axes the exercise ``function`` is graded on for ``argument``, or None."""
    ex = table.get(function) if table is not None else None
    spec = getattr(ex, "spec", None)
    if ex is None or spec is None or argument not in spec.arg_names:
        return None
    i = spec.arg_names.index(argument)
    return {c.args[i].ndim for c in ex.cases() if len(c.args) > i and isinstance(c.args[i], np.ndarray)}


def _mask_hint(arrays: dict) -> str:
    mask = arrays.get("mask")
    if mask is None:
        return ""
    return (f"; the mask {mask.shape} broadcasts against the scores (..., Tq, Tk) as it is: an axis added to it "
            f"(mask[:, None]) is added to everything after")


def hint(spec: Spec, case: Case, error: LearnerError, table=None) -> str:
    """What the exception points to, where the data shows it, or ""."""
    arrays = _arrays(spec, case)
    if error.frames:
        last: Frame = error.frames[-1]
        for argument, (shape, _) in last.arguments.items():
            ndims = _contract_ndims(table, last.function, argument)
            if ndims and len(shape) not in ndims:
                want = " or ".join(str(n) for n in sorted(ndims))
                more = _mask_hint(arrays) if len(shape) > max(ndims) else ""
                return f"{last.function} expects {argument} with {want} axes, it got {len(shape)}{more}"
    if "broadcast" in error.message:
        shown = {tuple(int(n) for n in s.split(",") if n.strip())
                 for s in re.findall(r"\(([\d,\s]*)\)", error.message)}
        for name, a in arrays.items():
            if a.ndim >= 2 and a.shape[-1] != a.shape[-2]:
                swapped = a.shape[:-2] + (a.shape[-1], a.shape[-2])
                if swapped in shown and a.shape not in shown:
                    return (f"{name} {a.shape} is used transposed, as {swapped}: {name}[..., i, j] is query i and "
                            f"key j, use it as given")
    return ""


def report(spec: Spec, case: Case, error: LearnerError, table=None) -> str:
    """The three lines (two where the learner's code has no frame of its own)."""
    text = error.message.split("\n")[0].strip() if error.message else ""
    text = text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + " ..."
    said = f"{error.type}: {text}" if text else error.type
    extra = hint(spec, case, error, table)
    lines = [describe(spec, case), where(error), said + (f": {extra}" if extra else "")]
    return "\n".join(line for line in lines if line)
