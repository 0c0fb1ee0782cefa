"""What a Hugging Face checkpoint must hold: ``expected_entries`` compares a safetensors header (read by
``npformer.tensorfile``, the one reader of the format) with the tensors a config implies, before
any tensor's memory is taken.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

from ..settings import FileFormatError, quoted
from ..tensorfile import DTYPES, TensorEntry, read_header, read_tensors

__all__ = ["DTYPES", "TensorEntry", "WEIGHT_DTYPES", "expected_entries", "read_header", "read_tensors"]

# a Hugging Face config.json's torch_dtype (or dtype) -> the safetensors dtype every weight must then have
WEIGHT_DTYPES = {"float32": "F32", "float16": "F16", "float64": "F64"}


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
            raise FileFormatError(f"{path}: missing weight {quoted(file_name(name))}")
        key = found.pop(name)
        e = header[key]
        if e.shape != shape:
            raise FileFormatError(f"{path} does not match config.json: {key} has shape {e.shape}, "
                                  f"the config gives {shape}")
        if e.dtype not in dtypes:
            raise FileFormatError(f"{path}: {key} has dtype {e.dtype}, expected {' or '.join(dtypes)}")
        entries[name] = e
    if found:
        raise FileFormatError(f"{path}: unexpected weight {quoted(next(iter(found.values())))} for {what}")
    return entries
