"""Dataclass settings from JSON and from ``key=value`` strings, with type checks; and the one
JSON reader of every file npformer reads.

The command line's ``--set key=value`` reaches three dataclasses: the model config
("model"), the training config ("train") and the task's data settings ("data").
A key is either ``section.field`` or a bare ``field`` that only one section has.

Every file comes from someone else. ``read_json`` reads a JSON file with limits: its size, its
nesting depth (checked before parsing, so no recursion error), the characters of a number, and no
NaN or Infinity unless the caller asks for them. ``reading(path)`` wraps a loader's parsing: an
exception a malformed file can cause (KeyError, IndexError, RecursionError, MemoryError, ...) becomes
a ``FileFormatError`` whose one-line message names the file; the command line prints it and exits 2.
``check_links(directory)`` refuses a model directory (a run's, a Hugging Face one) holding a link
that leads outside it, and ``quoted(value)`` is how every error quotes a value read from a file: at
most 64 characters of it. No error quotes the bytes of a file that failed to parse.

A leaf module: the standard library only.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import reprlib
import struct
import types
import typing
import zipfile
from pathlib import Path


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
    raise TypeError(f"{name} must be {names}, got {quoted(value)}")


def from_dict(cls, d: dict, what: str = ""):
    """Build the dataclass ``cls`` from a dict, rejecting unknown keys and checking types."""
    what = what or cls.__name__
    if not isinstance(d, dict):
        raise TypeError(f"{what} must be a JSON object, got {type(d).__name__}")
    types_ = field_types(cls)
    unknown = sorted(set(d) - set(types_))
    if unknown:
        raise ValueError(f"{what} has no setting {quoted(unknown[0])}; known: {', '.join(sorted(types_))}")
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


# -- reading files that someone else wrote -------------------------------------------------------

MAX_JSON_BYTES = 1 << 20        # a JSON file npformer reads: configs are a few KB (tokenizer.json: its own)
MAX_JSON_DEPTH = 64             # nested arrays and objects; npformer's own files nest 4 deep at most
MAX_NUMBER_CHARS = 64           # characters of one number literal: a 128-bit generator state (39 digits) fits
MAX_MESSAGE_CHARS = 300         # a FileFormatError's message is cut to this
MAX_QUOTED_CHARS = 64           # of one value read from a file, an error message quotes at most this

_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother, _REPR.maxlong = 2, MAX_QUOTED_CHARS, MAX_QUOTED_CHARS, MAX_QUOTED_CHARS
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 4


def quoted(value) -> str:
    """``repr(value)`` for an error message, at most MAX_QUOTED_CHARS characters ("..." marks a cut):
    the one way a message quotes a value read from a file (a name, a string, a number, a list), so
    a file's content reaches the screen a few dozen characters at a time at most. Computed without
    building the whole repr (a list of a million items costs no more than four)."""
    text = _REPR.repr(value)
    return text if len(text) <= MAX_QUOTED_CHARS else text[:MAX_QUOTED_CHARS - 3] + "..."


_LEADING_TEXT = re.compile(r"[^'\"]*")         # a message's text before its first quote


def _cut_literal(text: str) -> str:
    """Python's own errors end with the value they quote ("invalid literal for int() with base 10:
    '...'", "could not convert string to float: '...'", a KeyError's key): ``text`` with such a
    quoted tail, one that follows ": " or starts the message, cut to MAX_QUOTED_CHARS characters."""
    head = _LEADING_TEXT.match(text).group()                          # type: ignore[union-attr]  # always matches
    tail = text[len(head):]
    if len(tail) <= MAX_QUOTED_CHARS or not (head == "" or head.endswith(": ")):
        return text
    return head + tail[:MAX_QUOTED_CHARS - 3] + "..."


class FileFormatError(ValueError):
    """A file's content is not what npformer reads: a one-line message that names the file."""

    def __init__(self, message: str) -> None:
        line = (message.strip().splitlines() or [""])[0]
        super().__init__(line if len(line) <= MAX_MESSAGE_CHARS else line[:MAX_MESSAGE_CHARS - 3] + "...")


