"""A plain Hugging Face BERT directory made with numpy alone (no torch), for the tests of the command
line and the explorer and for the docs' examples: config.json with model_type "bert", model.safetensors
of random weights under BertForMaskedLM's names ("bert." and a task head beside the encoder, which the
loader leaves out), and a small WordPiece tokenizer.json; no modules.json. The parity of such
directories with transformers is tests/pretrained/test_hf_bert.py's, on directories transformers saved."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import tiny_bert

SPECIAL = tiny_bert.SPECIAL
WORDS = ["a", "the", "robot", "picks", "up", "puts", "block", "red", "blue", "box", "bowl", "in", "on", "table",
         "man", "plays", "guitar", "weather", "is", "nice", "today", "place", "put", "cube", "into", "cat", "sat",
         "mat", "##s", "##ed", ".", ","]
CONFIG = {"architectures": ["BertForMaskedLM"], "model_type": "bert", "vocab_size": len(SPECIAL) + len(WORDS),
          "hidden_size": 12, "num_hidden_layers": 2, "num_attention_heads": 3, "intermediate_size": 20,
          "max_position_embeddings": 24, "type_vocab_size": 2, "layer_norm_eps": 1e-12, "hidden_act": "gelu",
          "pad_token_id": 0, "dtype": "float32"}


def tokenizer_json() -> str:
    return tiny_bert.tokenizer_json(WORDS)


def write_plain_bert(d: Path, config: dict | None = None, seed: int = 0) -> Path:
    """The directory ``d`` (made if needed) holding config.json, model.safetensors and tokenizer.json; returns it."""
    from safetensors.numpy import save

    from npformer.pretrained import BertConfig

    config = dict(CONFIG if config is None else config)
    rng = np.random.default_rng(seed)
    tensors = {"cls.predictions.bias": np.zeros(config["vocab_size"], np.float32)}     # a head, left out
    for name, shape in BertConfig.from_dict(config).checkpoint_shapes():
        w = rng.normal(0.0, 0.3, shape).astype(np.float32)
        tensors["bert." + name] = 1.0 + w if name.endswith("LayerNorm.weight") else w
    d = Path(d)
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(config))
    (d / "model.safetensors").write_bytes(save(tensors))
    (d / "tokenizer.json").write_text(tokenizer_json())
    return d
