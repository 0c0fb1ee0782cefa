"""A tiny sentence-transformers directory made on the spot (imported by name: pytest puts this folder
on sys.path): a BERT config of a few thousand parameters, its weights in model.safetensors, a
WordPiece tokenizer.json of a few dozen pieces, and the pipeline files. It loads in milliseconds,
so the loader tests can break its files many times over without the 90 MB MiniLM."""
from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

WORDS = ["the", "a", "cat", "dog", "sat", "on", "mat", "sofa", "rain", "sun", "is", "red", "blue", "block",
         "box", "bowl", "stock", "market", "fell", "today", "##s", "##ed", "."]
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
CONFIG = {"architectures": ["BertModel"], "model_type": "bert", "vocab_size": len(SPECIAL) + len(WORDS),
          "hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 16,
          "max_position_embeddings": 32, "type_vocab_size": 2, "layer_norm_eps": 1e-12, "hidden_act": "gelu",
          "pad_token_id": 0, "position_embedding_type": "absolute"}
MODULES = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
           {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
           {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]
POOLING = {"word_embedding_dimension": 8, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True,
           "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False}


def tokenizer_json(words: list[str] | None = None) -> str:
    """A BERT-style WordPiece tokenizer.json over SPECIAL + ``words`` (default WORDS)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    vocab = {w: i for i, w in enumerate(SPECIAL + (WORDS if words is None else words))}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]",
                                                       special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return tok.to_str()


def weights(config: dict, seed: int = 0, prefix: str = "") -> dict[str, np.ndarray]:
    """Random float32 weights under Hugging Face's BertModel names, with position_ids as MiniLM has them."""
    from npformer.pretrained import BertConfig

    rng = np.random.default_rng(seed)
    cfg = BertConfig.from_dict(config)
    out = {f"{prefix}embeddings.position_ids": np.arange(cfg.max_position_embeddings, dtype=np.int64)[None]}
    for name, shape in cfg.checkpoint_shapes():
        w = rng.normal(0.0, 0.2, shape).astype(np.float32)
        out[prefix + name] = 1.0 + w if name.endswith("LayerNorm.weight") else w
    return out


def safetensors_bytes(tensors: dict[str, np.ndarray]) -> bytes:
    from safetensors.numpy import save
    return save(tensors)


def header_of(data: bytes) -> dict:
    """The JSON header of safetensors bytes."""
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + n])


def with_header(data: bytes, header: dict) -> bytes:
    """safetensors bytes with another header (the tensors' bytes as they were)."""
    (n,) = struct.unpack("<Q", data[:8])
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data[8 + n:]


def write_model(d: Path, config: dict | None = None, tensors: dict | None = None) -> Path:
    """The tiny model directory at ``d`` (made if needed); returns ``d``."""
    config = dict(CONFIG if config is None else config)
    d.mkdir(parents=True, exist_ok=True)
    (d / "1_Pooling").mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(config))
    (d / "model.safetensors").write_bytes(safetensors_bytes(weights(config) if tensors is None else tensors))
    (d / "tokenizer.json").write_text(tokenizer_json())
    (d / "modules.json").write_text(json.dumps(MODULES))
    (d / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 16, "do_lower_case": False}))
    (d / "1_Pooling" / "config.json").write_text(json.dumps(POOLING))
    return d
