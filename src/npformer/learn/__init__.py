"""Learn by doing: the lesson's exercises, a workbook to write them in, and a grader that explains mistakes.

``npformer learn init DIR`` writes the workbook, ``npformer learn check DIR`` grades it, ``npformer learn
quiz`` asks the lesson's knowledge check. In Python or Jupyter, ``check(name, fn)`` grades one function
object:

    >>> from npformer.learn import check
    >>> check("softmax", my_softmax)            # doctest: +SKIP

The report prints as a table and renders as HTML in a notebook. The exercises and their grading live in
``exercises.py``, the child process that runs the learner's code in ``runner.py``.
"""
from __future__ import annotations

from .report import Report, Row

__all__ = ["Report", "Row", "check"]


def check(name: str, fn, *, timeout: float = 10.0) -> Report:
    """Grade ``fn`` as the exercise ``name`` (e.g. "attention") and return the report.

    It runs in a forked child with a time limit of ``timeout`` seconds, where the platform can fork;
    elsewhere in this process with the same checks, and the report says so. The child sends back plain
    data and this process judges it; since this process is the caller's (a notebook's kernel), code
    there that changes NumPy or npformer changes the grader too: docs/learn.md says what holds where.
    """
    from .runner import exercise_names, grade_functions
    if not isinstance(name, str):
        raise TypeError(f"name must be an exercise's name (a str), got {type(name).__name__}")
    exercise_names([name])                      # an unknown name: one error listing the exercises
    if not callable(fn):
        raise TypeError(f"fn must be a function, got {type(fn).__name__}")
    return grade_functions({name: fn}, timeout=timeout)
