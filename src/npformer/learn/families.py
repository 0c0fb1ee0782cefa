"""The grader's known mistakes by family: the kind of slip each one is, and where it can occur.

Every ``Mistake`` of every exercise names its family (``Mistake.family``); ``table()`` gathers them, family
by family, in the lesson's order, and ``markdown()`` writes the page ``docs/learn-mistakes.md`` (a test
keeps the two equal, and another that a learner's code making each mistake gets its diagnosis)."""
from __future__ import annotations

FAMILIES = {
    "wrong axis": "a reduction, a softmax or a transpose over another axis than the contract's",
    "wrong operand": "the right operation on the wrong array or size (k for v, E for E/H)",
    "off by one": "an index, a count or a position one too far or too short",
    "missing term": "a term, a step or an argument left out (the scale, a bias, the mask, gamma and beta)",
    "doubled term": "a step done twice (a second ReLU, the scale applied twice)",
    "swapped": "two things exchanged: arguments, sin and cos, True and False, rows and columns, a sign",
    "wrong constant": "another number where the contract fixes one (the base, the fill value of the mask)",
    "step order": "the right steps in another order (normalise before the residual, mask after the softmax)",
    "layout": "the right numbers in the wrong places (heads interleaved, sines and cosines in halves)",
    "numerics": "right on paper, wrong in floating point (overflow, 0 / 0 on an empty row)",
}


def table() -> list[tuple[str, str, str]]:
    """(family, exercise, diagnosis) for every known mistake, by family, then in the lesson's order."""
    from .exercises import EXERCISES
    rows = [(m.family, name, m.text) for name, ex in EXERCISES.items() for m in ex.spec.mistakes]
    order = list(FAMILIES)
    return sorted(rows, key=lambda r: order.index(r[0]))          # stable: the lesson's order within a family


def markdown() -> str:
    """The page ``docs/learn-mistakes.md``."""
    lines = ["# The mistakes the grader names", "",
             "`npformer learn check DIR` names a mistake only when the learner's numbers are the numbers of that "
             "mistake, computed by the grader on the same input (`src/npformer/learn/specs_attention.py`, "
             "`specs_block.py`). Every other wrong answer gets \"The values are wrong\" with the first value "
             "that differs. The mistakes come in families; this table, generated from the grader "
             "(`npformer.learn.families.markdown()`), lists each family's variant in every exercise.", ""]
    for family, what in FAMILIES.items():
        lines += [f"## {family[0].upper()}{family[1:]}", "", f"{what[0].upper()}{what[1:]}.", "",
                  "| exercise | diagnosis |", "|---|---|"]
        lines += [f"| `{name}` | {text.replace('|', '/')} |" for fam, name, text in table() if fam == family]
        lines.append("")
    return "\n".join(lines)
