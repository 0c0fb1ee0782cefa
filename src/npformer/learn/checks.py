"""The grader's machinery, shared by every exercise of ``exercises.py``.

An exercise is graded on a list of cases: fixed inputs whose expected outputs come from npformer's own
verified ops in float64, never from the learner's function. The learner's function runs elsewhere
(``trial.py``, in the grading child) on copies of the inputs and sends back plain data
(``wire.Outcome``); the judging here reads only that data and checks, in this order, that no input was
changed in place, that the result is a plain ndarray of the expected shape and dtype, and that its
values match within the dtype's tolerance. When they do not, the learner's output is compared with the
outputs of the known mistakes (the same input through a deliberately wrong variant of the op), so a diagnosis
names a mistake only when the numbers show it.
An exercise built on earlier ones (multi-head attention on attention) may also say that the learner's
output is the correct composition of the learner's own failing helpers (``Spec.built_on``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..lesson import SECTIONS
from .wire import Garbled, Item, Outcome

# rtol, atol per dtype, as the issue fixes them
TOLERANCES = {np.dtype(np.float64): (1e-9, 1e-12), np.dtype(np.float32): (1e-5, 1e-6)}


def section_title(n: int) -> str:
    """The lesson's own title of section ``n`` (as ``npformer lesson --section N`` prints it)."""
    if n not in SECTIONS:
        raise ValueError(f"section must be one of {sorted(SECTIONS)}, got {n!r}")
    return SECTIONS[n]


def pointer(section: int, beyond: bool = False) -> str:
    """The words that end every diagnosis: where the lesson explains it."""
    where = f"lesson section {section}: {section_title(section)}"
    return f"(beyond the lesson; closest is {where})" if beyond else f"({where})"


@dataclass(frozen=True)
class Verdict:
    """One exercise's grade: status "pass" or "fail"; message "" on pass, at most three lines on fail."""
    status: str
    message: str = ""


@dataclass
class Case:
    """One input: positional ``args`` (named by the spec's ``arg_names``), the float64 ``expected``
    outputs by name, the dtype the outputs must have (None: any of float32 / float64), a ``note``
    that completes the input's description, ``tags`` the mistakes may test, and ``extra`` data
    (the logits behind a softmax, for finite differences)."""
    args: tuple
    expected: dict[str, np.ndarray]
    dtype: np.dtype | None
    note: str = ""
    tags: frozenset = frozenset()
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Mistake:
    """A known mistake: ``text`` in a learner's words, and how to recognise it, either by ``wrong``,
    a function of the case's float64 args returning the mistaken outputs by name (compared with the
    learner's, all of them, NaN matching NaN), or by ``shows(got, case)``, a predicate on the learner's
    outputs. ``family`` is the kind of mistake it is (``families.FAMILIES``)."""
    text: str
    section: int
    wrong: Callable[..., dict[str, np.ndarray]] | None = None
    shows: Callable[[dict, Case], bool] | None = None
    family: str = ""


@dataclass(frozen=True)
class Spec:
    """How to grade one exercise: the names of its arguments and of its outputs (one name: a bare
    array; several: a tuple in that order), its cases for a dtype, its known mistakes, the lesson
    section of a generic diagnosis, and for the backward exercises ``fd(case, output, index)``, the
    central finite difference of that output's entry. ``built_on``, for an exercise whose code calls
    earlier exercises, is an ``builton.BuiltOn``: it says (sentence, section) when the learner's output is
    explained by the learner's own failing helpers; it is asked before the known mistakes, since a helper's
    mistake shows up as the same numbers as that mistake written inline."""
    arg_names: tuple[str, ...]
    outputs: tuple[str, ...]
    cases: Callable[[np.dtype | None], list[Case]]
    mistakes: tuple[Mistake, ...]
    section: int
    dtypes: tuple = (np.float64, np.float32)
    beyond: bool = False
    fd: Callable[[Case, str, tuple], float] | None = None
    built_on: Any = None


def as64(args):
    """The case's args with every float array in float64 (dicts recursively)."""
    if isinstance(args, dict):
        return {k: as64(v) for k, v in args.items()}
    if isinstance(args, (tuple, list)):
        return type(args)(as64(a) for a in args)
    if isinstance(args, np.ndarray) and args.dtype.kind == "f":
        return args.astype(np.float64)
    return args


