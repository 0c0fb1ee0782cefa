"""Errors that say which input and which line: a learner's exception, and a result of the wrong shape, are
reported in at most three lines (the input; the learner's line, or their call that passed a helper the bad
shape with the shapes it passed; what it points to), graded as `npformer learn check` grades, in a child."""
from __future__ import annotations

import shape_mistakes

from npformer.learn.runner import grade_functions
from npformer.lesson import SECTIONS


def test_each_shape_mistake_is_reported_in_three_lines_naming_its_cause():
    for name, fn, words in shape_mistakes.SHAPES:
        row = grade_functions({name: fn}, timeout=30).rows[0]
        lines = row.message.split("\n")
        assert row.status in ("fail", "error") and len(lines) == 3, row.message
        assert lines[0].startswith("input: ") and " in float64" in lines[0], row.message
        for word in words:
            assert word in row.message, (word, row.message)


def test_an_exception_in_a_helper_names_the_call_that_passed_the_bad_shape():
    row = grade_functions({"multi_head_attention": shape_mistakes.multi_head_attention}, timeout=30).rows[0]
    first, second, third = row.message.split("\n")
    assert row.status == "error"
    assert first == "input: x (1, 3, 4), params, n_heads=1, mask (1, 1, 1, 3) in float64; mask (1, 1, 1, 3)"
    assert second.startswith(f'File "{shape_mistakes.__file__}", line ') and ", in multi_head_attention: " in second
    assert second.endswith("which raised at line 47: b, h, t, d = x.shape")
    assert third.startswith("ValueError: too many values to unpack (expected 4): merge_heads expects x with 4 axes")


def test_a_shape_only_failure_points_at_its_cause():
    row = grade_functions({"attention": shape_mistakes.attention_returns_w_out}, timeout=30).rows[0]
    assert row.message.split("\n")[1:] == [
        "out has shape (4, 3, 4), expected (4, 3, 5)",
        f"The outputs are in the wrong order: return (out, weights), in that order (lesson section 1: {SECTIONS[1]})"]