# What a malformed file can make parsing code raise. OSError is not here: the OS's errors name their file.
_MALFORMED = (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError, MemoryError,
              OverflowError, EOFError, struct.error, zipfile.BadZipFile)


def _why(e: BaseException) -> str:
    if isinstance(e, UnicodeDecodeError):
        return f"is not UTF-8 text ({e.reason} at byte {e.start})"
    if isinstance(e, json.JSONDecodeError):
        return f"is not valid JSON ({e.msg}: line {e.lineno} column {e.colno})"
    if isinstance(e, RecursionError):
        return "is nested too deeply to read"
    if isinstance(e, MemoryError):
        return "needs more memory than there is to read"
    text = _cut_literal((str(e).strip().splitlines() or [""])[0])    # Python's own errors quote values
    if isinstance(e, (ValueError, TypeError)) and text:                # a loader's own check, or a type's
        return text
    return f"is malformed ({type(e).__name__}{': ' + text if text else ''})"


@contextlib.contextmanager
def reading(path):
    """Within the block, the code that parses ``path``: an exception that a malformed file can cause
    becomes a FileFormatError naming ``path`` (a message that names it already is kept as it is).
    Wrap the parsing only, never code that does not read the file: a bug there stays a traceback."""
    try:
        yield
    except FileFormatError:
        raise
    except _MALFORMED as e:
        why = _why(e)
        raise FileFormatError(why if str(path) in why else f"{path}: {why}") from None


_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?')      # a JSON string, to its end if unterminated: linear
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_JSON_OUTSIDE_STRINGS = dict.fromkeys(map(ord, " \t\r\n,:0123456789+-.eEtruefalsn"))  # deleted at C speed


def _check_depth(text: str, max_depth: int) -> None:
    """ValueError when ``text`` nests arrays and objects deeper than ``max_depth``, found without
    recursion: outside strings, keep the brackets alone, then remove the innermost pairs (one level
    a round) until none is left. Unbalanced brackets that are not too deep are left to the parser."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text).translate(_JSON_OUTSIDE_STRINGS))
    for _ in range(max_depth):
        if not brackets:
            return
        brackets = brackets.replace("[]", "").replace("{}", "")
    if len(brackets) > max_depth or "[]" in brackets or "{}" in brackets:
        raise ValueError(f"nests arrays and objects deeper than {max_depth} levels")


def _number(parse, finite: bool):
    """A json.loads hook that parses a number literal of at most MAX_NUMBER_CHARS characters, and,
    when ``finite``, refuses one that overflows a float (1e999 would be read as inf)."""
    def checked(literal: str):
        if len(literal) > MAX_NUMBER_CHARS:
            raise ValueError(f"holds a number of {len(literal):,} characters (at most {MAX_NUMBER_CHARS})")
        value = parse(literal)
        if finite and value in (float("inf"), float("-inf")):
            raise ValueError(f"holds a number too large for a float: {literal}")
        return value
    return checked


_PARSE_INT, _PARSE_FLOAT, _PARSE_ANY_FLOAT = _number(int, False), _number(float, True), _number(float, False)


def _no_constant(name: str):
    raise ValueError(f"holds {name}, which is not a number npformer reads here")


def parse_json(data: bytes | str, path, top: type | None = None, allow_nonfinite: bool = False,
               max_depth: int = MAX_JSON_DEPTH):
    """The JSON value of ``data`` (bytes are UTF-8), read from ``path`` (named in every error):
    a FileFormatError when it is not valid JSON, nests deeper than ``max_depth``, holds a number
    longer than MAX_NUMBER_CHARS or beyond float range, NaN or Infinity (unless ``allow_nonfinite``),
    or is not a ``top`` (dict or list) when given."""
    with reading(path):
        text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
        _check_depth(text, max_depth)
        value = json.loads(text, parse_int=_PARSE_INT,
                           parse_float=_PARSE_ANY_FLOAT if allow_nonfinite else _PARSE_FLOAT,
                           parse_constant=float if allow_nonfinite else _no_constant)
    if top is not None and not isinstance(value, top):
        raise FileFormatError(f"{path} must hold {_JSON_KINDS[top]}, not {_JSON_KINDS[type(value)]}")
    return value


_JSON_KINDS = {dict: "a JSON object", list: "a JSON array", str: "a string", bool: "true or false", int: "a number",
               float: "a number", type(None): "null"}


def read_bounded(path, max_bytes: int) -> bytes:
    """The bytes of the file ``path``, or a FileFormatError when it holds more than ``max_bytes``
    (read no further than that: a huge file, or /dev/zero, costs no more)."""
    with open(path, "rb") as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise FileFormatError(f"{path} is larger than {max_bytes:,} bytes, more than npformer reads there")
    return data


def read_json(path, top: type | None = None, allow_nonfinite: bool = False,
              max_bytes: int = MAX_JSON_BYTES):
    """The JSON value of the file ``path``, read with limits (``parse_json``'s, and at most
    ``max_bytes``); every error is one line naming the file, a FileFormatError or the OS's OSError."""
    return parse_json(read_bounded(path, max_bytes), path, top, allow_nonfinite)


