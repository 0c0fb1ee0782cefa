"""GPT-2 directories of any shape from numpy alone (no torch, no transformers): config.json with model_type
"gpt2", model.safetensors of seeded random weights under Hugging Face's GPT2Model names, and the byte-level
BPE tokenizer.json of tests/pretrained/tiny_gpt2.py (trained by ``tokenizers``). For the explorer's bounds
(tests/explore/test_knockout_bounds.py): shapes a file can claim cheaply, a wide vocabulary or a very deep
stack, at tiny widths. Parity with transformers is tests/pretrained/test_gpt2_parity.py's, not this file's."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pretrained"))
from tiny_gpt2 import train_tokenizer  # noqa: E402


def write_plain_gpt2(d, n_embd: int, n_layer: int, n_head: int, vocab_size: int, n_positions: int = 256,
                     seed: int = 0) -> Path:
    """The directory ``d`` (made if needed) with config.json, model.safetensors and tokenizer.json; returns it.
    vocab_size: at least the tokenizer's 400 ids (more leaves ids no text makes, as GPT-2's 50,257 do)."""
    from safetensors.numpy import save

    from npformer.pretrained.gpt2 import GPT2Config

    config = {"model_type": "gpt2", "vocab_size": vocab_size, "n_embd": n_embd, "n_layer": n_layer,
              "n_head": n_head, "n_positions": n_positions, "activation_function": "gelu_new",
              "eos_token_id": None, "torch_dtype": "float32"}
    rng = np.random.default_rng(seed)
    tensors = {}
    for name, shape in GPT2Config.from_dict(config).checkpoint_shapes():
        w = rng.normal(0.0, 0.2, shape).astype(np.float32)
        tensors[name] = 1.0 + w if name.endswith((".ln_1.weight", ".ln_2.weight", "ln_f.weight")) else w
    d = Path(d)
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(config))
    (d / "model.safetensors").write_bytes(save(tensors))
    train_tokenizer().save(str(d / "tokenizer.json"))
    return d
