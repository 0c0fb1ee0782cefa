"""What the grading child sends the parent, and how the parent reads it: plain data, never pickles.

A message is ``MAGIC``, the header's length (8 bytes, big-endian), a JSON header, then the raw bytes of its
arrays one after another. The header is ``{"record": ..., "arrays": [{"dtype", "shape"}, ...]}``; inside the
record an array stands as ``{"$array": i}``. ``decode`` refuses anything else (another magic, a length that
does not add up, a dtype outside ``DTYPES``, malformed JSON) with ``Garbled``; the parent then trusts
nothing more from that child.

The records, written by ``trial.py`` in the child and read here by the parent (each also carries the
``nonce`` of the parent's request it answers):

- ``{"kind": "case", "index": i, "result": ITEM, "inputs": [[[label, ITEM], ...], ...]}``: case ``i``'s
  result, and for each argument the arrays it holds after the call (``params['w_q']`` for a dict);
- ``{"kind": "raised", "index": i, "error": ERROR}``: case ``i`` raised; no case follows;
- ``{"kind": "missing"}``: there is no such function; ``{"kind": "built", "result": ITEM}``: a composition;
- ``{"kind": "end", "output": str}``: the request is answered; ``output`` is what the code printed;
- ``{"kind": "ready"}`` or ``{"kind": "load-error", "error": ERROR}``: the workbook was imported, or raised.

An ITEM describes one returned object: ``{"type": its type's name, "array": isinstance of np.ndarray,
"exact": exactly np.ndarray, "dtype", "shape", "data": np.array(x, subok=False) or null when its dtype is
not in ``DTYPES`` or it is over ``MAX_ARRAY_BYTES``, "length": len of a tuple or list, "items": a tuple's
ITEMs}``. An ERROR is ``{"type": the exception's name as a traceback prints it, "todo": whether it is a
NotImplementedError, "message": str(e), at most ``MAX_MESSAGE_CHARS``, "frames": [FRAME, ...],
"omitted": frames left out in the middle}`` and a FRAME, one of the learner's own frames, outermost
first, is ``{"file", "line", "function", "source": the line's text, "arguments": {name: [shape, dtype]}}``
with the frame's array arguments as they were when it raised.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np

MAGIC = b"npformer-learn/1\n"
MAX_MESSAGE_BYTES = 64 << 20        # one record: a case's outputs and inputs are a few kilobytes
MAX_ARRAY_BYTES = 8 << 20           # a larger array goes without its data (the exercises' arrays are small)
MAX_MESSAGE_CHARS = 4000            # an exception's message
MAX_TEXT_CHARS = 200                # a type's, a dtype's, a file's or a label's name
MAX_ITEMS = 16                      # a returned tuple's items described
MAX_FRAMES = 40                     # the learner's frames kept: the first and the last 20
DTYPES = {np.dtype(t).name: np.dtype(t) for t in (
    bool, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, np.float32, np.float64, np.complex64, np.complex128)}


class ChannelBroken(Exception):
    """The child can no longer be trusted or reached; its message is the row's."""


class Garbled(ChannelBroken):
    """The child sent something that is not an answer to the parent's request."""


class Missing(Exception):
    """There is no function of that name."""


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    function: str
    source: str
    arguments: dict          # name -> (shape, dtype name)


@dataclass(frozen=True)
class LearnerError:
    """An exception the learner's code raised, as plain data."""
    type: str
    todo: bool
    message: str
    frames: tuple[Frame, ...]
    omitted: int = 0

    def text(self, intro: str) -> str:
        """As a traceback prints it: ``intro``, the learner's frames, then ``Type: message``."""
        lines = [f"{intro}:"] if not self.frames else [f"{intro} (your code's frames):"]
        for i, f in enumerate(self.frames):
            if self.omitted and i == len(self.frames) // 2:
                lines.append(f"  ... ({self.omitted} more frames)")
            lines.append(f'  File "{f.file}", line {f.line}, in {f.function}')
            if f.source:
                lines.append(f"    {f.source}")
        lines.append(f"{self.type}: {self.message}" if self.message else self.type)
        text = "\n".join(lines)
        return text if len(text) <= MAX_MESSAGE_CHARS else text[:MAX_MESSAGE_CHARS] + " ..."


class LearnerRaised(Exception):
    """The learner's code raised; ``error`` says what, as data, and ``index`` on which case (None: unknown)."""

    def __init__(self, error: LearnerError, index: int | None = None):
        super().__init__(error.type)
        self.error, self.index = error, index


@dataclass(frozen=True)
class Item:
    """One returned object as the parent reads it (see the module's docstring)."""
    type: str
    is_array: bool
    exact: bool
    dtype: str
    shape: tuple
    data: np.ndarray | None
    length: int | None
    items: tuple | None


@dataclass(frozen=True)
class Outcome:
    """One case: what the function returned, and each argument's arrays after the call, by label."""
    result: Item
    inputs: tuple[dict, ...]


# ---------------------------------------------------------------------------------------------- bytes

