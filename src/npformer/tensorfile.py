"""safetensors files, read and written in this one module: run directories' checkpoints and probes,
Hugging Face BERT-family and GPT-2 directories, and MiniLM all come through it. No other module of
npformer imports ``safetensors`` or parses the format (tests/test_tensorfile_only.py checks it).

    8 bytes    N, the header's length (unsigned little-endian)
    N bytes    the header: JSON {name: {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]},
               "__metadata__": {str: str}}, offsets counted from the end of the header
    the rest   the tensors' bytes

``read_header`` reads the 8 bytes and the header, at most MAX_HEADER_BYTES, with
``settings.parse_json``'s limits, and checks every entry (a known dtype, a shape of non-negative
ints, offsets that span exactly shape x item size) and the ranges together, as the safetensors
library does: sorted by their start, they follow one another with no gap and no overlap, from the
first byte of the data to the file's last. So the tensors' bytes add up to the file's size, and a
load takes memory in proportion to the file, whatever the header claims. A caller compares each
tensor's shape and dtype with what its config implies and refuses a file before any tensor's
memory is taken; ``read_tensors`` then reads the tensors named, and nothing more.

Errors are ``settings.FileFormatError``, one line naming the file; none quotes the file's bytes
(the header's length is not shown as a number), and a name or value from the header is quoted
with ``settings.quoted``.
"""
from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass

import numpy as np

from .settings import FileFormatError, parse_json, quoted, reading

MAX_HEADER_BYTES = 8 << 20      # MiniLM's header is 11 KB; 8 MiB names some 100,000 tensors
# safetensors dtype -> numpy dtype (None: no numpy dtype, e.g. bfloat16), and its item size in bytes
DTYPES = {"F64": ("<f8", 8), "F32": ("<f4", 4), "F16": ("<f2", 2), "BF16": (None, 2), "I64": ("<i8", 8),
          "I32": ("<i4", 4), "I16": ("<i2", 2), "I8": ("i1", 1), "U64": ("<u8", 8), "U32": ("<u4", 4),
          "U16": ("<u2", 2), "U8": ("u1", 1), "BOOL": ("?", 1)}


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of the header: its safetensors dtype, shape and byte range in the file."""
    dtype: str
    shape: tuple[int, ...]
    start: int                  # absolute offsets in the file
    end: int

    @property
    def size(self) -> int:
        return math.prod(self.shape)


def safetensors_bytes(tensors: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> bytes:
    """The safetensors file of ``tensors`` (name -> array) with ``metadata``, as bytes."""
    from safetensors.numpy import save
    # np.require keeps 0-d arrays 0-d (np.ascontiguousarray would make them 1-d)
    return save({k: np.require(v, requirements="C") for k, v in tensors.items()}, metadata=metadata)


def read_header(path) -> tuple[dict[str, TensorEntry], dict[str, str]]:
    """(tensors by name, metadata) of the safetensors file ``path``, read and checked from the
    header alone; a FileFormatError naming the file for anything malformed."""
    with open(path, "rb") as f:
        file_size = os.fstat(f.fileno()).st_size
        head = f.read(8)
        if len(head) < 8:
            raise FileFormatError(f"{path} is not a safetensors file: {len(head)} bytes, shorter than its "
                                  "8-byte header length")
        (n,) = struct.unpack("<Q", head)
        if n > MAX_HEADER_BYTES:                                       # n is the file's bytes: never shown
            raise FileFormatError(f"{path}: its first 8 bytes give a safetensors header longer than "
                                  f"{MAX_HEADER_BYTES:,} bytes, more than npformer reads")
        if 8 + n > file_size:
            raise FileFormatError(f"{path} is not a safetensors file: its first 8 bytes give a header length "
                                  f"past the end of the {file_size:,}-byte file (a truncated file?)")
        raw = f.read(n)
    header = parse_json(raw, path, top=dict)
    data_start, data_size = 8 + n, file_size - 8 - n
    with reading(path):
        meta = header.pop("__metadata__", None) or {}
        if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
            raise ValueError("its __metadata__ must map names to strings")
        entries = {name: _entry(name, e, data_start, data_size) for name, e in header.items()}
        _check_ranges(entries, data_start, file_size)
        return entries, meta


def _entry(name: str, e, data_start: int, data_size: int) -> TensorEntry:
    if not isinstance(e, dict):
        raise ValueError(f"tensor {quoted(name)}: its header entry is not an object")
    dtype, shape, offsets = e.get("dtype"), e.get("shape"), e.get("data_offsets")
    if dtype not in DTYPES:
        raise ValueError(f"tensor {quoted(name)}: dtype {quoted(dtype)} is not a safetensors dtype")
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        raise ValueError(f"tensor {quoted(name)}: shape {quoted(shape)} is not a list of non-negative ints")
    if (not isinstance(offsets, list) or len(offsets) != 2 or not all(type(o) is int for o in offsets)
            or not 0 <= offsets[0] <= offsets[1] <= data_size):
        raise ValueError(f"tensor {quoted(name)}: data_offsets {quoted(offsets)} are not a range inside the "
                         f"file's {data_size:,} bytes of data")
    if math.prod(shape) * DTYPES[dtype][1] != offsets[1] - offsets[0]:
        raise ValueError(f"tensor {quoted(name)}: shape {quoted(shape)} of {dtype} does not fill its "
                         f"data_offsets {quoted(offsets)}")
    return TensorEntry(dtype, tuple(shape), data_start + offsets[0], data_start + offsets[1])


def _check_ranges(entries: dict[str, TensorEntry], data_start: int, file_size: int) -> None:
    """ValueError unless the entries' byte ranges, sorted by start, tile [data_start, file_size):
    each begins where the one before ends (no overlap, no gap) and the last ends with the file."""
    at, before = data_start, None
    for start, end, name in sorted((e.start, e.end, name) for name, e in entries.items()):
        if start < at:
            raise ValueError(f"tensor {quoted(name)}'s data_offsets overlap those of {quoted(before)}; each "
                             "tensor has bytes of its own")
        if start > at:
            raise ValueError(f"the data section has {start - at:,} bytes no tensor's data_offsets cover, "
                             f"before tensor {quoted(name)}")
        at, before = end, name
    if at != file_size:
        raise ValueError(f"the data section has {file_size - at:,} bytes after the last tensor that no "
                         "tensor's data_offsets cover")


def read_tensors(path, entries: dict[str, TensorEntry]) -> dict[str, np.ndarray]:
    """The tensors ``entries`` (from ``read_header``) of the file ``path``, each read alone (its bytes,
    nothing more) into a numpy array of its shape."""
    out = {}
    with open(path, "rb") as f:
        for name, entry in entries.items():
            kind = DTYPES[entry.dtype][0]
            if kind is None:
                raise FileFormatError(f"{path}: tensor {quoted(name)} has dtype {entry.dtype}, which numpy "
                                      "cannot hold")
            f.seek(entry.start)
            data = f.read(entry.end - entry.start)
            if len(data) != entry.end - entry.start:           # the file shrank since its header was read
                raise FileFormatError(f"{path} ended inside tensor {quoted(name)} (did it change while it was "
                                      "read?)")
            out[name] = np.frombuffer(data, dtype=kind).reshape(entry.shape)
    return out
