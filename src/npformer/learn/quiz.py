"""``npformer learn quiz``: the lesson's knowledge check, asked in the terminal.

The first three questions are the lesson's own; a fourth, beyond them, asks why the scores are divided
by sqrt(d), with lettered choices. After each answer comes the explanation and a demonstration computed
by npformer's own functions: attention rows that sum to 1, a 512-wide tensor split into 8 heads of 64,
shuffled tokens giving shuffled outputs until positions are added, and the spread of q.k and the
softmax's peak and entropy at d = 4, 64 and 512 with and without the scale. Questions 1 (a number), 2
(a number) and 4 (a letter) are graded; question 3 is free text, compared by the learner with the
explanation, as the lesson's "reveal the explanation" asks.

Every demonstration draws from its own ``default_rng`` seed, so its printed numbers are the same
on every run on one machine.
"""
from __future__ import annotations

import builtins
import functools
import re
import sys
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ..functional import attention
from ..lesson import SECTIONS
from ..nn import merge_heads, split_heads
from ..ops import attention_forward, sinusoidal_positions

# B batch, T tokens, E model width, H heads, D head size


@dataclass(frozen=True)
class Question:
    text: str          # the lesson's question, word for word (the fourth: beyond the lesson's three)
    explanation: str   # the lesson's explanation, word for word
    section: int       # the section of ``npformer lesson`` that the demonstration extends
    choices: tuple = ()   # (letter, choice, what a learner who picks it is told), for a multiple choice
    beyond: bool = False  # not one of the lesson's own questions


SCALE_CHOICES = (
    ("a", "So that each row of the weights sums to 1.",
     "Not quite: the softmax makes every row sum to 1 at any scale; the scale changes how peaked the row is."),
    ("b", "To keep the scores' spread the same at any d, so that the softmax does not put nearly all its "
          "weight on one key.", "Correct."),
    ("c", "To make attention cheaper to compute.",
     "Not quite: it is one more multiplication; it changes the numbers, not the amount of work."),
    ("d", "To turn q.k into the cosine of the angle between q and k.",
     "Not quite: the cosine divides by the lengths |q| |k|, which differ from token to token; sqrt(d) is one "
     "constant for every pair."),
)
QUESTIONS = (
    Question("Each row of the attention weights sums to what, and why?",
             "1. The weights come from softmax, which normalises each row.", 1),
    Question("A model has 512-dimensional vectors and 8 heads. How big is each head's slice?",
             "64. 512 / 8 = 64.", 3),
    Question("Why does a transformer need position information?",
             "Attention alone ignores order. Shuffling tokens just shuffles the outputs.", 4),
    Question("Why are the scores q.k divided by sqrt(d) before the softmax?",
             "b. q.k adds up d products, so for random q and k its variance is d: without the scale the scores "
             "spread wider as d grows, and the softmax puts nearly all its weight on one key, where its "
             "gradients vanish. Dividing by sqrt(d) brings the variance back to about 1 at any d.", 2,
             SCALE_CHOICES, beyond=True),
)
GRADED = (1, 2, 4)                               # the questions with one right answer; 3 is free text
D_MODEL, N_HEADS = 512, 8
SCALE_DIMS = (4, 64, 512)                        # the head sizes of the sqrt(d) demonstration

INTRO = """\
Knowledge check: the lesson's three questions and a fourth beyond them. Try each one first, then
read the explanation, shown with numbers that npformer computes. Questions 1, 2 and 4 are graded;
question 3 you compare with the explanation. End the quiz at any time with Ctrl-D."""
NO_INPUT_INTRO = """\
Knowledge check: the lesson's three questions and a fourth beyond them, each with its explanation,
shown with numbers that npformer computes (--no-input: nothing is asked)."""


# ----------------------------------------------------------------------------- demonstrations

