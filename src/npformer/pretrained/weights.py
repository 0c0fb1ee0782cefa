"""A safetensors file read by npformer's own code: the header alone first, with limits, then only
the tensors asked for, each checked against the header before it is read.

    8 bytes    N, the header's length (unsigned little-endian)
    N bytes    the header: JSON {name: {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]},
               "__metadata__": {str: str}}, offsets counted from the end of the header
    the rest   the tensors' bytes

``read_header`` reads the 8 bytes and the header, at most MAX_HEADER_BYTES, with
``settings.parse_json``'s limits, and checks every entry (a known dtype, a shape of non-negative
ints, offsets inside the file that span exactly shape x item size) before anything else is read.
So a caller compares each tensor's shape and dtype with what its config implies and refuses a file
before any tensor's memory is taken; ``read_tensors`` then reads the tensors named, and nothing more.
"""
from __future__ import annotations

import math
import os
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from ..settings import FileFormatError, parse_json, reading

MAX_HEADER_BYTES = 8 << 20      # MiniLM's header is 11 KB; 8 MiB names some 100,000 tensors
# safetensors dtype -> numpy dtype (None: no numpy dtype, e.g. bfloat16), and its item size in bytes
DTYPES = {"F64": ("<f8", 8), "F32": ("<f4", 4), "F16": ("<f2", 2), "BF16": (None, 2), "I64": ("<i8", 8),
          "I32": ("<i4", 4), "I16": ("<i2", 2), "I8": ("i1", 1), "U64": ("<u8", 8), "U32": ("<u4", 4),
          "U16": ("<u2", 2), "U8": ("u1", 1), "BOOL": ("?", 1)}
# a Hugging Face config.json's torch_dtype (or dtype) -> the safetensors dtype every weight must then have
WEIGHT_DTYPES = {"float32": "F32", "float16": "F16", "float64": "F64"}


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
        if n > MAX_HEADER_BYTES:
            raise FileFormatError(f"{path}: its safetensors header says {n:,} bytes, more than npformer "
                                  f"reads ({MAX_HEADER_BYTES:,})")
        if 8 + n > file_size:
            raise FileFormatError(f"{path}: its safetensors header says {n:,} bytes, past the end of the "
                                  f"{file_size:,}-byte file (a truncated file?)")
        raw = f.read(n)
    header = parse_json(raw, path, top=dict)
    data_start, data_size = 8 + n, file_size - 8 - n
    with reading(path):
        meta = header.pop("__metadata__", None) or {}
        if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
            raise ValueError("its __metadata__ must map names to strings")
        return {name: _entry(name, e, data_start, data_size) for name, e in header.items()}, meta


def _entry(name: str, e, data_start: int, data_size: int) -> TensorEntry:
    if not isinstance(e, dict):
        raise ValueError(f"tensor {name!r}: its header entry is not an object")
    dtype, shape, offsets = e.get("dtype"), e.get("shape"), e.get("data_offsets")
    if dtype not in DTYPES:
        raise ValueError(f"tensor {name!r}: dtype {dtype!r} is not a safetensors dtype")
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        raise ValueError(f"tensor {name!r}: shape {shape!r} is not a list of non-negative ints")
    if (not isinstance(offsets, list) or len(offsets) != 2 or not all(type(o) is int for o in offsets)
            or not 0 <= offsets[0] <= offsets[1] <= data_size):
        raise ValueError(f"tensor {name!r}: data_offsets {offsets!r} are not a range inside the file's "
                         f"{data_size:,} bytes of data")
    if math.prod(shape) * DTYPES[dtype][1] != offsets[1] - offsets[0]:
        raise ValueError(f"tensor {name!r}: shape {shape} of {dtype} does not fill its data_offsets {offsets}")
    return TensorEntry(dtype, tuple(shape), data_start + offsets[0], data_start + offsets[1])


def read_tensors(path, entries: dict[str, TensorEntry]) -> dict[str, np.ndarray]:
    """The tensors ``entries`` (from ``read_header``) of the file ``path``, each read alone (its bytes,
    nothing more) into a numpy array of its shape."""
    out = {}
    with open(path, "rb") as f:
        for name, entry in entries.items():
            kind = DTYPES[entry.dtype][0]
            if kind is None:
                raise FileFormatError(f"{path}: tensor {name!r} has dtype {entry.dtype}, which numpy cannot hold")
            f.seek(entry.start)
            data = f.read(entry.end - entry.start)
            if len(data) != entry.end - entry.start:           # the file shrank since its header was read
                raise FileFormatError(f"{path} ended inside tensor {name!r} (did it change while it was read?)")
            out[name] = np.frombuffer(data, dtype=kind).reshape(entry.shape)
    return out


def expected_entries(path, header: dict[str, TensorEntry], found: dict[str, str],
                     shapes: Iterable[tuple[str, tuple[int, ...]]], torch_dtype: str | None,
                     file_name: Callable[[str], str], what: str) -> dict[str, TensorEntry]:
    """{name: entry} for every (name, shape) a config implies, from ``found`` (name -> the key in the file
    at ``path``): each present, of that shape, of the config's float dtype (any of WEIGHT_DTYPES without
    one); a key of ``found`` no shape names is unexpected. Errors are one FileFormatError naming the file
    and the tensor (``file_name(name)``: the name as the file spells it; ``what``: the model the file
    should hold)."""
    found = dict(found)
    dtypes = (WEIGHT_DTYPES[torch_dtype],) if torch_dtype else tuple(WEIGHT_DTYPES.values())
    entries = {}
    for name, shape in shapes:
        if name not in found:
            raise FileFormatError(f"{path}: missing weight {file_name(name)!r}")
        key = found.pop(name)
        e = header[key]
        if e.shape != shape:
            raise FileFormatError(f"{path} does not match config.json: {key} has shape {e.shape}, "
                                  f"the config gives {shape}")
        if e.dtype not in dtypes:
            raise FileFormatError(f"{path}: {key} has dtype {e.dtype}, expected {' or '.join(dtypes)}")
        entries[name] = e
    if found:
        raise FileFormatError(f"{path}: unexpected weight {next(iter(found.values()))!r} for {what}")
    return entries