def cast(tree, dtype):
    """Every float array of ``tree`` (arrays, dicts of arrays) in ``dtype``."""
    if isinstance(tree, dict):
        return {k: cast(v, dtype) for k, v in tree.items()}
    if isinstance(tree, np.ndarray) and tree.dtype.kind == "f":
        return tree.astype(dtype)
    return tree


def _arrays(name: str, value):
    """(printed name, array) for every array in an argument, dicts recursively."""
    if isinstance(value, np.ndarray):
        yield name, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _arrays(f"{name}[{k!r}]", v)


def _fmt(x, digits: int = 6) -> str:
    return str(bool(x)) if isinstance(x, (bool, np.bool_)) else f"{float(x):.{digits}g}"


def _at(index: tuple) -> str:
    return "[" + ", ".join(str(int(i)) for i in index) + "]" if index else ""


def describe(spec: Spec, case: Case) -> str:
    """Line 1 of a diagnosis: the input that exposed the mistake."""
    parts, dtypes = [], set()
    for name, value in zip(spec.arg_names, case.args, strict=False):     # optional args may be left out
        if isinstance(value, np.ndarray):
            parts.append(f"{name} {value.shape}")
            dtypes.add(value.dtype.name)
        elif isinstance(value, dict):
            parts.append(name)
            dtypes |= {a.dtype.name for _, a in _arrays(name, value) if a.dtype.kind == "f"}
        elif value is not None:
            parts.append(f"{name}={value!r}")
    text = "input: " + ", ".join(parts)
    floats = sorted(d for d in dtypes if d.startswith("float"))
    if floats:
        text += " in " + "/".join(floats)
    return text + (f"; {case.note}" if case.note else "")


def _changed(before, after: dict, name: str):
    """The first array of argument ``name`` that differs after the call: (printed name, index, old, new).
    ``after`` holds the argument's arrays after the call, by printed name, as the child sent them."""
    old_arrays = dict(_arrays(name, before))
    odd = sorted(old_arrays.keys() ^ after.keys())                    # an entry added, removed or replaced
    if odd:
        return odd[0], (), None, None
    for label, old in old_arrays.items():
        new = after[label].data
        if new is None or not after[label].exact or new.shape != old.shape or new.dtype != old.dtype:
            return label, (), None, None
        diff = ~((old == new) | (np.isnan(old) & np.isnan(new)) if old.dtype.kind == "f" else (old == new))
        if diff.any():
            index = tuple(np.argwhere(diff)[0])
            return label, index, old[index], new[index]
    return None


def _type_name(x: Item) -> str:
    if x.is_array:
        return f"a {x.dtype} array of shape {x.shape}"
    if x.items is not None:
        return f"a tuple of {x.length} items"
    return f"a {x.type}"


def _shape_cause(spec: Spec, case: Case, name: str, got: tuple, items: tuple) -> str:
    """Why output ``name`` has shape ``got``, where the shapes show it, or ""."""
    want = case.expected[name].shape
    shapes = [i.shape if i.is_array else None for i in items]
    expected = [case.expected[n].shape for n in spec.outputs]
    if len(items) > 1 and sorted(map(str, shapes)) == sorted(map(str, expected)) and shapes != expected:
        return f"The outputs are in the wrong order: return ({', '.join(spec.outputs)}), in that order"
    if len(got) == len(want) - 1 and any(want[:k] + want[k + 1:] == got for k in range(len(want))):
        k = next(k for k in range(len(want)) if want[:k] + want[k + 1:] == got)
        return (f"{name} lost axis {k} (size {want[k]}): a reduction such as np.max(h, 0), np.sum or np.mean "
                f"with an axis where an elementwise function was meant? ReLU is np.maximum(h, 0)")
    if len(got) > len(want):
        mask = dict(zip(spec.arg_names, case.args, strict=False)).get("mask")
        if isinstance(mask, np.ndarray):
            return (f"{name} has more axes than expected: the mask {mask.shape} broadcasts against the scores "
                    f"(..., Tq, Tk) as it is, and axes added to it (mask[None, None]) end up in the output")
        return f"{name} has more axes than expected: an axis added to an operand (x[None], x[:, None]) ends up there"
    return ""


