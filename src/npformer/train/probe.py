"""The attention of one fixed probe input, saved at every evaluation: the heads forming over training.

    probe_attention.safetensors   (in the run directory, written atomically)
        weights   (S, L, H, Tq, Tk) uint8   round(w * 255), one row per recorded step
        steps     (S,) int64                the training step of each row
        input.0, input.1, ...               the probe's model inputs (batch of one), as the model read them
        metadata  {"format": "npformer-probe", "version": "1", "group": "decoder cross" | "self",
                   "model_kind": ...}

The probe is the first example of ``task.train_batch`` drawn with a fixed seed when the run starts
(later records reuse the inputs stored in the file), so every run of a task sees the same input; a
language model's is cut to ``MAX_TOKENS``. The group is the
cross-attention for an encoder-decoder (the alignment forming), the self-attention otherwise.
``npformer explore`` reads the file (``read_probe``); runs trained before it existed simply lack it.
A resumed run drops the rows after its checkpoint's step when it records again.
Dimension legend: S recorded steps, L layers, H heads, Tq query and Tk key tokens.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..files import atomic_write_bytes
from ..settings import reading
from .checkpoint import read_safetensors, safetensors_bytes

PROBE = "probe_attention.safetensors"
PROBE_SEED = 20260                      # the probe example's seed: the same for every run of a task
MAX_TOKENS = 48                         # a language model's probe is cut to this many tokens
FORMAT = "npformer-probe"


def probe_inputs(task, model) -> tuple[np.ndarray, ...]:
    """The probe's model inputs (batch of one): the training batch's ``inputs`` (not its targets),
    trailing padding dropped, floats in the model's dtype."""
    batch = task.train_batch(np.random.default_rng(PROBE_SEED), 1)
    arrays = [np.asarray(a)[:1] for a in batch.inputs]
    kind = task.model_kind
    if kind == "transformer":
        pad = model.config.pad_id
        arrays = [a[:, :max(1, int((a[0] != pad).sum()))] for a in arrays]   # pads come last
    elif kind == "decoder_lm":
        arrays = [a[:, :MAX_TOKENS] for a in arrays]
    return tuple(a.astype(model.dtype) if a.dtype.kind == "f" else a for a in arrays)


def probe_weights(task, model, inputs) -> tuple[str, np.ndarray]:
    """(group name, weights (L, H, Tq, Tk)) of one eval-mode forward of the probe."""
    was_training = model.training
    model.eval()
    try:
        _, cache = model.forward(*inputs)
    finally:
        model.train(was_training)
    att = model.attention_weights(cache)
    if isinstance(att, dict):                                       # encoder-decoder
        return "decoder cross", np.stack([layer["cross"][0] for layer in att["decoder"]])
    return "self", np.stack([layer["self"][0] for layer in att])


def unit_to_u8(x) -> np.ndarray:
    """Values in [0, 1] (clipped) as 8-bit: round(x * 255); read back as x / 255."""
    return np.round(np.clip(x, 0.0, 1.0) * 255.0).astype(np.uint8)


def record_probe(run_dir, task, model, step: int) -> Path | None:
    """Append the probe's attention at ``step`` to the run's probe file (rows at >= step are replaced).
    A model without ``attention_weights`` (a task registered from outside) records nothing."""
    if not hasattr(model, "attention_weights"):
        return None
    path = Path(run_dir) / PROBE
    old = read_probe(run_dir)
    inputs = tuple(old["inputs"]) if old is not None else probe_inputs(task, model)   # drawn once, at step 0
    group, w = probe_weights(task, model, inputs)
    row = unit_to_u8(w)[None]                                             # (1, L, H, Tq, Tk)
    steps = np.array([step], dtype=np.int64)
    if old is not None and old["group"] == group and old["weights"].shape[1:] == row.shape[1:]:
        keep = old["steps"] < step
        row = np.concatenate([old["weights"][keep], row])
        steps = np.concatenate([old["steps"][keep], steps])
    tensors = {"weights": row, "steps": steps, **{f"input.{i}": a for i, a in enumerate(inputs)}}
    meta = {"format": FORMAT, "version": "1", "group": group, "model_kind": task.model_kind}
    atomic_write_bytes(path, safetensors_bytes(tensors, meta))
    return path


def read_probe(run_dir) -> dict | None:
    """The probe file as {"steps", "weights" (uint8), "inputs": [arrays], "group", "model_kind"}, or None
    when the run has none (trained before probes existed)."""
    path = Path(run_dir) / PROBE
    if not path.is_file():
        return None
    tensors, meta = read_safetensors(path)
    with reading(path):                                 # a missing entry: one line naming the file
        if meta.get("format") != FORMAT or "weights" not in tensors or "steps" not in tensors:
            raise ValueError(f"{path} is not an npformer probe file")
        n = sum(1 for k in tensors if k.startswith("input."))
        inputs = []
        for i in range(n):
            if f"input.{i}" not in tensors:
                raise ValueError(f"{path}: the probe's inputs are not numbered input.0 to input.{n - 1} "
                                 f"(input.{i} is missing)")
            inputs.append(tensors[f"input.{i}"])
        steps, weights = tensors["steps"], tensors["weights"]
        if steps.ndim != 1 or weights.ndim != 5 or len(steps) != len(weights):
            raise ValueError(f"{path}: steps must be one step per row of weights (rows, layers, heads, "
                             f"queries, keys), got shapes {steps.shape} and {weights.shape}")
        if steps.dtype.kind not in "iu" or weights.dtype != np.uint8:
            raise ValueError(f"{path}: steps must be integers and weights uint8, got {steps.dtype} and "
                             f"{weights.dtype}")
        return {"steps": steps, "weights": weights, "inputs": inputs, "group": meta.get("group", "self"),
                "model_kind": meta.get("model_kind", "")}
