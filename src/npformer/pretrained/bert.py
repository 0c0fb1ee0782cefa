"""A BERT-family encoder (Devlin et al. 2019) built from npformer's own modules, and
the loader that fills it from a Hugging Face directory (config.json + model.safetensors).

BERT is the paper's encoder with three changes, all visible here:
    learned absolute positions and a token-type (segment) table added to the word vectors,
    a LayerNorm right after the embeddings, and exact-erf GELU in the feed-forward network.
The layers are post-LN (``x = norm(x + sublayer(x))``) as in the paper, so they are plain
``npformer.nn.EncoderLayer``s; only the parameter names differ, and ``_rename`` maps them.

Dimension legend: B batch, T positions, E hidden size, V vocabulary.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..nn import Embedding, Encoder, LayerNorm, Module
from ..nn.inference import encoder_packed, layernorm_packed, transposed_weights

# Architectures whose weights are a BertModel under ``bert.`` (or under no prefix).
BERT_ARCHITECTURES = ("BertModel", "BertForMaskedLM", "BertForPreTraining", "BertForSequenceClassification",
                      "BertForTokenClassification", "BertForQuestionAnswering", "BertForNextSentencePrediction",
                      "BertForMultipleChoice", "BertLMHeadModel")
# Checkpoint entries that are not part of the encoder: the [CLS] pooler and task heads.
_IGNORED_PREFIXES = ("pooler.", "cls.", "classifier.", "qa_outputs.")
_IGNORED_KEYS = ("embeddings.position_ids",)


@dataclass
class BertConfig:
    vocab_size: int                  # V, rows of the word-piece table
    hidden_size: int = 768           # E, the model width
    num_hidden_layers: int = 12      # encoder layers
    num_attention_heads: int = 12    # H; E must divide by H
    intermediate_size: int = 3072    # feed-forward inner width
    max_position_embeddings: int = 512  # rows of the learned position table, the hard length limit
    type_vocab_size: int = 2         # rows of the token-type (segment) table
    layer_norm_eps: float = 1e-12    # eps of every LayerNorm, as config.json says
    hidden_act: str = "gelu"         # only exact (erf) GELU is supported
    pad_token_id: int = 0            # id of [PAD]

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_attention_heads != 0:
            raise ValueError(f"hidden_size ({self.hidden_size}) must be divisible by "
                             f"num_attention_heads ({self.num_attention_heads})")
        if self.hidden_act != "gelu":
            raise ValueError(f"hidden_act {self.hidden_act!r} is not supported: npformer runs BERT with exact "
                             "(erf) GELU, hidden_act 'gelu'")
        if not self.layer_norm_eps > 0:
            raise ValueError(f"layer_norm_eps must be > 0, got {self.layer_norm_eps}")

    @classmethod
    def from_dict(cls, cfg: dict, source: str = "config.json") -> "BertConfig":
        """Checks that ``cfg`` (a Hugging Face config.json) describes a BERT-family encoder."""
        arch = list(cfg.get("architectures") or [])
        model_type = cfg.get("model_type")
        if model_type != "bert" and not any(a in BERT_ARCHITECTURES for a in arch):
            named = f"model_type {model_type!r}" + (f", architectures {arch}" if arch else "")
            raise ValueError(f"{source} describes {named}, not a BERT-family encoder "
                             "(model_type 'bert' or a Bert* architecture)")
        pos = cfg.get("position_embedding_type", "absolute")
        if pos != "absolute":
            raise ValueError(f"{source}: position_embedding_type {pos!r} is not supported, only 'absolute'")
        fields = {f: cfg[f] for f in cls.__dataclass_fields__ if f in cfg}
        if "vocab_size" not in fields:
            raise ValueError(f"{source} has no vocab_size")
        return cls(**fields)

    def to_dict(self) -> dict:
        return asdict(self)


class BertEmbeddings(Module):
    """word + position + token type, then LayerNorm. Children named as in the checkpoints."""

    def __init__(self, cfg: BertConfig, rng: np.random.Generator | None = None, dtype=np.float32) -> None:
        super().__init__()
        rng = rng if rng is not None else np.random.default_rng(0)
        e = cfg.hidden_size
        self.add_module("word_embeddings", Embedding(cfg.vocab_size, e, rng=rng, dtype=dtype, std=0.02))
        self.add_module("position_embeddings", Embedding(cfg.max_position_embeddings, e, rng=rng, dtype=dtype,
                                                         std=0.02))
        self.add_module("token_type_embeddings", Embedding(cfg.type_vocab_size, e, rng=rng, dtype=dtype, std=0.02))
        self.add_module("LayerNorm", LayerNorm(e, cfg.layer_norm_eps, dtype))

    def forward(self, ids: np.ndarray, token_type_ids: np.ndarray | None = None):
        """ids (B, T) int -> (x (B, T, E), cache)."""
        t = ids.shape[1]
        x, c_word = self.word_embeddings.forward(ids)                       # (B, T, E)
        x += self.position_embeddings.params["weight"][:t]                  # (T, E) broadcast over B
        if token_type_ids is None:
            x += self.token_type_embeddings.params["weight"][0]             # (E,): every token in segment A
        else:
            x += self.token_type_embeddings.params["weight"][token_type_ids]  # (B, T, E)
        y, c_norm = self.LayerNorm.forward(x)                              # (B, T, E)
        return y, (c_word, c_norm)

    def infer(self, ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """Packed sequences: ids (N,) int, positions (N,) int (each sequence from 0) -> (N, E).
        Every token is in segment A (token type 0), as for a single sentence.

        The packed twin of ``forward`` (as nn/inference.py for the encoder); pinned end to end by
        tests/pretrained/test_parity.py."""
        x = self.word_embeddings.params["weight"][ids]                     # (N, E)
        x += self.position_embeddings.params["weight"][positions]          # (N, E)
        x += self.token_type_embeddings.params["weight"][0]                # (E,)
        return layernorm_packed(self.LayerNorm, x, out=x)                  # (N, E), in place


class BertModel(Module):
    """BERT's encoder: ``embeddings`` then ``encoder`` (an ``npformer.nn.Encoder``, post-LN, GELU).

    ``forward(ids, attention_mask)[0]`` is the last hidden states, transformers'
    ``BertModel(...).last_hidden_state``; ``infer`` is its fast twin on packed sequences.
    The [CLS] pooler is not built (sentence encoders do not use it). Inference only: no backward.
    """

    def __init__(self, cfg: BertConfig, rng: np.random.Generator | None = None, dtype=np.float32) -> None:
        super().__init__()
        rng = rng if rng is not None else np.random.default_rng(0)
        self.config = cfg
        self.add_module("embeddings", BertEmbeddings(cfg, rng, dtype))
        self.add_module("encoder", Encoder(cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads,
                                           cfg.intermediate_size, dropout=0.0, activation="gelu",
                                           norm_first=False, final_norm=False, eps=cfg.layer_norm_eps,
                                           rng=rng, dtype=dtype))
        self._weights_t: dict | None = None     # transposed_weights(self.encoder), made by the first infer
        self.eval()

    def load_state_dict(self, state: dict, strict: bool = True) -> None:
        self._weights_t = None                  # new weights: infer transposes them again
        super().load_state_dict(state, strict)

    def forward(self, ids: np.ndarray, attention_mask: np.ndarray | None = None,
                token_type_ids: np.ndarray | None = None):
        """ids (B, T) int, attention_mask (B, T) (1/True = real token) -> (hidden states (B, T, E), cache).

        cache is (embeddings cache, encoder cache), e.g. for ``Encoder.attention_weights(cache[1])``;
        there is no backward. Padded positions still get hidden states (as in transformers); pool
        over real ones only.
        """
        ids = np.asarray(ids)
        if ids.ndim != 2:
            raise ValueError(f"ids must have shape (B, T), got {ids.shape}")
        if ids.shape[1] > self.config.max_position_embeddings:
            raise ValueError(f"sequence length {ids.shape[1]} exceeds max_position_embeddings "
                             f"{self.config.max_position_embeddings}")
        mask = None
        if attention_mask is not None:
            keep = np.asarray(attention_mask).astype(bool, copy=False)     # (B, T)
            if keep.shape != ids.shape:
                raise ValueError(f"attention_mask must have the shape of ids {ids.shape}, got {keep.shape}")
            mask = None if keep.all() else keep[:, None, None, :]          # (B, 1, 1, T)
        x, c_emb = self.embeddings.forward(ids, token_type_ids)            # (B, T, E)
        h, c_enc = self.encoder.forward(x, mask=mask)                      # (B, T, E)
        return h, (c_emb, c_enc)

    def infer(self, seqs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Fast path for inference on a list of id sequences, packed without padding.

        Returns (h (N, E), offsets (S + 1,)): sequence i's hidden states are rows
        offsets[i]:offsets[i + 1]. Same numbers as ``forward`` with a padding mask, to float
        rounding, with no work on padding and no mask. The first call keeps a transposed copy
        of the encoder's weights (``transposed_weights``); ``load_state_dict`` drops it, while
        weights edited in place afterwards are not seen.
        """
        lengths = np.array([len(s) for s in seqs])                         # (S,)
        if lengths.min(initial=1) < 1 or lengths.max(initial=0) > self.config.max_position_embeddings:
            raise ValueError(f"each sequence needs 1 to {self.config.max_position_embeddings} ids, "
                             f"got lengths {lengths.min()} to {lengths.max()}")
        offsets = np.concatenate([[0], np.cumsum(lengths)])                # (S + 1,)
        ids = np.concatenate(seqs)                                         # (N,)
        positions = np.arange(offsets[-1]) - np.repeat(offsets[:-1], lengths)  # (N,) 0.. within each
        x = self.embeddings.infer(ids, positions)                          # (N, E)
        if self._weights_t is None:                                        # once: W^T contiguous, for speed
            self._weights_t = transposed_weights(self.encoder)
        h, _ = encoder_packed(self.encoder, x, offsets, self._weights_t)   # (N, E)
        return h, offsets


