"""`npformer learn quiz` (npformer.learn.quiz.run): the lesson's three knowledge-check questions and a fourth on
sqrt(d), questions 1, 2 and 4 graded, 3 compared, each explanation followed by a demonstration computed by
npformer; --no-input never asks and prints the choices; piped input keeps its line breaks; the end of input
ends the quiz cleanly and Ctrl-C is left to the caller."""
import io
import re

import numpy as np
import pytest

from npformer.learn import quiz
from npformer.lesson import SECTIONS

# the lesson's knowledge check, copied from its page (its apostrophe written as ')
LESSON_QUESTIONS = [
    "Each row of the attention weights sums to what, and why?",
    "A model has 512-dimensional vectors and 8 heads. How big is each head's slice?",
    "Why does a transformer need position information?",
    "Why are the scores q.k divided by sqrt(d) before the softmax?",
]
LESSON_EXPLANATIONS = [
    "1. The weights come from softmax, which normalises each row.",
    "64. 512 / 8 = 64.",
    "Attention alone ignores order. Shuffling tokens just shuffles the outputs.",
    "b. q.k adds up d products",
]
ISSUE_FORMS = ["64", "64.0", "512/8", "512 / 8", "sixty-four"]
ACCEPTED = ISSUE_FORMS + ["  64  ", "\t64\n", "Sixty-Four", "SIXTY-FOUR ", "sixty four", "64.", "64.00", "+64",
                          "512/8 = 64", "512 / 8 = 64.0", "64 dimensions", "64 per head", "512 ÷ 8", "1024/16", "64?"]
WRONG = ["512", "8", "6.4", "sixty", "", "   ", "4096", "64/8", "-64", "640", "6 4", "32", "63.9", "64.5",
         "64.000001", "512/8 = 32", "64 = 32", "64 or 32", "not 64", "0x40", "1e2", "sixty-five", "512/0", "6,4",
         "=64", "64 apples", "64 ?!x"]


def _answers(*answers):
    """A stand-in for builtins.input that returns ``answers`` in turn, then raises EOFError, and records
    its prompts."""
    prompts = []
    queue = list(answers)

    def ask(prompt):
        prompts.append(prompt)
        if not queue:
            raise EOFError
        return queue.pop(0)
    return ask, prompts


def _quiz(*answers, no_input=False):
    ask, prompts = _answers(*answers)
    out = io.StringIO()
    code = quiz.run(no_input=no_input, input=ask, out=out)
    return code, out.getvalue(), prompts


def _verdict_line(text: str) -> str:
    """The line printed between question 2 and its explanation."""
    lines = text.splitlines()
    i = next(i for i, line in enumerate(lines) if LESSON_QUESTIONS[1] in line)
    assert lines[i + 2].startswith("Explanation: "), lines[i:i + 3]
    return lines[i + 1]


@pytest.mark.parametrize("answer", ACCEPTED)
def test_every_form_of_64_is_accepted(answer):
    assert quiz.is_heads_answer(answer)


@pytest.mark.parametrize("answer", WRONG)
def test_a_wrong_number_or_a_non_number_is_not_accepted(answer):
    assert not quiz.is_heads_answer(answer)


@pytest.mark.parametrize("answer", ISSUE_FORMS)
def test_the_quiz_grades_the_issues_forms_right(answer):
    code, text, prompts = _quiz("softmax", answer, "order", "b")
    assert code == 0 and len(prompts) == 4
    assert _verdict_line(text) == "Correct."
    assert text.rstrip().endswith("2 of the 3 graded questions right (2, 4).")


@pytest.mark.parametrize("answer, words", [("512", "whole vector"), ("8", "number of heads"),
                                           ("4096", "divide"), ("6.4", "equal slice"), ("sixty", "one number"),
                                           ("", "No answer")])
def test_a_wrong_answer_is_told_what_it_mixes_up(answer, words):
    code, text, _ = _quiz("one", answer, "order", "a")
    assert code == 0                                        # a wrong answer is not a failed command
    verdict = _verdict_line(text)
    assert verdict != "Correct." and words in verdict, verdict
    assert text.count("Correct.") == 1                      # question 1's
    assert text.rstrip().endswith("1 of the 3 graded questions right (1).")