def row_sums_demo() -> dict[str, np.ndarray]:
    """Self-attention of 4 random tokens of width 8, without and with a causal mask.

    Returns x (T, E), the scores before the softmax (T, T), weights (T, T) and causal weights (T, T)."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(4, 8))                                       # (T, E)
    scores = x @ x.T / np.sqrt(x.shape[-1])                           # (T, T) before the softmax
    _, weights = attention(x, x, x)                                   # (T, T)
    _, causal = attention(x, x, x, causal=True)                       # (T, T)
    return {"x": x, "scores": scores, "weights": weights, "causal": causal}


def heads_demo() -> dict[str, np.ndarray]:
    """A (1, 6, 512) batch split into 8 heads and merged back: x (B, T, E), heads (B, H, T, D), merged (B, T, E)."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=(1, 6, D_MODEL))                              # (B, T, E)
    heads = split_heads(x, N_HEADS)                                   # (B, H, T, D)
    merged = merge_heads(heads)                                       # (B, T, E)
    return {"x": x, "heads": heads, "merged": merged}


def order_demo() -> dict[str, np.ndarray]:
    """Self-attention of 5 tokens and of the same tokens shuffled, without and with sinusoidal positions.

    Returns x (T, E), perm (T,) and the outputs (T, E): plain, shuffled, with positions, shuffled with
    positions."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(5, 8))                                       # (T, E)
    perm = rng.permutation(5)                                         # (T,)
    while np.array_equal(perm, np.arange(5)):                         # a shuffle that moves something
        perm = rng.permutation(5)
    pe = sinusoidal_positions(5, 8, dtype=np.float64)                 # (T, E)
    plain, _ = attention(x, x, x)                                     # (T, E)
    shuffled, _ = attention(x[perm], x[perm], x[perm])                # (T, E)
    xp, xs = x + pe, x[perm] + pe                                     # (T, E) each token at its place
    positioned, _ = attention(xp, xp, xp)                             # (T, E)
    positioned_shuffled, _ = attention(xs, xs, xs)                    # (T, E)
    return {"x": x, "perm": perm, "plain": plain, "shuffled": shuffled,
            "positioned": positioned, "positioned_shuffled": positioned_shuffled}


def _matrix(a: np.ndarray, indent: str = "  ") -> list[str]:
    return [indent + line for line in str(np.round(a, 2)).split("\n")]


def _row_sums_lines() -> list[str]:
    r = row_sums_demo()
    scores, weights, causal = r["scores"], r["weights"], r["causal"]
    gap = max(np.abs(weights.sum(axis=-1) - 1).max(), np.abs(causal.sum(axis=-1) - 1).max())
    return ["Scores q.k / sqrt(d) of 4 random tokens attending to each other: any real numbers,",
            f"rows summing to {np.round(scores.sum(axis=-1), 2).tolist()}.",
            "softmax takes exp (all positive) and divides each row by its total: npformer.attention gives",
            *_matrix(weights),
            f"each row sums to: {np.round(weights.sum(axis=-1), 2).tolist()}",
            "With a causal mask the masked weights are 0 and softmax shares the row among the rest:",
            *_matrix(causal),
            f"each row still sums to: {np.round(causal.sum(axis=-1), 2).tolist()} "
            f"(largest distance from 1 in both: {gap:.1e})",
            "So each token's output is a weighted average of the values, never a blown-up sum."]


def _heads_lines() -> list[str]:
    r = heads_demo()
    x, heads, merged = r["x"], r["heads"], r["merged"]
    d = heads.shape[-1]
    third = bool(np.array_equal(heads[:, 2], x[:, :, 2 * d:3 * d]))
    return [f"A batch of {x.shape[1]} tokens, each a {x.shape[2]}-wide vector: shape {x.shape} (batch, tokens, width).",
            f"split_heads(x, {N_HEADS}) gives shape {heads.shape} (batch, heads, tokens, per-head size):",
            f"each of the {heads.shape[1]} heads reads a slice of {d} numbers of every token.",
            f"heads[:, 2] is x[:, :, {2 * d}:{3 * d}], the third slice of {d} numbers of every token: {third}",
            f"merge_heads puts the slices side by side again: {merged.shape}, "
            f"identical to the input: {bool(np.array_equal(merged, x))}",
            "The heads share the vector; they do not each get a copy of it, so the work stays the same."]


def _order_lines() -> list[str]:
    r = order_demo()
    perm = r["perm"]
    same = bool(np.allclose(r["shuffled"], r["plain"][perm]))
    same_pe = bool(np.allclose(r["positioned_shuffled"], r["positioned"][perm]))
    gap = np.abs(r["positioned_shuffled"] - r["positioned"][perm]).max()
    return [f"Self-attention of 5 random tokens, then of the same tokens in the order {perm.tolist()}.",
            f"without positions, the shuffled outputs are the old outputs in the new order: {same}",
            "The model cannot tell the two sentences apart. Add the paper's sinusoidal positions",
            "(sin on even, cos on odd dimensions) to the tokens, keep the positions in place, shuffle again:",
            f"with positions, the shuffled outputs are the old outputs in the new order: {same_pe} "
            f"(they differ by up to {gap:.2f})",
            "A token now carries where it stands, so the order of the input finally matters."]


def scale_demo(dims=SCALE_DIMS) -> dict[int, dict[str, float]]:
    """For each head size d: the variance of q.k over 2048 pairs of random q, k (unit variance per entry),
    and npformer's attention of 256 random queries over 16 keys, with the scale 1/sqrt(d) and without
    (scale 1): the mean of each query's largest weight and of its entropy in nats (ln 16 = 2.77 is
    uniform, 0 is all the weight on one key)."""
    return {d: dict(row) for d, row in _scale_demo(tuple(dims)).items()}


@functools.cache
def _scale_demo(dims: tuple[int, ...]) -> dict[int, dict[str, float]]:
    found = {}
    for d in dims:
        rng = np.random.default_rng(4 + d)
        q, k = rng.normal(size=(2, 2048, d))                           # (N, d) each
        variance = float(np.var((q * k).sum(axis=-1)))                 # q.k of N pairs
        queries, keys = rng.normal(size=(256, d)), rng.normal(size=(16, d))   # (Tq, d), (Tk, d)
        row = {"variance": variance}
        for name, scale in (("scaled", None), ("unscaled", 1.0)):
            _, w, _ = attention_forward(queries, keys, keys, scale=scale)     # (Tq, Tk)
            with np.errstate(divide="ignore", invalid="ignore"):
                entropy = -np.where(w > 0, w * np.log(w), 0.0).sum(axis=-1)   # (Tq,)
            row[f"{name}_max"], row[f"{name}_entropy"] = float(w.max(axis=-1).mean()), float(entropy.mean())
        found[d] = row
    return found


def _scale_lines() -> list[str]:
    r = scale_demo()
    lines = ["q.k of random q and k (each entry of variance 1) over 2048 pairs, and npformer's attention of",
             "256 random queries over 16 keys: the largest weight of a row, and its entropy in nats",
             "(2.77 = all 16 keys alike, 0 = one key takes everything), averaged over the queries:",
             f"  {'d':>4}  {'var(q.k)':>8}  {'largest weight':>20}  {'entropy':>20}",
             f"  {'':>4}  {'':>8}  {'/ sqrt(d)':>10}{'unscaled':>10}  {'/ sqrt(d)':>10}{'unscaled':>10}"]
    for d, row in r.items():
        lines.append(f"  {d:>4}  {row['variance']:>8.1f}  {row['scaled_max']:>10.2f}{row['unscaled_max']:>10.2f}"
                     f"  {row['scaled_entropy']:>10.2f}{row['unscaled_entropy']:>10.2f}")
    lines.append("The variance grows like d. Scaled, the largest weight and the entropy stay the same at every d;")
    lines.append("unscaled, one key takes almost all the weight once d is large, and the softmax's gradient there")
    lines.append("is almost 0.")
    return lines


DEMOS = {1: _row_sums_lines, 2: _heads_lines, 3: _order_lines, 4: _scale_lines}


# ----------------------------------------------------------------------------- grading question 2

_WORDS = {"sixty-four", "sixty four", "sixtyfour"}
_NUMBER = re.compile(r"\+?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)")
_DIVISION = re.compile(rf"({_NUMBER.pattern})\s*[/÷]\s*({_NUMBER.pattern})")
# harmless words a learner may put after the number: "64 dimensions", "64 per head"
_UNITS = re.compile(r"(?:\s+(?:dimensions?|dims?|numbers|values|wide|each|per head|per-head))+$")
# the wrong answers a learner is likely to give, and what each one mixes up
_KNOWN_SLIPS = {
    Fraction(D_MODEL): f"{D_MODEL} is the whole vector; the {N_HEADS} heads share it, each taking one slice.",
    Fraction(N_HEADS): f"{N_HEADS} is the number of heads, not the size of each head's slice.",
    Fraction(D_MODEL * N_HEADS): "the heads do not each get a copy of the vector: they split it, so divide.",
}


def _value(part: str) -> Fraction | None:
    """The exact value of one answer part: a number, a division of two numbers, or the words; else None."""
    if part in _WORDS:
        return Fraction(64)
    if _NUMBER.fullmatch(part):
        return Fraction(part.lstrip("+"))
    m = _DIVISION.fullmatch(part)
    if m:
        den = Fraction(m.group(2).lstrip("+"))
        return Fraction(m.group(1).lstrip("+")) / den if den else None
    return None


def heads_answer_value(answer: str) -> Fraction | None:
    """The number an answer to question 2 states, or None when it is not read as one number.

    Case, surrounding spaces, a final . ! or ? and a unit word ("64 dimensions") are ignored; a
    division ("512 / 8") counts as its exact value, and "512 / 8 = 64" only when every side agrees.
    """
    if not isinstance(answer, str):
        raise TypeError(f"answer must be a string, got {type(answer).__name__}")
    text = " ".join(answer.lower().split()).rstrip(".!?").strip()
    text = _UNITS.sub("", text)
    values = {_value(part.strip()) for part in text.split("=")}
    if None in values or len(values) != 1:
        return None
    return values.pop()


def is_heads_answer(answer: str) -> bool:
    """True when ``answer`` states 64, the size of each head's slice (512 / 8), in any accepted form."""
    return heads_answer_value(answer) == D_MODEL // N_HEADS