def encode(record: dict) -> bytes:
    """One message: the record with its arrays as raw bytes."""
    arrays: list[np.ndarray] = []

    def walk(x):
        if isinstance(x, np.ndarray):
            arrays.append(np.ascontiguousarray(x))
            return {"$array": len(arrays) - 1}
        if isinstance(x, dict):
            return {str(k): walk(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [walk(v) for v in x]
        return x

    header = json.dumps({"record": walk(record),
                         "arrays": [{"dtype": a.dtype.name, "shape": list(a.shape)} for a in arrays]}).encode()
    return MAGIC + len(header).to_bytes(8, "big") + header + b"".join(a.tobytes() for a in arrays)


def decode(data: bytes) -> dict:
    """The record of one message, its arrays fresh plain ndarrays; ``Garbled`` for anything else."""
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + 8:
        raise Garbled("a message that is not the grader's")
    start = len(MAGIC) + 8
    end = start + int.from_bytes(data[len(MAGIC):start], "big")
    try:
        header = json.loads(data[start:end].decode())
    except (ValueError, RecursionError):
        raise Garbled("a message whose header is not JSON") from None
    if not isinstance(header, dict) or set(header) != {"record", "arrays"} or not isinstance(header["arrays"], list):
        raise Garbled("a message without the grader's header")
    arrays, offset = [], end
    for spec in header["arrays"]:
        dtype, shape = _array_spec(spec)
        size = math.prod(shape) * dtype.itemsize
        if offset + size > len(data):
            raise Garbled("a message shorter than its arrays")
        arrays.append(np.frombuffer(data, dtype, math.prod(shape), offset).reshape(shape).copy())
        offset += size
    if offset != len(data):
        raise Garbled("a message longer than its arrays")

    def walk(x):
        if isinstance(x, dict):
            if set(x) == {"$array"}:
                i = x["$array"]
                if type(i) is not int or not 0 <= i < len(arrays):
                    raise Garbled("a message that names an array it does not hold")
                return arrays[i]
            return {k: walk(v) for k, v in x.items()}
        if isinstance(x, list):
            return [walk(v) for v in x]
        return x

    record = walk(header["record"])
    if not isinstance(record, dict):
        raise Garbled("a message that holds no record")
    return record


def _array_spec(spec) -> tuple[np.dtype, tuple[int, ...]]:
    if not isinstance(spec, dict) or spec.get("dtype") not in DTYPES or not isinstance(spec.get("shape"), list):
        raise Garbled("a message with an array the grader does not read")
    shape = spec["shape"]
    if len(shape) > 32 or not all(type(n) is int and 0 <= n <= MAX_MESSAGE_BYTES for n in shape):
        raise Garbled("a message with an array of an impossible shape")
    return DTYPES[spec["dtype"]], tuple(shape)


# ---------------------------------------------------------------------------------------------- records

def _need(ok: bool, what: str) -> None:
    if not ok:
        raise Garbled(f"a record with {what}")


def _text(x, what: str, limit: int = MAX_TEXT_CHARS) -> str:
    _need(isinstance(x, str), f"a {what} that is not text")
    return x[:limit]


def _int(x, what: str) -> int:
    _need(type(x) is int and x >= 0, f"a {what} that is not a count")
    return x


def _shape(x, what: str) -> tuple[int, ...]:
    _need(isinstance(x, list) and len(x) <= 32, f"a {what} that is not a shape")
    return tuple(_int(n, what) for n in x)


def parse_item(x, depth: int = 0) -> Item:
    _need(isinstance(x, dict), "an output that is not described")
    is_array, exact = x.get("array"), x.get("exact")
    _need(type(is_array) is bool and type(exact) is bool, "an output whose kind is not said")
    data = x.get("data")
    _need(data is None or isinstance(data, np.ndarray), "an output whose data is not an array")
    dtype, shape = "", tuple[int, ...]()
    if is_array:
        dtype, shape = _text(x.get("dtype"), "dtype"), _shape(x.get("shape"), "shape")
        _need(data is None or (data.dtype.name == dtype and data.shape == shape), "data unlike its dtype and shape")
    length = x.get("length")
    _need(length is None or (type(length) is int and length >= 0), "a length that is not a count")
    items = x.get("items")
    if items is not None:
        _need(depth == 0 and isinstance(items, list) and len(items) == min(length or 0, MAX_ITEMS),
              "items unlike the tuple's length")
        items = tuple(parse_item(i, 1) for i in items)
    return Item(_text(x.get("type"), "type name"), is_array, exact and is_array, dtype, shape, data, length, items)


def parse_case(record: dict) -> Outcome:
    inputs = record.get("inputs")
    if not isinstance(inputs, list) or len(inputs) > 32:
        raise Garbled("a record with inputs that are not listed")
    after = []
    for arrays in inputs:
        _need(isinstance(arrays, list), "inputs that are not listed")
        labelled = {}
        for pair in arrays:
            _need(isinstance(pair, list) and len(pair) == 2, "an input that is not (label, array)")
            labelled[_text(pair[0], "label")] = parse_item(pair[1], 1)
        after.append(labelled)
    return Outcome(parse_item(record.get("result")), tuple(after))


def parse_error(x) -> LearnerError:
    _need(isinstance(x, dict) and isinstance(x.get("frames"), list), "an exception without its frames")
    _need(type(x.get("todo")) is bool, "an exception that does not say whether it is the stub's")
    frames = []
    for f in x["frames"][:MAX_FRAMES]:
        _need(isinstance(f, dict) and isinstance(f.get("arguments"), dict), "a frame that is not described")
        arguments = {}
        for name, value in list(f["arguments"].items())[:32]:
            _need(isinstance(value, list) and len(value) == 2, "an argument that is not (shape, dtype)")
            arguments[name[:MAX_TEXT_CHARS]] = (_shape(value[0], "shape"), _text(value[1], "dtype"))
        frames.append(Frame(_text(f.get("file"), "file name", 4096), _int(f.get("line"), "line number"),
                            _text(f.get("function"), "function name"),
                            _text(f.get("source"), "source line", 1000), arguments))
    return LearnerError(_text(x.get("type"), "exception type"), x["todo"],
                        _text(x.get("message"), "message", MAX_MESSAGE_CHARS), tuple(frames),
                        _int(x.get("omitted", 0), "count of frames"))
