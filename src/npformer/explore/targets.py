"""Which outputs the explorer page explains: the prediction and its top alternatives at each output
position, and any other one the user chooses with ``--target POS=TOKEN`` (or the --serve form's
``target`` field).

    POS     a 0-based output position (dates, copy: the output token; text: the prompt position whose
            next character is predicted), or ``pick``, ``place`` (tabletop) or ``cls`` (digits)
    TOKEN   the token's text or id (a character), or the cell or class number

A TOKEN that is a token's text means that token, even when it reads as a number: ``5=1`` is the
character '1' at output position 5 in a dates run, where '1' is a character. An integer that is
no token's text is an id. ``choose`` orders the targets: the chosen one first, then per position the
prediction and the next ``TOP - 1`` by logit.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace

import numpy as np

TOP = 5                                 # targets per output position: the prediction and 4 alternatives
MAX_SPEC = 200                          # characters of a POS=TOKEN text
NAMED_POSITIONS = ("pick", "place", "cls")
USAGE = ("POS=TOKEN, POS a 0-based output position or pick, place or cls, TOKEN the token's text or id, "
         "or the cell or class number")
_INT = re.compile(r"[0-9]{1,9}")
# the --serve form's field (docs/EXPLORE_FORMAT.md, "Serve"); optional: left empty, the targets are the defaults
FIELD = {"name": "target", "label": "target POS=TOKEN", "kind": "text", "default": "", "optional": True}


class TargetError(ValueError):
    """A target that is not POS=TOKEN, or names a position or token this model does not have; the message
    starts with "target" so the command line can say "--target ..."."""


@dataclass(frozen=True)
class Target:
    slot: int                           # the output position: an index into the explorer's positions
    id: int                             # the token id, class or cell
    rank: int                           # 0: the model's prediction there; then 1, 2, ... by logit
    chosen: bool = False                # given by --target (or the form's target field)


def split_target(spec) -> tuple[str, str]:
    """"POS=TOKEN" -> (POS, TOKEN), POS lower-cased; TargetError unless it has that form."""
    if not isinstance(spec, str) or len(spec) > MAX_SPEC or "=" not in spec:
        shown = repr(spec[:40]) if isinstance(spec, str) else type(spec).__name__
        raise TargetError(f"target must be {USAGE}; got {shown}")
    pos, token = spec.split("=", 1)
    pos = pos.strip().lower()
    if not token or not (_INT.fullmatch(pos) or pos in NAMED_POSITIONS):
        raise TargetError(f"target must be {USAGE}; got {spec[:40]!r}")
    return pos, token


def resolve(spec, positions: int | dict[str, int], tokens: dict[str, int], n_ids: int, what: str) -> tuple[int, int]:
    """(slot, id) of a POS=TOKEN text. ``positions``: how many numbered output positions there are, or the
    names this model's positions have ({"pick": 0, "place": 1}); ``tokens``: text -> id (empty when TOKEN
    is a number only); ``what``: the word for a TOKEN ("token", "cell", "class")."""
    pos, token = split_target(spec)
    if isinstance(positions, dict):
        if pos not in positions:
            raise TargetError(f"target {spec[:40]!r}: POS must be {' or '.join(positions)} for this model, got {pos!r}")
        slot = positions[pos]
    else:
        if not _INT.fullmatch(pos):
            raise TargetError(f"target {spec[:40]!r}: POS must be a 0-based output position for this model, "
                              f"not {pos!r}")
        slot = int(pos)
        if slot >= positions:
            raise TargetError(f"target {spec[:40]!r}: position {slot} is past the output's {positions} "
                              f"positions (0..{positions - 1})")
    if token in tokens:
        return slot, tokens[token]
    if _INT.fullmatch(token.strip()) and int(token) < n_ids:
        return slot, int(token)
    named = "the token's text or an id" if tokens else f"a {what} number"
    raise TargetError(f"target {spec[:40]!r}: TOKEN must be {named} in 0..{n_ids - 1}, got {token[:20]!r}")


def choose(logits: np.ndarray, predicted, chosen: tuple[int, int] | None = None,
           extra: tuple[tuple[int, int], ...] = (), top: int = TOP, slots=None) -> list[Target]:
    """logits (P, V) at the P output positions, ``predicted`` (P,) the model's output there -> the targets:
    ``chosen`` first (when given), then per position of ``slots`` (default: all) the prediction and the
    ``top - 1`` others with the highest logits, then ``extra`` (slot, id) pairs not yet in the list."""
    logits = np.asarray(logits, dtype=np.float64)
    order = np.argsort(-logits, axis=-1, kind="stable")                # (P, V)
    out = []
    for p in range(len(logits)) if slots is None else slots:
        pred = int(predicted[p])
        others = [int(c) for c in order[p, :top] if int(c) != pred][:top - 1]
        out += [Target(p, pred, 0)] + [Target(p, c, _rank(logits[p], c, pred)) for c in others]
    for p, c in extra:
        if not any((t.slot, t.id) == (p, c) for t in out):
            out.append(Target(p, c, _rank(logits[p], c, int(predicted[p]))))
    if chosen is not None:
        same = [t for t in out if (t.slot, t.id) == chosen]
        out = [t for t in out if (t.slot, t.id) != chosen]
        p, c = chosen
        first = same[0] if same else Target(p, c, _rank(logits[p], c, int(predicted[p])))
        out.insert(0, replace(first, chosen=True))
    return out


def _rank(row: np.ndarray, c: int, pred: int) -> int:
    """c's place after the prediction (rank 0): 1 + how many other ids have a higher logit than c's."""
    if c == pred:
        return 0
    higher = row > row[c]                                               # (V,)
    higher[pred] = False
    return 1 + int(higher.sum())


def suffix(t: Target) -> str:
    """What a target's name adds after its position and token: "(chosen)", "(alternative 2)",
    "(chosen, rank 17)" (rank 0: the prediction), or nothing."""
    ranked = [] if not t.rank else [f"alternative {t.rank}" if t.rank < TOP else f"rank {t.rank}"]
    words = (["chosen"] if t.chosen else []) + ranked
    return f" ({', '.join(words)})" if words else ""