def _verdict(answer: str) -> str:
    """The line that grades an answer to question 2."""
    if is_heads_answer(answer):
        return "Correct."
    if not answer.strip():
        return "No answer given."
    value = heads_answer_value(answer)
    if value in _KNOWN_SLIPS:
        return f"Not quite: {_KNOWN_SLIPS[value]}"
    if value is None:
        return "Not quite: that does not read as one number (64, 512 / 8 or sixty-four would)."
    return "Not quite: each head gets an equal slice of the vector."


# ----------------------------------------------------------------------------- grading questions 1 and 4

_FIRST_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?![\w])")
_NUMBER_WORDS = {"zero": 0, "one": 1, "two": 2}


def row_sum_answer_value(answer: str) -> Fraction | None:
    """The number an answer to question 1 starts with ("1, because of the softmax" is 1; "one" and
    "zero" count), or None when it states none."""
    if not isinstance(answer, str):
        raise TypeError(f"answer must be a string, got {type(answer).__name__}")
    text = answer.strip().lower()
    word = re.match(r"[a-z]+", text)
    if word and word.group(0) in _NUMBER_WORDS:
        return Fraction(_NUMBER_WORDS[word.group(0)])
    m = _FIRST_NUMBER.search(text)
    return Fraction(m.group(0).lstrip("+")) if m else None


