"""The notebook ``npformer learn init DIR --notebook`` writes: ``DIR/lesson.ipynb``, the workbook's
exercises as Jupyter cells.

It opens with an introduction and a cell importing NumPy and ``check``; then, for each exercise in the
lesson's order, a Markdown cell (its name, its lesson section by the lesson's own title, its contract
and hint), a code cell with the stub, and a cell ``check("NAME", NAME)`` that grades it. The file is
nbformat v4.5 JSON, written with the standard library (nbformat is needed only by the tests that read
it back). Cell ids are fixed, derived from the exercise's name, so the same npformer writes the same
bytes.
"""
from __future__ import annotations

import json

NOTEBOOK = "lesson.ipynb"

INTRO = """\
# Your transformer, one function at a time

These are the exercises of npformer's lesson, in the lesson's order. Each one is a function:
replace its `raise NotImplementedError` with your code, in plain NumPy, run the cell, then run the
`check(...)` cell below it. The check grades your function on several inputs, in float64 and float32,
and marks it pass, fail, error or todo (still the stub). A failure comes with the input that exposed
it, what came out against what was expected, and the likely mistake, with the section of
`npformer lesson` to read again.

Later exercises may call earlier ones (`multi_head_attention` can use your `split_heads`, `attention`
and `merge_heads`), so run the cells from the top. Each check runs your function in a separate
process with a time limit of 10 s, so an endless loop or a crash does not end this notebook."""

IMPORTS = "import numpy as np\n\nfrom npformer.learn import check\n"


def _lines(text: str) -> list[str]:
    """A cell's source as Jupyter writes it: a list of lines, each but the last ending in a newline."""
    return text.splitlines(keepends=True)


def _markdown(cell_id: str, text: str) -> dict:
    return {"cell_type": "markdown", "id": cell_id, "metadata": {}, "source": _lines(text)}


def _code(cell_id: str, source: str) -> dict:
    return {"cell_type": "code", "execution_count": None, "id": cell_id, "metadata": {}, "outputs": [],
            "source": _lines(source.strip("\n"))}


def exercise_markdown(number: int, ex) -> str:
    """The Markdown cell before an exercise's stub: its name and signature, its lesson section, its
    contract and its hint."""
    from .exercises import section_title
    contract = "\n".join("    " + line if line else "" for line in ex.contract.strip("\n").split("\n"))
    where = f"section {ex.section}: *{section_title(ex.section)}*"
    where = f"Beyond the lesson; the closest is lesson {where}" if ex.spec.beyond else f"Lesson {where}"
    return f"## {number}. `{ex.name}`\n\n{where}\n\n`{ex.signature}`\n\n{contract}\n\n**Hint:** {ex.hint}"


def notebook_json() -> dict:
    """The notebook as nbformat v4.5 JSON: introduction, imports, then per exercise its description,
    its stub and its check."""
    from .exercises import EXERCISES
    cells = [_markdown("introduction", INTRO), _code("imports", IMPORTS)]
    for number, ex in enumerate(EXERCISES.values(), 1):
        cells += [_markdown(f"about-{ex.name}", exercise_markdown(number, ex)),
                  _code(f"exercise-{ex.name}", ex.stub),
                  _code(f"check-{ex.name}", f'check("{ex.name}", {ex.name})')]
    return {
        "cells": cells,
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def notebook_source() -> str:
    """The text of ``lesson.ipynb``, indented as Jupyter writes it, ending in a newline."""
    return json.dumps(notebook_json(), indent=1, ensure_ascii=False) + "\n"
