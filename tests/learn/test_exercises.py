"""The twelve exercises and their grader: correct solutions in every style pass, npformer's own functions
pass, the stubs raise NotImplementedError, every listed mistake fails with a diagnosis that names it,
and a function that changes its inputs or returns the wrong type is told so plainly."""
import math
import warnings

import numpy as np
import pytest
import right_solutions
import wrong_solutions
from hypothesis import given, settings
from hypothesis import strategies as st

from npformer.learn.checks import TOLERANCES
from npformer.learn.exercises import EXERCISES, Exercise, Verdict, section_title
from npformer.lesson import SECTIONS
from npformer.nn import FeedForward, MultiHeadAttention, merge_heads, split_heads
from npformer.nn.layers import EncoderLayer
from npformer.ops import (
    attention_backward,
    attention_forward,
    causal_mask,
    layernorm_forward,
    sinusoidal_positions,
    softmax_backward,
    softmax_forward,
)

NAMES = ["softmax", "attention", "split_heads", "merge_heads", "layer_norm", "positional_encoding", "causal_mask",
         "multi_head_attention", "feed_forward", "encoder_block", "softmax_backward", "attention_backward"]
SIGNATURES = {
    "softmax": "softmax(x)",
    "attention": "attention(q, k, v, mask=None)",
    "split_heads": "split_heads(x, n_heads)",
    "merge_heads": "merge_heads(x)",
    "layer_norm": "layer_norm(x, gamma, beta, eps=1e-5)",
    "positional_encoding": "positional_encoding(T, d)",
    "causal_mask": "causal_mask(T)",
    "multi_head_attention": "multi_head_attention(x, params, n_heads, mask=None)",
    "feed_forward": "feed_forward(x, params)",
    "encoder_block": "encoder_block(x, params, n_heads, mask=None)",
    "softmax_backward": "softmax_backward(dy, y)",
    "attention_backward": "attention_backward(dout, q, k, v, weights)",
}


def _namespace(source_of) -> dict:
    """Every exercise's source (stub or solution) executed in one namespace, as in the workbook."""
    ns = {"np": np}
    for ex in EXERCISES.values():
        exec(compile(source_of(ex), f"<{ex.name}>", "exec"), ns)
    return ns


def _grade_quietly(ex: Exercise, fn) -> Verdict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)                # overflow and 0 / 0 in wrong solutions
        return ex.grade(fn)


def _check_message(verdict: Verdict) -> None:
    lines = verdict.message.split("\n")
    assert verdict.status == "fail" and 1 <= len(lines) <= 3, verdict.message
    assert lines[0].startswith("input: "), verdict.message
    n = int(lines[-1].rsplit("lesson section ", 1)[1].split(":")[0])
    assert lines[-1].endswith(f"lesson section {n}: {SECTIONS[n]})"), verdict.message


def test_the_twelve_exercises_in_the_lessons_order():
    assert list(EXERCISES) == NAMES
    for name, ex in EXERCISES.items():
        assert ex.name == name and ex.signature == SIGNATURES[name]
        assert ex.section in SECTIONS and section_title(ex.section) == SECTIONS[ex.section]
        assert ex.hint and "\n" not in ex.hint
        assert ex.stub.startswith(f"def {ex.signature}:") and ex.hint in ex.stub
        assert ex.contract.split("\n")[0] in ex.stub
        assert ex.solution.startswith(f"def {ex.signature}:")
    with pytest.raises(ValueError, match="section must be one of"):
        section_title(5)


def test_the_stubs_raise_not_implemented_error():
    stubs = _namespace(lambda ex: ex.stub)
    for name, ex in EXERCISES.items():
        with pytest.raises(NotImplementedError, match=name):
            ex.grade(stubs[name])


def test_the_reference_solutions_pass():
    solutions = _namespace(lambda ex: ex.solution)
    for name, ex in EXERCISES.items():
        assert ex.grade(solutions[name]) == Verdict("pass", ""), name


@pytest.mark.parametrize("style", sorted(right_solutions.STYLES))
def test_correct_solutions_in_three_styles_pass(style):
    for name, ex in EXERCISES.items():
        verdict = ex.grade(right_solutions.STYLES[style][name])
        assert verdict == Verdict("pass", ""), f"{style} {name}: {verdict.message}"