# -- links inside a model directory ---------------------------------------------------------------

MAX_LINK_SCAN = 10_000          # entries of a model directory's sub-folders looked at (its own: all)
MAX_LINK_DEPTH = 3              # sub-folder levels looked into (a pooling config is one level down)


def _homes(root: Path) -> tuple[Path, ...]:
    """Where links inside the (resolved) directory ``root`` may point: into ``root`` itself, and, for a
    snapshot of Hugging Face's cache (``models--ORG--NAME/snapshots/REV``), into the same repository's
    ``blobs`` folder, where the cache keeps the files its snapshots link to."""
    if root.parent.name == "snapshots" and root.parent.parent.name.startswith("models--"):
        return root, root.parent.parent / "blobs"
    return (root,)


def _refuse_link(link: Path) -> FileFormatError:
    return FileFormatError(f"{link} is a link that leads outside its model directory, and npformer reads only "
                           "files inside it: copy the directory with its links resolved (cp -rL DIR COPY) "
                           "and use the copy")


def check_inside(directory, path) -> None:
    """A FileFormatError unless ``path`` (inside ``directory``) resolves inside ``directory`` (or, for a
    Hugging Face cache snapshot, its repository's blobs): a file link or a folder link on the way to it
    that leads outside is refused with one line naming ``path``."""
    homes = _homes(Path(directory).resolve())
    try:
        target = Path(path).resolve()
    except (OSError, RuntimeError):                                    # a loop of links
        raise _refuse_link(Path(path)) from None
    if not any(target == home or target.is_relative_to(home) for home in homes):
        raise _refuse_link(Path(path))


def check_links(directory) -> None:
    """Refuse a model directory (a run directory, a Hugging Face directory) that holds a link leading
    outside it: every entry of the directory itself, and of its sub-folders (MAX_LINK_DEPTH levels, at
    most MAX_LINK_SCAN entries), that is a symbolic link must resolve inside it (``check_inside``).
    So a model.safetensors or merges.txt linked to /etc/passwd, or a folder linked to $HOME, is one
    line naming the link, never read. The directory itself may be reached through a link."""
    directory = Path(directory)
    homes = _homes(directory.resolve())
    level, depth, seen = [directory], 0, 0
    while level and depth <= MAX_LINK_DEPTH:
        deeper = []
        for folder in level:
            try:
                entries = list(os.scandir(folder))
            except OSError:                                             # unreadable: its readers will say so
                continue
            for entry in entries:
                if depth > 0:
                    seen += 1
                    if seen > MAX_LINK_SCAN:
                        return
                path = Path(entry.path)
                if entry.is_symlink():
                    try:
                        target = path.resolve()
                    except (OSError, RuntimeError):                    # a loop of links leads nowhere inside
                        raise _refuse_link(path) from None
                    if not any(target == home or target.is_relative_to(home) for home in homes):
                        raise _refuse_link(path)
                elif entry.is_dir(follow_symlinks=False):
                    deeper.append(path)
        level, depth = deeper, depth + 1
