"""Dataclass settings from JSON and from ``key=value`` strings, with type checks.

The command line's ``--set key=value`` reaches three dataclasses: the model config
("model"), the training config ("train") and the task's data settings ("data").
A key is either ``section.field`` or a bare ``field`` that only one section has.
"""
from __future__ import annotations

import dataclasses
import types
import typing


def field_types(cls) -> dict[str, object]:
    """field name -> resolved type annotation of the dataclass ``cls``."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints.get(f.name, str) for f in dataclasses.fields(cls)}


def _parse_bool(text: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError


def parse_value(text: str, typ, name: str):
    """Convert the string ``text`` to ``typ`` (int, float, bool, str, X | None); ValueError names ``name``."""
    options = typing.get_args(typ) if typing.get_origin(typ) in (typing.Union, types.UnionType) else (typ,)
    if type(None) in options and text.strip().lower() in ("none", "null"):
        return None
    want = [t for t in options if t is not type(None)]
    for t in want:
        try:
            if t is bool:
                return _parse_bool(text)
            if t is int:
                return int(text)
            if t is float:
                return float(text)
            if t is str:
                return text
        except ValueError:
            continue
    names = " or ".join(getattr(t, "__name__", str(t)) for t in options)
    raise ValueError(f"{name} expects {names}, got {text!r}")


def check_value(value, typ, name: str):
    """Check a JSON value against ``typ`` (ints are accepted where floats are expected)."""
    options = typing.get_args(typ) if typing.get_origin(typ) in (typing.Union, types.UnionType) else (typ,)
    for t in options:
        if t is type(None) and value is None:
            return value
        if t is bool and isinstance(value, bool):
            return value
        if t is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if t is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if t is str and isinstance(value, str):
            return value
        if t not in (type(None), bool, int, float, str):
            return value                                                 # not a JSON scalar type: trust it
    names = " or ".join(getattr(t, "__name__", str(t)) for t in options)
    raise TypeError(f"{name} must be {names}, got {value!r}")


def from_dict(cls, d: dict, what: str = ""):
    """Build the dataclass ``cls`` from a dict, rejecting unknown keys and checking types."""
    what = what or cls.__name__
    if not isinstance(d, dict):
        raise TypeError(f"{what} must be a JSON object, got {type(d).__name__}")
    types_ = field_types(cls)
    unknown = sorted(set(d) - set(types_))
    if unknown:
        raise ValueError(f"{what} has no setting {unknown[0]!r}; known: {', '.join(sorted(types_))}")
    return cls(**{k: check_value(v, types_[k], f"{what}.{k}") for k, v in d.items()})


def parse_overrides(pairs: list[str], sections: dict[str, type]) -> dict[str, dict]:
    """["d_model=128", "train.lr=0.001"] -> {"model": {"d_model": 128}, "train": {"lr": 0.001}, ...}.

    sections: section name -> dataclass. A bare key must belong to exactly one section."""
    out: dict[str, dict] = {s: {} for s in sections}
    types_ = {s: field_types(c) for s, c in sections.items()}
    for pair in pairs:
        if "=" not in pair:
            raise ValueError(f"--set expects key=value, got {pair!r}")
        key, text = pair.split("=", 1)
        key = key.strip()
        if "." in key and key.split(".", 1)[0] in sections:
            sec, field = key.split(".", 1)
            if field not in types_[sec]:
                raise ValueError(f"unknown setting {key!r}; {sec} settings: {', '.join(sorted(types_[sec]))}")
        else:
            owners = [s for s in sections if key in types_[s]]
            if not owners:
                known = ", ".join(f"{s}.{f}" for s in sections for f in sorted(types_[s]))
                raise ValueError(f"unknown setting {key!r}; known: {known}")
            if len(owners) > 1:
                raise ValueError(f"setting {key!r} is ambiguous: write one of "
                                 + ", ".join(f"{s}.{key}" for s in owners))
            sec, field = owners[0], key
        out[sec][field] = parse_value(text, types_[sec][field], key)
    return out