def test_the_three_questions_explanations_and_demonstrations_appear_in_order():
    code, text, prompts = _quiz("1, because of the softmax", "64", "attention ignores order", "(B)")
    assert code == 0
    assert prompts == ["Your answer: "] * 4
    pos = -1
    rows = zip(LESSON_QUESTIONS, LESSON_EXPLANATIONS, (1, 3, 4, 2), strict=True)
    for n, (question, explanation, section) in enumerate(rows, 1):
        beyond = " (beyond the lesson's three)" if n == 4 else ""
        for want in (f"Question {n} of 4{beyond}: {question}", f"Explanation: {explanation}", "Computed by npformer:",
                     f"npformer lesson --section {section}` ({SECTIONS[section]})"):
            i = text.find(want, pos + 1)
            assert i > pos, f"missing or out of order: {want!r}"
            pos = i

    # question 1: rows that sum to 1, with and without a causal mask
    sums = re.findall(r"each row (?:still )?sums to: \[([^\]]*)\]", text)
    assert len(sums) == 2
    for row in sums:
        values = [float(s) for s in row.split(",")]
        assert len(values) == 4 and np.allclose(values, 1.0, rtol=0, atol=1e-6)
    gap = float(re.search(r"largest distance from 1 in both: (\S+)\)", text).group(1))
    assert 0 <= gap < 1e-6
    # question 2: a 512-wide tensor split into 8 heads of 64
    assert "shape (1, 6, 512) (batch, tokens, width)" in text
    assert "split_heads(x, 8) gives shape (1, 8, 6, 64)" in text
    assert "heads[:, 2] is x[:, :, 128:192], the third slice of 64 numbers of every token: True" in text
    assert "merge_heads puts the slices side by side again: (1, 6, 512), identical to the input: True" in text
    # question 3: shuffled tokens give shuffled outputs, until positions are added
    assert "without positions, the shuffled outputs are the old outputs in the new order: True" in text
    assert "with positions, the shuffled outputs are the old outputs in the new order: False" in text
    assert "Compare your answer with the explanation." in text and text.count("Correct.") == 3
    assert text.rstrip().endswith("3 of the 3 graded questions right (1, 2, 4).")
    # question 4: the variance of q.k and the softmax's peak and entropy, by d
    rows = re.findall(r"^\s+(4|64|512)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)$", text, re.M)
    assert [int(r[0]) for r in rows] == [4, 64, 512]
    demo = quiz.scale_demo()
    for d, *numbers in rows:
        row = demo[int(d)]
        assert [float(n) for n in numbers] == [round(row[k], 1 if k == "variance" else 2) for k in (
            "variance", "scaled_max", "unscaled_max", "scaled_entropy", "unscaled_entropy")]


