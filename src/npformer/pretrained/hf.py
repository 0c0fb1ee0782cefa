"""Plain Hugging Face model directories: which kind a directory is.

A Hugging Face directory's config.json names its architecture in a ``model_type`` key ("bert",
"roberta", "gpt2", ...); npformer's own run directories write config.json without one (its keys are
task, model_kind, model, train, data: ``train/checkpoint.py``). So ``model_type(path)`` tells the two
apart, and every command that takes a directory asks it first.
"""
from __future__ import annotations

from pathlib import Path

from ..settings import FileFormatError, read_json

MAX_MODEL_TYPE_CHARS = 64       # "bert", "distilbert", "gpt2": a name, not a paragraph


def model_type(path: str | Path) -> str | None:
    """config.json's ``model_type`` in the directory ``path``; None when ``path`` is not a directory,
    holds no config.json, or its config.json has no ``model_type`` key (an npformer run directory).

    config.json is read with ``settings.read_json``'s limits (size, depth, numbers); a file that is
    not JSON, not an object, not a regular file, or whose model_type is not a short name, is a
    FileFormatError naming the file."""
    path = Path(path)
    if not path.is_dir():
        return None
    cfg_file = path / "config.json"
    if not cfg_file.exists() and not cfg_file.is_symlink():
        return None
    if not cfg_file.is_file():                          # a folder, a FIFO, a device or a dangling link
        raise FileFormatError(f"{cfg_file} is not a regular file")
    cfg = read_json(cfg_file, top=dict)
    kind = cfg.get("model_type")
    if kind is None:
        return None
    if not isinstance(kind, str) or not 0 < len(kind) <= MAX_MODEL_TYPE_CHARS:
        raise FileFormatError(f"{cfg_file}: model_type must be a name (a string of 1 to {MAX_MODEL_TYPE_CHARS} "
                              f"characters), got {str(kind)[:MAX_MODEL_TYPE_CHARS]!r}")
    return kind
