"""Plain Hugging Face model directories: which kind a directory is.

A Hugging Face directory's config.json names its architecture in a ``model_type`` key ("bert",
"roberta", "gpt2", ...); npformer's own run directories write config.json without one (its keys are
task, model_kind, model, train, data: ``train/checkpoint.py``). So ``model_type(path)`` tells the two
apart, and every command that takes a directory asks it first.

Weights are read from model.safetensors only. pytorch_model.bin is a pickle, which can run any code
when it is loaded; npformer never opens one, and ``safetensors_file`` says how to convert it.
"""
from __future__ import annotations

from pathlib import Path

from ..settings import FileFormatError, check_links, read_json

MAX_MODEL_TYPE_CHARS = 64       # "bert", "distilbert", "gpt2": a name, not a paragraph
PICKLED_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json")    # never opened


def model_type(path: str | Path) -> str | None:
    """config.json's ``model_type`` in the directory ``path``; None when ``path`` is not a directory,
    holds no config.json, or its config.json has no ``model_type`` key (an npformer run directory).

    config.json is read with ``settings.read_json``'s limits (size, depth, numbers); a file that is
    not JSON, not an object, not a regular file, or whose model_type is not a short name, is a
    FileFormatError naming the file. A link in the directory that leads outside it is refused
    (``settings.check_links``)."""
    path = Path(path)
    if not path.is_dir():
        return None
    check_links(path)                                   # a link leading outside: refused, never read
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


def safetensors_file(path: str | Path) -> Path:
    """DIR/model.safetensors, or a FileNotFoundError of one line: for a directory holding only
    pytorch_model.bin, the two lines of Python (joined by "; ") that convert it with transformers;
    for sharded weights, how to save them as one file."""
    path = Path(path)
    weights = path / "model.safetensors"
    if weights.is_file():
        return weights
    if (path / "model.safetensors.index.json").is_file():
        raise FileNotFoundError(f"model directory {path} holds sharded weights (model.safetensors.index.json); "
                                "npformer reads one model.safetensors: save it again with transformers' "
                                "save_pretrained(DIR, max_shard_size=\"100GB\")")
    pickled = next((name for name in PICKLED_WEIGHTS if (path / name).exists()), None)
    if pickled is not None:
        d = repr(str(path))
        raise FileNotFoundError(f"model directory {path} has no model.safetensors, only {pickled}, a pickle, "
                                "which npformer never loads (it can run code); if you trust it, convert it with "
                                f"transformers: from transformers import AutoModel; "
                                f"AutoModel.from_pretrained({d}).save_pretrained({d}, safe_serialization=True)")
    raise FileNotFoundError(f"model directory {path} has no model.safetensors (the weights)")
