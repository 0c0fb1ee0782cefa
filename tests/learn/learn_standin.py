"""A stand-in for ``npformer.learn.exercises``: five exercises with the real interface (``EXERCISES``,
``Exercise.cases()``, ``Exercise.judge(trials) -> Verdict``, ``Exercise.grade(fn)``, ``section_title``) and a
deliberately simple judging, so that the runner, the report, the workbook and the command line are tested
apart from the real grader.

``installed(monkeypatch)`` puts it in place of the real module for one test; a forked child inherits it.
"""
from __future__ import annotations

import sys
import types
from dataclasses import dataclass

import numpy as np

import npformer.learn
from npformer.learn.checks import Verdict
from npformer.learn.trial import LocalTrials
from npformer.lesson import SECTIONS
from npformer.nn import merge_heads, split_heads
from npformer.ops import causal_mask, layernorm_forward, softmax_forward

_X = np.linspace(-2.0, 3.0, 24).reshape(2, 3, 4)
CASES = {   # name -> (section, signature, arguments, the expected result's function: npformer's own, as the grader's)
    "softmax": (1, "softmax(x)", (_X,), lambda x: softmax_forward(x)[0]),
    "split_heads": (3, "split_heads(x, n_heads)", (_X, 2), split_heads),
    "merge_heads": (3, "merge_heads(x)", (_X.reshape(1, 2, 3, 4),), merge_heads),
    "layer_norm": (3, "layer_norm(x, gamma, beta, eps=1e-5)", (_X, np.full(4, 2.0), np.full(4, 0.5)),
                   lambda x, gamma, beta, eps=1e-5: layernorm_forward(x, gamma, beta, eps)[0]),
    "causal_mask": (4, "causal_mask(T)", (3,), lambda t: causal_mask(t, t)),
}


@dataclass(frozen=True)
class Case:
    args: tuple


@dataclass(frozen=True)
class Exercise:
    name: str
    signature: str
    section: int
    contract: str
    hint: str
    stub: str
    solution: str

    def cases(self) -> tuple[Case, ...]:
        return (Case(CASES[self.name][2]),)

    def report_error(self, error, index) -> str:
        return error.text(f"{self.name} raised")

    def judge(self, trials) -> Verdict:
        _, _, args, expected = CASES[self.name]
        want = expected(*args)
        for outcome in trials.run(self.name):
            got = outcome.result
            if not got.is_array or got.shape != want.shape:
                return Verdict("fail", f"{self.name} returned {got.type}, expected an array of shape "
                                       f"{want.shape}\n(lesson section {self.section}: {section_title(self.section)})")
            if not np.allclose(got.data, want, rtol=1e-9, atol=1e-12):
                return Verdict("fail", f"input {args[0].shape if hasattr(args[0], 'shape') else args[0]}\n"
                                       f"got {got.data.ravel()[:3]}, expected {want.ravel()[:3]}\n"
                                       f"the numbers are wrong (lesson section {self.section}: "
                                       f"{section_title(self.section)})")
        return Verdict("pass")

    def grade(self, fn) -> Verdict:
        return self.judge(LocalTrials(EXERCISES, {self.name: fn}, catch=False))


def section_title(n: int) -> str:
    return SECTIONS[n]


def _exercise(name: str) -> Exercise:
    section, signature, _, _ = CASES[name]
    stub = (f"def {signature}:\n    \"\"\"The contract of {name}.\n\n    Hint: the hint of {name}.\n    \"\"\"\n"
            f"    raise NotImplementedError(\"{name}\")\n")
    return Exercise(name, signature, section, f"The contract of {name}.", f"the hint of {name}", stub, "")


EXERCISES = {name: _exercise(name) for name in CASES}

# correct solutions, as a learner would write them in a workbook
SOLUTIONS = '''
import numpy as np


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def split_heads(x, n_heads):
    b, t, e = x.shape
    return x.reshape(b, t, n_heads, e // n_heads).transpose(0, 2, 1, 3)


def merge_heads(x):
    b, h, t, d = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, t, h * d)


def layer_norm(x, gamma, beta, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(axis=-1, keepdims=True) + eps) * gamma + beta


def causal_mask(T):
    return np.tri(T, dtype=bool)
'''


def installed(monkeypatch) -> types.ModuleType:
    """Put this stand-in in place of ``npformer.learn.exercises`` for one test."""
    module = sys.modules[__name__]
    monkeypatch.setitem(sys.modules, "npformer.learn.exercises", module)
    monkeypatch.setattr(npformer.learn, "exercises", module, raising=False)
    return module
