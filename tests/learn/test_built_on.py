"""An exercise built on earlier ones fails because of them: multi_head_attention on the learner's own attention,
encoder_block on their layer_norm. The diagnosis then names the failing helper, only when the learner's output
is the correct composition of their own helpers; otherwise the generic line stays."""
from __future__ import annotations

import functools

import numpy as np

from npformer.learn.exercises import EXERCISES
from npformer.learn.runner import grade_file
from npformer.lesson import SECTIONS

UNSCALED = EXERCISES["attention"].solution.replace(") * scale", ")")
EPS_OUTSIDE = EXERCISES["layer_norm"].solution.replace("np.sqrt(var + x.dtype.type(eps))", "(np.sqrt(var) + eps)")
NO_RELU = EXERCISES["feed_forward"].solution.replace("np.maximum(x @ params[\"w_1\"] + params[\"b_1\"], 0)",
                                                     "x @ params[\"w_1\"] + params[\"b_1\"]")
GENERIC = ("The values are wrong: check each step against the contract in the docstring "
           f"(lesson section 3: {SECTIONS[3]})")


def workbook(*replacements: str) -> dict:
    """The reference solutions run in one namespace, as a workbook's module, then the given replacements."""
    assert all(r not in [ex.solution for ex in EXERCISES.values()] for r in replacements)   # each one is wrong
    namespace = {"np": np}
    for source in [ex.solution for ex in EXERCISES.values()] + list(replacements):
        exec(source, namespace)
    return namespace


def diagnosis(name: str, namespace: dict) -> str:
    verdict = EXERCISES[name].grade(namespace[name])
    assert verdict.status == "fail" and len(verdict.message.splitlines()) == 3, verdict
    return verdict.message.splitlines()[2]


def test_the_helpers_really_fail_their_own_checks():
    ns = workbook(UNSCALED, EPS_OUTSIDE, NO_RELU)
    assert [EXERCISES[n].grade(ns[n]).status for n in ("attention", "layer_norm", "feed_forward")] == ["fail"] * 3
    assert EXERCISES["multi_head_attention"].grade(workbook()["multi_head_attention"]).status == "pass"


def test_multi_head_attention_on_a_failing_attention_says_so():
    assert diagnosis("multi_head_attention", workbook(UNSCALED)) == (
        "This matches a correct multi-head attention built on your attention, which fails its own check: "
        f"fix attention first (lesson section 1: {SECTIONS[1]})")


def test_encoder_block_names_its_failing_helpers():
    assert diagnosis("encoder_block", workbook(EPS_OUTSIDE)) == (
        "This matches a correct encoder block built on your layer_norm, which fails its own check: "
        f"fix layer_norm first (lesson section 3: {SECTIONS[3]})")
    assert diagnosis("encoder_block", workbook(EPS_OUTSIDE, NO_RELU)) == (
        "This matches a correct encoder block built on your layer_norm and feed_forward, which fail their own "
        f"checks: fix layer_norm and feed_forward first (lesson section 3: {SECTIONS[3]})")
    assert diagnosis("encoder_block", workbook(UNSCALED)) == (     # one level down: its multi-head attention
        "This matches a correct encoder block built on your multi_head_attention, which fails its own check: "
        f"fix multi_head_attention first (lesson section 3: {SECTIONS[3]})")


def test_no_claim_unless_the_numbers_show_it():
    # wrong on its own as well (the output projection left out): the helper does not explain it
    no_projection = EXERCISES["multi_head_attention"].solution.replace(' @ params["w_o"] + params["b_o"]', "")
    assert diagnosis("multi_head_attention", workbook(UNSCALED, no_projection)) == GENERIC
    # a correct multi-head attention that does not call the failing attention passes
    inline = """\
def multi_head_attention(x, params, n_heads, mask=None):
    b, t, e = x.shape
    q, k, v = ((x @ params["w_" + n] + params["b_" + n]).reshape(b, t, n_heads, -1).transpose(0, 2, 1, 3)
               for n in "qkv")
    s = q @ np.swapaxes(k, -1, -2) / x.dtype.type(np.sqrt(e // n_heads))
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    w = np.exp(s - s.max(axis=-1, keepdims=True))
    w = w / w.sum(axis=-1, keepdims=True)
    return (w @ v).transpose(0, 2, 1, 3).reshape(b, t, e) @ params["w_o"] + params["b_o"]
"""
    assert EXERCISES["multi_head_attention"].grade(workbook(UNSCALED, inline)["multi_head_attention"]).status == "pass"
    # a function with no module around it, and a failing helper that raises: nothing to name
    ns = workbook(UNSCALED)
    wrapped = functools.partial(ns["multi_head_attention"])        # no helper to blame: the mistake is named
    assert diagnosis("multi_head_attention", {"multi_head_attention": wrapped}) == (
        f"The scores are not scaled: divide each head's q k^T by sqrt(E/H) (lesson section 2: {SECTIONS[2]})")
    # a failing helper that raises on the block's inputs: the claim is dropped, the grading goes on
    raising = UNSCALED.replace("    scale =", "    if q.ndim == 4:\n        raise ValueError('no heads')\n    scale =")
    ns = workbook(raising, inline.replace("np.sqrt(e // n_heads)", "e"))       # each head scaled by 1/E
    assert EXERCISES["attention"].grade(ns["attention"]).status == "fail"
    assert diagnosis("multi_head_attention", ns) == GENERIC
    assert diagnosis("multi_head_attention", ns) == GENERIC


def test_a_workbook_file_gets_the_diagnosis_from_the_grading_child(tmp_path):
    path = tmp_path / "transformer.py"
    path.write_text("import numpy as np\n\n\n" + "\n\n".join(ex.solution for ex in EXERCISES.values())
                    + "\n\n" + UNSCALED)
    report = grade_file(path, ["attention", "multi_head_attention"], timeout=10)
    assert [r.status for r in report.rows] == ["fail", "fail"]
    assert report.rows[1].message.splitlines()[2].startswith(
        "This matches a correct multi-head attention built on your attention, which fails its own check")