def _unpack(spec: Spec, result: Item, case: Case) -> tuple[dict | None, str, str]:
    """The outputs by name, or None, a plain sentence saying what is wrong with the result's type or shape,
    and what that points to ("" where the shapes do not show it)."""
    want = ", ".join(spec.outputs)
    if len(spec.outputs) == 1:
        items: tuple = (result,)
    elif result.items is None:
        return None, f"It returned {_type_name(result)}, expected a tuple ({want})", ""
    elif result.length != len(spec.outputs):
        return None, f"It returned a tuple of {result.length} items, expected {len(spec.outputs)}: ({want})", ""
    else:
        items = result.items
    got = {}
    for name, item in zip(spec.outputs, items, strict=True):
        shape = case.expected[name].shape
        if not item.is_array:
            return None, f"{name} is {_type_name(item)}, expected a NumPy array of shape {shape}", ""
        if not item.exact:
            return None, (f"{name} is of type {item.type}, a subclass of np.ndarray, expected a plain NumPy "
                          f"array (np.asarray(...) gives one)"), ""
        if item.shape != shape:
            return None, f"{name} has shape {item.shape}, expected {shape}", _shape_cause(spec, case, name, item.shape,
                                                                                         items)
        if case.dtype is None and item.dtype not in ("float32", "float64"):
            return None, f"{name} is {item.dtype}, expected float32 or float64", ""
        if case.dtype is not None and item.dtype != case.dtype.name:
            why = ("a float64 scalar such as np.sqrt(d) turns float32 arrays into float64: use math.sqrt "
                   "or cast back with .astype(x.dtype)") if case.dtype == np.float32 else ""
            return None, f"{name} is {item.dtype}, expected {case.dtype.name}" + (f" ({why})" if why else ""), ""
        if item.data is None:
            raise Garbled(f"{name} without its data")
        got[name] = item.data
    return got, "", ""


def close(got: np.ndarray, want: np.ndarray, dtype) -> bool:
    """Equal for booleans; within the tolerance of ``dtype`` for floats (NaN never matches)."""
    if want.dtype == bool:
        return bool(np.array_equal(got, want))
    rtol, atol = TOLERANCES[np.dtype(dtype)]
    return bool(np.allclose(got.astype(np.float64), want, rtol=rtol, atol=atol))


def matches(got: np.ndarray, wrong: np.ndarray, dtype) -> bool:
    """Whether the learner's ``got`` is a mistake's numbers ``wrong``: ``close``, NaN where it has NaN (a
    mistake that underflows to 0 / 0); a variant that is NaN everywhere matches nothing."""
    if wrong.dtype == bool:
        return bool(got.shape == wrong.shape and np.array_equal(got, wrong))
    if got.shape != wrong.shape or np.isnan(wrong).all():
        return False
    rtol, atol = TOLERANCES[np.dtype(dtype)]
    return bool(np.allclose(got.astype(np.float64), wrong, rtol=rtol, atol=atol, equal_nan=True))


def _worst(got: np.ndarray, want: np.ndarray, dtype) -> tuple:
    """The index where ``got`` is furthest outside the tolerance."""
    if want.dtype == bool:
        return tuple(np.argwhere(got != want)[0])
    rtol, atol = TOLERANCES[np.dtype(dtype)]
    g = got.astype(np.float64)
    excess = np.abs(g - want) - (atol + rtol * np.abs(want))
    excess = np.where(np.isfinite(g), excess, np.inf)
    return np.unravel_index(int(np.argmax(excess)), want.shape)


def _fail(*lines: str) -> Verdict:
    return Verdict("fail", "\n".join(lines))


