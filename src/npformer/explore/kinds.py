"""Token kinds from the explorer's own token labels (docs/EXPLORE_FORMAT.md, "token_kinds"), for the
training probe, whose labels come without kinds.

The labels follow the payload's conventions: ``<pad>`` (and ``[PAD]``) is padding, ``p(r,c)`` a patch,
``PICK`` and ``PLACE`` the tabletop policy's action tokens, ``<x>`` or ``[X]`` of more than one character
a special token; anything else is a word (a character of a character-level model, a word, a word piece).
"""
from __future__ import annotations

import re

_PATCH = re.compile(r"p\(\d+,\d+\)")
ACTIONS = ("PICK", "PLACE")


def label_kind(label: str) -> str:
    if label in ("<pad>", "[PAD]"):
        return "pad"
    if _PATCH.fullmatch(label):
        return "patch"
    if label in ACTIONS:
        return "action"
    if len(label) > 1 and ((label[0], label[-1]) in (("<", ">"), ("[", "]"))):
        return "special"
    return "word"


def label_kinds(labels: list[str]) -> list[str]:
    return [label_kind(t) for t in labels]