# -- npformer's own functions, wrapped to the exercises' signatures ------------------------------------------

def _mha_module(params, n_heads):
    e = params["w_q"].shape[0]
    m = MultiHeadAttention(e, n_heads, dtype=params["w_q"].dtype)
    m.load_state_dict({"in_proj_weight": np.concatenate([params["w_q"].T, params["w_k"].T, params["w_v"].T]),
                       "in_proj_bias": np.concatenate([params["b_q"], params["b_k"], params["b_v"]]),
                       "out_proj.weight": params["w_o"].T, "out_proj.bias": params["b_o"]})
    return m


def _ffn_state(p, prefix=""):
    return {f"{prefix}linear1.weight": p["w_1"].T, f"{prefix}linear1.bias": p["b_1"],
            f"{prefix}linear2.weight": p["w_2"].T, f"{prefix}linear2.bias": p["b_2"]}


def _npformer_ffn(x, params):
    m = FeedForward(params["w_1"].shape[0], params["w_1"].shape[1], dtype=x.dtype)
    m.load_state_dict(_ffn_state(params))
    return m.forward(x)[0]


def _npformer_block(x, params, n_heads, mask=None):
    e, f = params["ffn"]["w_1"].shape
    layer = EncoderLayer(e, n_heads, f, dropout=0.0, dtype=x.dtype)
    state = {f"self_attn.{k}": v for k, v in _mha_module(params["attn"], n_heads).state_dict().items()}
    state.update(_ffn_state(params["ffn"], "ffn."))
    for i in (1, 2):
        state.update({f"norm{i}.weight": params[f"ln_{i}"]["gamma"], f"norm{i}.bias": params[f"ln_{i}"]["beta"]})
    layer.load_state_dict(state)
    return layer.forward(x, mask=mask)[0]


NPFORMER = {
    "softmax": lambda x: softmax_forward(x)[0],
    "attention": lambda q, k, v, mask=None: attention_forward(q, k, v, mask=mask)[:2],
    "split_heads": split_heads,
    "merge_heads": merge_heads,
    "layer_norm": lambda x, gamma, beta, eps=1e-5: layernorm_forward(x, gamma, beta, eps)[0],
    "positional_encoding": sinusoidal_positions,
    "causal_mask": lambda t: causal_mask(t, t),
    "multi_head_attention": lambda x, params, n_heads, mask=None: _mha_module(params, n_heads).forward(x, mask=mask)[0],
    "feed_forward": _npformer_ffn,
    "encoder_block": _npformer_block,
    "softmax_backward": softmax_backward,
    "attention_backward": lambda dout, q, k, v, w: attention_backward(dout, (q, k, v, w, None,
                                                                             1 / math.sqrt(q.shape[-1]))),
}


def test_npformers_own_functions_pass():
    """This tests the wiring: the cases' expected values come from these same ops, so it shows that each
    exercise's cases, signatures and tolerances fit npformer's functions, not that the expected values are
    right. The independent check is the hand-written solutions (test_correct_solutions_in_three_styles_pass,
    right_solutions.py), written without npformer."""
    for name, ex in EXERCISES.items():
        verdict = ex.grade(NPFORMER[name])
        assert verdict == Verdict("pass", ""), f"{name}: {verdict.message}"


# -- mistakes ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, fn, words", wrong_solutions.LISTED + wrong_solutions.MORE,
                         ids=lambda p: p.__name__ if callable(p) else None)
def test_each_known_mistake_fails_with_its_diagnosis(name, fn, words):
    verdict = _grade_quietly(EXERCISES[name], fn)
    _check_message(verdict)
    for word in words:
        assert word in verdict.message, verdict.message


@pytest.mark.parametrize("name, fn", wrong_solutions.OTHER, ids=lambda p: p.__name__ if callable(p) else None)
def test_an_unknown_mistake_still_fails_with_the_generic_lines(name, fn):
    verdict = _grade_quietly(EXERCISES[name], fn)
    _check_message(verdict)
    assert "The values are wrong" in verdict.message and " but expected " in verdict.message