def judge_case(spec: Spec, case: Case, outcome: Outcome, explain: Callable | None = None) -> Verdict | None:
    """None when the learner's ``outcome`` of this case is right, else the failing verdict. ``explain(got)``
    may name the learner's failing helpers (``Spec.built_on``)."""
    where = describe(spec, case)
    if len(outcome.inputs) != min(len(spec.arg_names), len(case.args)):
        raise Garbled("a count of inputs unlike the case's")
    for name, before, after in zip(spec.arg_names, case.args, outcome.inputs, strict=False):
        change = _changed(before, after, name)
        if change:
            label, index, old, new = change
            what = (f"{label}{_at(index)} was {_fmt(old)} before the call and {_fmt(new)} after"
                    if old is not None else f"{label} was added, removed, or changed shape or dtype during the call")
            return _fail(where, what,
                         f"It writes into its input {label} (an in-place update such as -=, *= or [...] =): work on "
                         f"a new array, the caller's arrays must not change {pointer(spec.section, spec.beyond)}")
    got, wrong_type, cause = _unpack(spec, outcome.result, case)
    if got is None:
        want = spec.outputs[0] if len(spec.outputs) == 1 else "(" + ", ".join(spec.outputs) + ")"
        cause = cause or (f"Return exactly what the contract says: {want}, NumPy arrays of the documented shapes "
                          f"and dtype")
        return _fail(where, wrong_type, f"{cause} {pointer(spec.section, spec.beyond)}")
    tol_dtype = case.dtype if case.dtype is not None else next(iter(got.values())).dtype
    bad = [name for name in spec.outputs if not close(got[name], case.expected[name], tol_dtype)]
    if not bad:
        return None
    name = bad[0]
    index = _worst(got[name], case.expected[name], tol_dtype)
    digits = 6
    while digits < 17 and _fmt(got[name][index], digits) == _fmt(case.expected[name][index], digits):
        digits += 3                                                    # enough digits to show the difference
    value = (f"{name}{_at(index)} is {_fmt(got[name][index], digits)} "
             f"but expected {_fmt(case.expected[name][index], digits)}")
    if spec.fd is not None:
        value += f" (central finite differences give {_fmt(spec.fd(case, name, index))})"
    if len(spec.outputs) > 1:
        right = [n for n in spec.outputs if n not in bad]
        value += f"; wrong: {', '.join(bad)}" + (f", right: {', '.join(right)}" if right else "")
    found = explain(got) if explain is not None else None
    if found is not None:                                              # the fault is in the learner's helper
        text, section = found
        return _fail(where, value, f"{text} {pointer(section, spec.beyond)}")
    args64 = as64(case.args)
    for mistake in spec.mistakes:
        if mistake.shows is not None and mistake.shows(got, case):
            return _fail(where, value, f"{mistake.text} {pointer(mistake.section, spec.beyond)}")
        if mistake.wrong is not None:
            wrong = mistake.wrong(*args64)
            if all(matches(got[n], w, tol_dtype) for n, w in wrong.items()):
                return _fail(where, value, f"{mistake.text} {pointer(mistake.section, spec.beyond)}")
    if spec.beyond:
        generic = (f"The gradient with respect to {', '.join(n[1:] for n in bad)} is wrong: derive it again from "
                   f"the forward, one step at a time")
    else:
        generic = "The values are wrong: check each step against the contract in the docstring"
    return _fail(where, value, f"{generic} {pointer(spec.section, spec.beyond)}")


def judge(spec: Spec, cases, outcomes, explain: Callable | None = None) -> Verdict:
    """The verdict on the learner's ``outcomes`` of ``cases``, in order: the first failure, or pass.
    ``explain(index, case, got)`` may name failing helpers. An exception the learner's code raised reaches
    the caller from ``outcomes`` (``wire.LearnerRaised`` when it came as data)."""
    for index, (case, outcome) in enumerate(zip(cases, outcomes, strict=True)):
        verdict = judge_case(spec, case, outcome,
                             None if explain is None else (lambda got, i=index, c=case: explain(i, c, got)))
        if verdict is not None:
            return verdict
    return Verdict("pass")


def make_case(spec_reference: Callable, args: tuple, dtype, note: str = "", tags=(), extra=None) -> Case:
    """A case whose inputs are ``args`` in ``dtype`` and whose expected outputs are
    ``spec_reference(*args)`` computed in float64 from exactly those inputs."""
    args = tuple(cast(a, dtype) for a in args) if dtype is not None else tuple(args)
    expected = spec_reference(*as64(args))
    if any(e.dtype not in (np.float64, bool) for e in expected.values()):
        raise TypeError("a reference must be float64 (or bool): the grader grades against float64")
    return Case(args, expected, np.dtype(dtype) if dtype is not None else None, note, frozenset(tags), extra or {})
