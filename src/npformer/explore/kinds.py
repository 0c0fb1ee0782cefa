"""Token kinds from the explorer's own token labels (docs/EXPLORE_FORMAT.md, "token_kinds"), for the
training probe, whose labels come without kinds.

The labels follow the payload's conventions: ``<pad>`` (and ``[PAD]``) is padding, ``p(r,c)`` a patch,
``PICK`` and ``PLACE`` the tabletop policy's action tokens, ``act:NAME`` an action token of a policy that
acts in tokens (``models/action_lm.py``: ``act:BOS``, ``act:dx=3``, ``act:close``; made by ``action_label``),
``<x>`` or ``[X]`` of more than one character a special token; anything else is a word (a character of a
character-level model, a word, a word piece).
"""
from __future__ import annotations

import re

_PATCH = re.compile(r"p\(\d+,\d+\)")
ACTIONS = ("PICK", "PLACE")
ACTION_PREFIX = "act:"                  # an action token's label: act:BOS, then what each token says


def action_label(name: str) -> str:
    """The label of an action token that says ``name`` (no spaces), e.g. "BOS", "dx=3", "close"."""
    if not name or any(ch.isspace() for ch in name):
        raise ValueError(f"an action token's name must be one word without spaces, got {name!r}")
    return ACTION_PREFIX + name


def label_kind(label: str) -> str:
    if label in ("<pad>", "[PAD]"):
        return "pad"
    if _PATCH.fullmatch(label):
        return "patch"
    if label in ACTIONS or (label.startswith(ACTION_PREFIX) and len(label) > len(ACTION_PREFIX)):
        return "action"
    if len(label) > 1 and ((label[0], label[-1]) in (("<", ">"), ("[", "]"))):
        return "special"
    return "word"


def label_kinds(labels: list[str]) -> list[str]:
    return [label_kind(t) for t in labels]