def _row_sum_verdict(answer: str) -> str:
    if not answer.strip():
        return "No answer given."
    value = row_sum_answer_value(answer)
    if value == 1:
        return "Correct."
    if value == 0:
        return ("Not quite: 0 would leave each token nothing to read; softmax's weights are all positive, and "
                "it divides each row by its total, so every row sums to 1.")
    if value is None:
        return "Not quite: the answer is a number, then why (for example: 1, because ...)."
    return (f"Not quite: not {float(value):g}, whatever the number of tokens: softmax divides each row by its total, "
            f"so every row sums to 1.")


def choice_letter(answer: str) -> str | None:
    """The letter an answer to a multiple-choice question picks ("b", "B", "(b)", "b)", "b."), or None."""
    if not isinstance(answer, str):
        raise TypeError(f"answer must be a string, got {type(answer).__name__}")
    m = re.fullmatch(r"\(?([a-z])[).]?", answer.strip().lower())
    return m.group(1) if m else None


def _choice_verdict(question: Question, answer: str) -> str:
    if not answer.strip():
        return "No answer given."
    letter = choice_letter(answer)
    for choice, _, said in question.choices:
        if letter == choice:
            return said
    letters = ", ".join(c for c, _, _ in question.choices)
    return f"Not quite: answer with one letter, {letters}."