# -- loading -----------------------------------------------------------------------------------

def _rename(key: str) -> str | None:
    """A checkpoint key (prefix already removed) -> npformer's key; None for the q/k/v
    entries, which are concatenated separately. Raises KeyError for a key it doesn't know."""
    key = key.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
    if key.startswith("embeddings."):
        return key
    parts = key.split(".")
    if len(parts) < 5 or parts[:2] != ["encoder", "layer"]:
        raise KeyError(key)
    i, rest = parts[2], ".".join(parts[3:])
    table = {
        "attention.output.dense": "self_attn.out_proj",
        "attention.output.LayerNorm": "norm1",
        "intermediate.dense": "ffn.linear1",
        "output.dense": "ffn.linear2",
        "output.LayerNorm": "norm2",
    }
    if rest.startswith("attention.self."):
        return None
    for src, dst in table.items():
        if rest.startswith(src + "."):
            return f"encoder.layers.{i}.{dst}.{rest[len(src) + 1:]}"
    raise KeyError(key)


def _read_state(path: Path, n_layers: int) -> dict[str, np.ndarray]:
    """model.safetensors -> npformer BertModel state dict (numpy only, no torch)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="np") as f:
        keys = list(f.keys())
        prefix = "bert." if any(k.startswith("bert.embeddings.") for k in keys) else ""
        if not any(k == f"{prefix}embeddings.word_embeddings.weight" for k in keys):
            raise ValueError(f"{path} holds no BERT weights: no 'embeddings.word_embeddings.weight' "
                             f"(with prefix 'bert.' or none); first keys: {keys[:4]}")
        raw = {}
        for k in keys:
            if not k.startswith(prefix):
                continue                                    # task heads outside the BertModel (cls.*)
            local = k[len(prefix):]
            if local in _IGNORED_KEYS or local.startswith(_IGNORED_PREFIXES):
                continue
            raw[local] = f.get_tensor(k)
    state: dict[str, np.ndarray] = {}
    for k, v in raw.items():
        try:
            new = _rename(k)
        except KeyError:
            raise ValueError(f"{path}: unexpected weight {prefix + k!r} for a BERT encoder") from None
        if new is not None:
            state[new] = v
    for i in range(n_layers):
        base = f"encoder.layer.{i}.attention.self"
        for kind in ("weight", "bias"):
            names = [f"{base}.{p}.{kind}" for p in ("query", "key", "value")]
            missing = [n for n in names if n not in raw]
            if missing:
                raise ValueError(f"{path}: missing weight {prefix + missing[0]!r}")
            # torch's MultiheadAttention stacks W_q, W_k, W_v row-wise in in_proj_weight (3E, E)
            state[f"encoder.layers.{i}.self_attn.in_proj_{kind}"] = np.concatenate([raw[n] for n in names])
    return state


def load_bert(path: str | Path, dtype=np.float32) -> BertModel:
    """A BertModel from a Hugging Face directory holding config.json and model.safetensors."""
    path = Path(path)
    cfg_file, weights = path / "config.json", path / "model.safetensors"
    for f in (cfg_file, weights):
        if not f.is_file():
            raise FileNotFoundError(f"model directory {path} has no {f.name}")
    cfg = BertConfig.from_dict(json.loads(cfg_file.read_text(encoding="utf-8")), str(cfg_file))
    model = BertModel(cfg, dtype=dtype)
    state = _read_state(weights, cfg.num_hidden_layers)
    model.load_state_dict({k: v.astype(dtype, copy=False) for k, v in state.items()})
    return model
