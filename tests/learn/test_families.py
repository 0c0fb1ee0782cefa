"""The known mistakes by family (``npformer.learn.families``): each has a family, the committed table is the
grader's, a learner's code making each one gets that mistake's own diagnosis, and for every graded dtype some
case tells each mistake's numbers from the right ones by far more than the tolerance."""
from __future__ import annotations

import warnings
from pathlib import Path

import family_mistakes
import numpy as np
import pytest
import shape_mistakes
import wrong_solutions

from npformer.learn.checks import TOLERANCES, as64
from npformer.learn.exercises import EXERCISES
from npformer.learn.families import FAMILIES, markdown, table

PAGE = Path(__file__).parents[2] / "docs" / "learn-mistakes.md"
LEARNERS = wrong_solutions.LISTED + wrong_solutions.MORE + family_mistakes.FAMILIES + shape_mistakes.SHAPES


def _grade(name, fn):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return EXERCISES[name].grade(fn)


def test_every_mistake_has_a_family_and_the_page_is_the_grader_table():
    assert {family for family, _, _ in table()} <= set(FAMILIES)
    assert all(m.family in FAMILIES for ex in EXERCISES.values() for m in ex.spec.mistakes)
    assert PAGE.read_text() == markdown(), "regenerate docs/learn-mistakes.md from families.markdown()"


@pytest.mark.parametrize("name, fn, words", family_mistakes.FAMILIES,
                         ids=lambda p: p.__name__ if callable(p) else None)
def test_a_learners_code_with_each_family_mistake_gets_its_diagnosis(name, fn, words):
    verdict = _grade(name, fn)
    assert verdict.status == "fail" and len(verdict.message.split("\n")) == 3, verdict.message
    assert "The values are wrong" not in verdict.message
    for word in words:
        assert word in verdict.message, verdict.message


def test_every_mistake_in_the_table_is_named_for_some_learners_code():
    """Each row of the table is the diagnosis some learner-written wrong solution gets (the raised ones
    aside: a transposed non-square mask raises before any value is compared, see test_errors.py)."""
    said = set()
    for name, fn, _ in LEARNERS:
        try:
            said.add((name, _grade(name, fn).message.split("\n")[-1].rsplit(" (", 1)[0]))
        except Exception:
            continue
    missing = [(name, text) for _, name, text in table() if (name, text) not in said
               and not text.startswith("The mask is transposed: mask[..., i, j]")]
    assert not missing


def _learner_of(ex, mistake):
    """A function whose outputs are the mistake's numbers on each case, in the case's dtype."""
    def fn(*args):
        case = next(c for c in ex.cases() if _same_args(c.args, args))
        wrong = mistake.wrong(*as64(case.args))
        dtype = case.dtype if case.dtype is not None else np.dtype(np.float64)
        outs = [wrong[n] if wrong[n].dtype == bool else wrong[n].astype(dtype) for n in ex.spec.outputs]
        return outs[0] if len(outs) == 1 else tuple(outs)
    return fn


def _same_args(a, b):
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same_args(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same_args(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b)
    return a == b


@pytest.mark.parametrize("name", list(EXERCISES))
def test_each_mistakes_own_numbers_get_its_own_diagnosis(name):
    ex = EXERCISES[name]
    for mistake in ex.spec.mistakes:
        if mistake.wrong is None or mistake.text.startswith("The mask is transposed: mask[..., i, j]"):
            continue
        verdict = _grade(name, _learner_of(ex, mistake))
        assert verdict.message.split("\n")[-1].startswith(mistake.text), (mistake.text, verdict.message)


def _separation(got: np.ndarray, want: np.ndarray, dtype) -> float:
    """How many times the tolerance the furthest entry is off (inf where the mistake is not finite)."""
    if want.dtype == bool:
        return np.inf if not np.array_equal(got, want) else 0.0
    if np.isnan(got).all():                                # the mistake cannot give this case's shapes
        return 0.0
    rtol, atol = TOLERANCES[np.dtype(dtype)]
    if (~np.isfinite(got) & np.isfinite(want)).any():
        return np.inf
    return float(np.max(np.abs(got - want) / (atol + rtol * np.abs(want))))


@pytest.mark.parametrize("name", list(EXERCISES))
def test_some_case_separates_every_mistake_by_100_tolerances_in_every_dtype(name):
    ex = EXERCISES[name]
    for dtype in ex.spec.dtypes:
        cases = [c for c in ex.cases() if c.dtype == (np.dtype(dtype) if dtype is not None else None)]
        tol_dtype = np.dtype(dtype) if dtype is not None and np.dtype(dtype) != bool else np.dtype(np.float32)
        for mistake in ex.spec.mistakes:
            if mistake.wrong is None:
                continue
            best = 0.0
            for case in cases:
                with np.errstate(all="ignore"):
                    wrong = mistake.wrong(*as64(case.args))
                best = max(best, *(_separation(wrong[n], case.expected[n], tol_dtype) for n in wrong))
            assert best >= 100, (dtype, mistake.text, best)