def _verdict_for(n: int, question: Question, answer: str) -> str:
    if n == 1:
        return _row_sum_verdict(answer)
    if n == 2:
        return _verdict(answer)
    return _choice_verdict(question, answer)


# ----------------------------------------------------------------------------- the quiz

def _write(out, text: str = "") -> None:
    out.write(text + "\n")


def _explain(n: int, question: Question, out) -> None:
    _write(out, f"Explanation: {question.explanation}")
    _write(out, "Computed by npformer:")
    for line in DEMOS[n]():
        _write(out, "  " + line)
    _write(out, f"More in `npformer lesson --section {question.section}` ({SECTIONS[question.section]}).")


def _echoes(input) -> bool:
    """Whether the terminal shows what the learner types: not when input is piped (then the answer, and
    the line break after it, are written out, so that "Your answer:" and what follows stay apart)."""
    if input is not builtins.input:
        return True
    try:
        return sys.stdin.isatty()
    except (AttributeError, ValueError):
        return False


def run(*, no_input: bool = False, input=builtins.input, out=None) -> int:
    """Ask the four questions through ``input`` and write to ``out`` (default ``sys.stdout``).

    With ``no_input`` the questions and explanations are printed and ``input`` is never called.
    The end of input (Ctrl-D) ends the quiz with a line saying so; Ctrl-C (KeyboardInterrupt) is
    left to the caller. Returns the exit code, 0: a wrong answer is part of learning, not an error.
    """
    if not isinstance(no_input, (bool, np.bool_)):
        raise TypeError(f"no_input must be True or False, got {no_input!r}")
    if not callable(input):
        raise TypeError(f"input must be a function like builtins.input, got {type(input).__name__}")
    out = sys.stdout if out is None else out
    if not callable(getattr(out, "write", None)):
        raise TypeError(f"out must be a text stream with a write method, got {type(out).__name__}")
    _write(out, NO_INPUT_INTRO if no_input else INTRO)
    right: list[int] = []
    for n, question in enumerate(QUESTIONS, start=1):
        _write(out)
        beyond = " (beyond the lesson's three)" if question.beyond else ""
        _write(out, f"Question {n} of {len(QUESTIONS)}{beyond}: {question.text}")
        for letter, choice, _ in question.choices:
            _write(out, f"  {letter}) {choice}")
        if not no_input:
            if hasattr(out, "flush"):
                out.flush()                  # the question shows before input() waits
            try:
                answer = input("Your answer: ")
            except EOFError:
                _write(out)
                _write(out, f"Quiz ended at question {n} (end of input). "
                            "Run `npformer learn quiz` to start again.")
                return 0
            if not isinstance(answer, str):
                raise TypeError(f"input must return a string, got {type(answer).__name__}")
            if not _echoes(input):
                _write(out, answer)
            if n in GRADED:
                verdict = _verdict_for(n, question, answer)
                right += [n] if verdict == "Correct." else []
                _write(out, verdict)
            else:
                _write(out, "Compare your answer with the explanation.")
        _explain(n, question, out)
    _write(out)
    if no_input:
        _write(out, "End of the knowledge check.")
    else:
        which = f" ({', '.join(map(str, right))})" if right else ""
        _write(out, f"End of the knowledge check: {len(right)} of the {len(GRADED)} graded questions right{which}.")
    return 0