def test_a_diagnosis_shows_the_numbers_that_expose_it():
    """Line 2 holds the learner's value and the expected one where they differ most; the backward ones add
    the central finite difference, which agrees with npformer's backward."""
    lines = _grade_quietly(EXERCISES["attention_backward"], wrong_solutions.attention_backward_dk_skips_softmax).message
    second = lines.split("\n")[1]
    got, rest = second.split(" is ", 1)[1].split(" but expected ")
    expected, fd = rest.split(" (central finite differences give ")
    fd = fd.split(")")[0]
    assert second.startswith("dk[") and abs(float(got) - float(expected)) > 1e-3
    assert abs(float(fd) - float(expected)) < 1e-5 * max(1.0, abs(float(expected)))


def test_a_mistake_only_in_float32_is_caught():
    """A float64 scalar such as np.sqrt(d) turns float32 into float64: told plainly, with the fix."""
    def attention(q, k, v, mask=None):
        return right_solutions.einsum_attention(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), mask)
    verdict = EXERCISES["attention"].grade(attention)
    _check_message(verdict)
    assert "in float32" in verdict.message and "out is float64, expected float32" in verdict.message
    assert "math.sqrt" in verdict.message


# -- inputs changed in place, wrong types, exceptions --------------------------------------------------------

def _softmax_in_place(x):
    x -= x.max(axis=-1, keepdims=True)
    np.exp(x, out=x)
    x /= x.sum(axis=-1, keepdims=True)
    return x


