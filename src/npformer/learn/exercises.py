"""The twelve exercises of ``npformer learn``, in the lesson's order, each with its contract, one hint,
the workbook's stub, a plain-NumPy reference solution, and its grading (``checks.py``).

Expected values come from npformer's own verified ops in float64 (``ops.softmax_forward``,
``ops.attention_forward``, ``ops.layernorm_forward``, ``nn.split_heads``...); every known mistake is
the same op with that one mistake put in, so a diagnosis names it only when the learner's numbers are
the mistake's numbers. The cases and mistakes are in ``specs_attention.py`` and ``specs_block.py``, the
references in ``references.py``, the table of mistakes by family in ``families.py``.
"""
from __future__ import annotations

import functools
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from . import errors
from .checks import Case, Spec, Verdict, judge, section_title
from .specs_attention import ATTENTION, ATTENTION_BACKWARD, CAUSAL_MASK, SOFTMAX, SOFTMAX_BACKWARD
from .specs_block import (
    ENCODER_BLOCK,
    FEED_FORWARD,
    LAYER_NORM,
    MERGE_HEADS,
    MULTI_HEAD_ATTENTION,
    POSITIONAL_ENCODING,
    SPLIT_HEADS,
)
from .texts import CONTRACTS, SOLUTIONS
from .trial import LocalTrials

__all__ = ["EXERCISES", "Exercise", "Verdict", "section_title"]


@dataclass(frozen=True)
class Exercise:
    """One exercise: its function's name and signature, the lesson section it practises, the stub's
    contract and hint, the stub's and the reference solution's source, and its grading: ``cases()`` (run by
    the learner's code, ``trial.py``), ``judge(trials)`` (the verdict on what they gave, ``checks.py``) and
    ``grade(fn)``, both in this process."""
    name: str
    signature: str
    section: int
    contract: str
    hint: str
    stub: str
    solution: str
    spec: Spec = field(repr=False, compare=False)

    def cases(self) -> tuple[Case, ...]:
        """Every case of every dtype, in grading order (built once per process)."""
        return _cases(self.name)

    def judge(self, trials) -> Verdict:
        """The verdict on ``trials.run(name)``'s outcomes; ``trials`` also runs the helpers of ``built_on``."""
        explain = None
        if self.spec.built_on is not None:
            built_on = self.spec.built_on
            explain = lambda index, case, got: built_on.explain(trials, EXERCISES, self.name, index, case, got)  # noqa: E731
        return judge(self.spec, self.cases(), trials.run(self.name), explain)

    def report_error(self, error, index: int | None) -> str:
        """The report on ``error`` (``wire.LearnerError``), raised on case ``index`` (``errors.py``)."""
        cases = self.cases()
        if index is None or not 0 <= index < len(cases):
            return error.text(f"{self.name} raised")
        return errors.report(self.spec, cases[index], error, EXERCISES)

    def compose(self, fn, index: int, theirs) -> np.ndarray:
        """The correct composition of case ``index`` on ``fn``'s helpers named in ``theirs`` (in the child)."""
        return self.spec.built_on.compose(fn, theirs, self.cases()[index])

    def grade(self, fn) -> Verdict:
        """Grade ``fn`` on every case, in this process; exceptions ``fn`` raises propagate unchanged."""
        if not callable(fn):
            raise TypeError(f"fn must be a function, got {type(fn).__name__}")
        return self.judge(LocalTrials(EXERCISES, {self.name: fn}, catch=False))


@functools.cache
def _cases(name: str) -> tuple[Case, ...]:
    spec = EXERCISES[name].spec
    return tuple(c for dtype in spec.dtypes for c in spec.cases(np.dtype(dtype) if dtype is not None else None))


def _stub(signature: str, contract: str, hint: str) -> str:
    body = "\n".join(("    " + line).rstrip() for line in contract.strip("\n").split("\n"))
    name = signature.split("(")[0]
    return (f"def {signature}:\n    \"\"\"{body.lstrip()}\n\n    Hint: {hint}\n    \"\"\"\n"
            f"    raise NotImplementedError(\"{name}\")\n")

# -- the table --------------------------------------------------------------------------------------------

_SIGNATURES = (
    ("softmax", "softmax(x)", SOFTMAX),
    ("attention", "attention(q, k, v, mask=None)", ATTENTION),
    ("split_heads", "split_heads(x, n_heads)", SPLIT_HEADS),
    ("merge_heads", "merge_heads(x)", MERGE_HEADS),
    ("layer_norm", "layer_norm(x, gamma, beta, eps=1e-5)", LAYER_NORM),
    ("positional_encoding", "positional_encoding(T, d)", POSITIONAL_ENCODING),
    ("causal_mask", "causal_mask(T)", CAUSAL_MASK),
    ("multi_head_attention", "multi_head_attention(x, params, n_heads, mask=None)", MULTI_HEAD_ATTENTION),
    ("feed_forward", "feed_forward(x, params)", FEED_FORWARD),
    ("encoder_block", "encoder_block(x, params, n_heads, mask=None)", ENCODER_BLOCK),
    ("softmax_backward", "softmax_backward(dy, y)", SOFTMAX_BACKWARD),
    ("attention_backward", "attention_backward(dout, q, k, v, weights)", ATTENTION_BACKWARD),
)

EXERCISES: OrderedDict[str, Exercise] = OrderedDict(
    (name, Exercise(name, signature, spec.section, CONTRACTS[name][0], CONTRACTS[name][1],
                    _stub(signature, *CONTRACTS[name]), SOLUTIONS[name], spec))
    for name, signature, spec in _SIGNATURES)
