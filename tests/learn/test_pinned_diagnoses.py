"""Every diagnosis the grader gives the wrong solutions of ``wrong_solutions.py``, pinned word for word
(line 1, the input, and line 3, the diagnosis; line 2's numbers depend on the BLAS kernel). A change
of words is a deliberate edit of ``pinned_diagnoses.json``, visible in review. Regenerate with
``python tests/learn/test_pinned_diagnoses.py`` from the repository root (PYTHONPATH=src)."""
import json
import sys
from pathlib import Path

import family_mistakes
import shape_mistakes
import wrong_solutions

from npformer.learn.runner import grade_functions

PINNED = Path(__file__).with_name("pinned_diagnoses.json")


def _diagnoses() -> dict:
    found = {}
    for name, fn, *_ in (wrong_solutions.LISTED + wrong_solutions.MORE + wrong_solutions.OTHER
                         + family_mistakes.FAMILIES + shape_mistakes.SHAPES):
        report = grade_functions({name: fn}, timeout=30)                # as `npformer learn check` grades
        row = report.rows[0]
        lines = row.message.split("\n")
        found[f"{name}: {fn.__name__}"] = [row.status, lines[0], lines[-1]]
    return found


def test_the_diagnoses_are_the_pinned_ones():
    pinned = json.loads(PINNED.read_text())
    found = _diagnoses()
    assert found.keys() == pinned.keys()
    for key, value in found.items():
        assert value == pinned[key], key


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    PINNED.write_text(json.dumps(_diagnoses(), indent=1) + "\n")