def _mha_folds_the_scale_into_w_q(x, params, n_heads, mask=None):
    params["w_q"] *= 1 / math.sqrt(x.shape[-1] // n_heads)            # the learner's scores, the caller's weights
    q, k, v = (right_solutions.einsum_split_heads(x @ params["w_" + n] + params["b_" + n], n_heads) for n in "qkv")
    out, _ = right_solutions.einsum_attention(q, k, v * 1, mask)
    return right_solutions.einsum_merge_heads(out) @ params["w_o"] + params["b_o"]


def _encoder_block_pops_ln_1(x, params, n_heads, mask=None):
    ln_1 = params.pop("ln_1")
    params["ln_1"] = {"gamma": ln_1["gamma"].copy(), "beta": ln_1["beta"]}   # put back, but not the same dict
    del params["ffn"]["b_2"]                                                 # and one entry gone for good
    return right_solutions.einsum_encoder_block(x, {**params, "ffn": {**params["ffn"], "b_2": 0}}, n_heads, mask)


@pytest.mark.parametrize("name, fn, label", [
    ("softmax", _softmax_in_place, "x"),
    ("multi_head_attention", _mha_folds_the_scale_into_w_q, "params['w_q']"),
])
def test_a_function_that_writes_into_its_input_fails_naming_it(name, fn, label):
    verdict = EXERCISES[name].grade(fn)
    _check_message(verdict)
    assert f"It writes into its input {label} " in verdict.message
    assert f"{label}[" in verdict.message.split("\n")[1] and "before the call" in verdict.message


def test_a_function_that_removes_an_entry_of_its_params_fails_naming_it():
    verdict = EXERCISES["encoder_block"].grade(_encoder_block_pops_ln_1)
    _check_message(verdict)
    assert "It writes into its input params['ffn']['b_2'] " in verdict.message
    assert "params['ffn']['b_2'] was added, removed, or changed shape or dtype" in verdict.message


@pytest.mark.parametrize("name, fn, words", [
    ("softmax", lambda x: right_solutions.einsum_softmax(x).tolist(), "y is a list, expected a NumPy array of shape"),
    ("attention", lambda q, k, v, mask=None: right_solutions.einsum_attention(q, k, v, mask)[0],
     "It returned a float64 array of shape (4, 3, 5), expected a tuple (out, weights)"),
    ("attention", lambda q, k, v, mask=None: (*right_solutions.einsum_attention(q, k, v, mask), None),
     "It returned a tuple of 3 items, expected 2: (out, weights)"),
    ("attention", lambda q, k, v, mask=None: list(right_solutions.einsum_attention(q, k, v, mask)),
     "It returned a list, expected a tuple (out, weights)"),
    ("split_heads", lambda x, h: x.reshape(x.shape[0], x.shape[1], h, -1), "heads has shape (2, 3, 2, 4), expected"),
    ("causal_mask", lambda t: np.tril(np.ones((t, t))), "mask is float64, expected bool"),
    ("positional_encoding", lambda t, d: right_solutions.einsum_positional_encoding(t, d).astype(np.float16),
     "pe is float16, expected float32 or float64"),
])
def test_a_wrong_return_type_is_told_plainly(name, fn, words):
    verdict = EXERCISES[name].grade(fn)
    _check_message(verdict)
    assert words in verdict.message, verdict.message


def test_the_learners_exceptions_propagate_unchanged():
    class Mine(Exception):
        pass

    def attention(q, k, v, mask=None):
        raise Mine("from the learner")

    with pytest.raises(Mine, match="from the learner"):
        EXERCISES["attention"].grade(attention)
    with pytest.raises(TypeError, match="fn must be a function"):
        EXERCISES["softmax"].grade("softmax")


# -- the grader's own inputs ----------------------------------------------------------------------------------

def test_the_cases_cover_size_one_axes_and_both_dtypes():
    """Several shapes per exercise, batch or head axes of size 1 and T = 1 where the exercise has them,
    float32 and float64 for every exercise that takes arrays."""
    for name, ex in EXERCISES.items():
        for dtype in ex.spec.dtypes:
            cases = ex.spec.cases(np.dtype(dtype) if dtype is not None else None)
            assert len(cases) >= 3, name
            first = [c.args[0] for c in cases]
            if isinstance(first[0], np.ndarray):
                assert {a.dtype for a in first} == {np.dtype(dtype)}, name
                assert any(1 in a.shape[:-1] for a in first), name
            else:
                assert 1 in first, name                                 # T = 1


def test_the_backward_references_agree_with_finite_differences():
    for name in ("softmax_backward", "attention_backward"):
        spec = EXERCISES[name].spec
        for case in spec.cases(np.dtype(np.float64)):
            for output in spec.outputs:
                want = case.expected[output]
                for index in list(np.ndindex(*want.shape))[::3]:
                    assert abs(spec.fd(case, output, index) - want[index]) < 1e-6 * max(1.0, abs(want[index]))


def _scaled_softmax(factor64, factor32):
    """A correct softmax whose result is off by a relative ``factor`` - 1, by dtype."""
    def softmax(x):
        y = right_solutions.einsum_softmax(x)
        return y * y.dtype.type(factor64 if y.dtype == np.float64 else factor32)
    return softmax


def test_the_tolerances_follow_the_dtype():
    """float64: rtol 1e-9; float32: rtol 1e-5. Well inside passes; twice outside fails, in that dtype."""
    ex = EXERCISES["softmax"]
    assert ex.grade(_scaled_softmax(1 + 2e-10, 1 + 2e-6)).status == "pass"
    assert "in float64" in ex.grade(_scaled_softmax(1 + 2e-9, 1)).message
    assert "in float32" in ex.grade(_scaled_softmax(1, 1 + 2e-5)).message


def test_float64_computed_in_float32_fails():
    def attention(q, k, v, mask=None):
        out, w = right_solutions.einsum_attention(*(a.astype(np.float32) for a in (q, k, v)), mask)
        return out.astype(q.dtype), w.astype(q.dtype)
    verdict = EXERCISES["attention"].grade(attention)
    _check_message(verdict)
    assert "in float64" in verdict.message and "The values are wrong" in verdict.message


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(NAMES), position=st.integers(0, 10**6), change=st.sampled_from([-1, 1]),
       size=st.floats(3.0, 1e3))
def test_a_wrong_answer_never_passes(name, position, change, size):
    """A correct result with one entry moved outside the tolerance (or one boolean flipped) fails."""
    right = right_solutions.STYLES["einsum"][name]

    def nudged(*args):
        result = right(*args)
        outputs = list(result) if isinstance(result, tuple) else [result]
        target = outputs[position % len(outputs)].copy()
        flat = target.reshape(-1)
        i = position % flat.size
        if flat.dtype == bool:
            flat[i] = not flat[i]
        else:
            rtol, atol = TOLERANCES[flat.dtype]
            flat[i] += change * size * (atol + rtol * abs(flat[i]))
        outputs[position % len(outputs)] = target
        return tuple(outputs) if isinstance(result, tuple) else outputs[0]

    verdict = EXERCISES[name].grade(nudged)
    _check_message(verdict)