def _softmax(s):
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _self_attention(x, mask=None):
    """softmax(x x^T / sqrt(d)) x by the formula, masked scores set to -inf."""
    scores = x @ x.T / np.sqrt(x.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    return _softmax(scores) @ x, _softmax(scores)


def test_the_demonstrations_compute_what_they_claim():
    r = quiz.row_sums_demo()
    x = r["x"]
    _, weights = _self_attention(x)
    _, causal = _self_attention(x, mask=np.tril(np.ones((4, 4), dtype=bool)))
    assert np.allclose(r["scores"], x @ x.T / np.sqrt(8), rtol=1e-12, atol=1e-12)
    assert np.allclose(r["weights"], weights, rtol=1e-9, atol=1e-12)
    assert np.allclose(r["causal"], causal, rtol=1e-9, atol=1e-12)
    assert np.allclose(r["weights"].sum(axis=-1), 1.0, rtol=0, atol=1e-6)
    assert np.allclose(r["causal"].sum(axis=-1), 1.0, rtol=0, atol=1e-6)
    assert np.all(r["causal"][np.triu_indices(4, 1)] == 0)
    assert not np.allclose(r["scores"].sum(axis=-1), 1.0, atol=0.1)     # the scores alone do not sum to 1

    r = quiz.heads_demo()
    x, heads, merged = r["x"], r["heads"], r["merged"]
    assert x.shape == (1, 6, 512) and heads.shape == (1, 8, 6, 64)
    for h in range(8):
        assert np.array_equal(heads[0, h], x[0, :, 64 * h:64 * (h + 1)])
    assert np.array_equal(merged, x)

    r = quiz.order_demo()
    x, perm = r["x"], r["perm"]
    assert sorted(perm.tolist()) == list(range(5)) and perm.tolist() != list(range(5))
    p, two_i = np.arange(5)[:, None], np.arange(0, 8, 2)
    pe = np.zeros((5, 8))                                               # the paper's sinusoids
    pe[:, 0::2], pe[:, 1::2] = np.sin(p / 10000 ** (two_i / 8)), np.cos(p / 10000 ** (two_i / 8))
    for key, tokens in (("plain", x), ("shuffled", x[perm]), ("positioned", x + pe),
                        ("positioned_shuffled", x[perm] + pe)):
        assert np.allclose(r[key], _self_attention(tokens)[0], rtol=1e-9, atol=1e-12), key
    assert np.allclose(r["shuffled"], r["plain"][perm], rtol=1e-9, atol=1e-12)
    assert np.abs(r["positioned_shuffled"] - r["positioned"][perm]).max() > 1e-2


def test_no_input_prints_everything_and_never_calls_input():
    def refuse(prompt):
        raise AssertionError(f"input was called with {prompt!r}")
    out = io.StringIO()
    assert quiz.run(no_input=True, input=refuse, out=out) == 0
    text = out.getvalue()
    for question, explanation in zip(LESSON_QUESTIONS, LESSON_EXPLANATIONS, strict=True):
        assert question in text and f"Explanation: {explanation}" in text
    assert text.count("Computed by npformer:") == 4
    for letter, choice, _ in quiz.SCALE_CHOICES:
        assert f"  {letter}) {choice}" in text
    assert "Correct." not in text and "Not quite" not in text and "Quiz ended" not in text
    assert text.rstrip().endswith("End of the knowledge check.")


@pytest.mark.parametrize("answered", [0, 1, 2, 3])
def test_end_of_input_ends_the_quiz_cleanly(answered):
    code, text, prompts = _quiz(*["1", "64", "order"][:answered])
    assert code == 0 and len(prompts) == answered + 1
    assert text.rstrip().endswith(f"Quiz ended at question {answered + 1} (end of input). "
                                  "Run `npformer learn quiz` to start again.")
    assert text.count("Explanation: ") == answered                     # nothing shown for the unanswered one
    for question in LESSON_QUESTIONS[answered + 1:]:
        assert question not in text


def test_ctrl_c_is_left_to_the_caller():
    def interrupt(prompt):
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        quiz.run(input=interrupt, out=io.StringIO())


def test_output_goes_to_stdout_by_default_and_is_the_same_every_run(capsys):
    assert quiz.run(no_input=True) == 0
    first = capsys.readouterr().out
    assert quiz.run(no_input=True) == 0
    assert LESSON_QUESTIONS[0] in first and capsys.readouterr().out == first


@pytest.mark.parametrize("kwargs, match", [({"no_input": "yes"}, "no_input must be True or False"),
                                           ({"input": None}, "input must be a function"),
                                           ({"out": object()}, "out must be a text stream"),
                                           ({"input": lambda prompt: 64}, "input must return a string")])
def test_bad_arguments_are_named(kwargs, match):
    kwargs.setdefault("out", io.StringIO())
    with pytest.raises(TypeError, match=match):
        quiz.run(**kwargs)
    with pytest.raises(TypeError, match="answer must be a string"):
        quiz.is_heads_answer(64)


def _line_after(text: str, question: str) -> str:
    lines = text.splitlines()
    i = next(i for i, line in enumerate(lines) if question in line)
    return next(line for line in lines[i + 1:] if not line.startswith("  "))    # after the choices


@pytest.mark.parametrize("answer, words", [("1", "Correct."), ("1, because softmax normalises", "Correct."),
                                           ("one", "Correct."), ("0", "0 would leave each token nothing"),
                                           ("zero", "0 would leave"), ("3", "not 3, whatever the number"),
                                           ("2.5 because", "not 2.5, whatever"), ("softmax", "the answer is a number"),
                                           ("", "No answer given.")])
def test_question_1_is_graded_as_a_number(answer, words):
    _, text, _ = _quiz(answer, "64", "order", "b")
    verdict = _line_after(text, LESSON_QUESTIONS[0])
    assert words in verdict, verdict


@pytest.mark.parametrize("answer", ["a", "A", "c", "(d)", "d.", "e", "sqrt", ""])
def test_question_4_gives_each_wrong_choice_its_own_feedback(answer):
    _, text, _ = _quiz("1", "64", "order", answer)
    verdict = _line_after(text, LESSON_QUESTIONS[3])
    letter = quiz.choice_letter(answer)
    told = {c: said for c, _, said in quiz.SCALE_CHOICES}
    if letter in told:
        assert verdict == told[letter] and verdict.startswith("Not quite: ")
    else:
        assert verdict in ("No answer given.", "Not quite: answer with one letter, a, b, c, d.")
    assert len(set(told.values())) == 4                                  # each its own


def test_question_3_is_free_text_and_not_graded():
    _, text, _ = _quiz("1", "64", "anything at all", "b")
    assert _line_after(text, LESSON_QUESTIONS[2]) == "Compare your answer with the explanation."


def test_piped_answers_keep_their_line_breaks(monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO("1\n64\nthe order\nb\n"))
    assert quiz.run() == 0
    lines = capsys.readouterr().out.splitlines()
    for answer, after in (("1", "Correct."), ("64", "Correct."), ("the order", "Compare your answer"),
                          ("b", "Correct.")):
        i = lines.index(f"Your answer: {answer}")
        assert lines[i + 1].startswith(after), lines[i:i + 2]
    assert not any(line.startswith("Your answer: ") and "Explanation" in line for line in lines)


def test_the_scale_demonstration_computes_what_it_claims():
    """The variance of q.k grows like d; npformer's weights equal a softmax written here, scaled and not."""
    demo = quiz.scale_demo()
    for d, row in demo.items():
        assert abs(row["variance"] / d - 1) < 0.15, (d, row)
        rng = np.random.default_rng(4 + d)
        rng.normal(size=(2, 2048, d))
        queries, keys = rng.normal(size=(256, d)), rng.normal(size=(16, d))
        for name, scale in (("scaled", 1 / np.sqrt(d)), ("unscaled", 1.0)):
            w = _softmax(queries @ keys.T * scale)
            entropy = -(w * np.log(np.maximum(w, 1e-300))).sum(axis=-1)
            assert abs(w.max(axis=-1).mean() - row[f"{name}_max"]) < 1e-9
            assert abs(entropy.mean() - row[f"{name}_entropy"]) < 1e-6
    assert demo[512]["unscaled_max"] > 0.9 and demo[512]["scaled_max"] < 0.5
