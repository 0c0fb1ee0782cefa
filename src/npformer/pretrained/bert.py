"""A BERT-family encoder (Devlin et al. 2019) built from npformer's own modules, and
the loader that fills it from a Hugging Face directory (config.json + model.safetensors).

BERT is the paper's encoder with three changes, all visible here:
    learned absolute positions and a token-type (segment) table added to the word vectors,
    a LayerNorm right after the embeddings, and exact-erf GELU in the feed-forward network.
The layers are post-LN (``x = norm(x + sublayer(x))``) as in the paper, so they are plain
``npformer.nn.EncoderLayer``s; only the parameter names differ, and ``_rename`` maps them.

RoBERTa and DistilBERT are the same network, mapped at the loader (``BertConfig.from_dict`` and
``_checkpoint_entries``), never built as second models:
    roberta      the weights under ``roberta.``; position ids start at pad_token_id + 1 (transformers'
                 ``create_position_ids_from_input_ids``), so the loader drops the table's first
                 pad_token_id + 1 rows and position 0 is the next one. (transformers gives a piece whose id
                 is the padding id, inside a text, the padding row instead; a tokenizer makes one only from
                 the literal padding token in the text.)
    distilbert   other names (dim, n_layers, q_lin, sa_layer_norm, ...) and no token types: the loader
                 renames them and adds a token-type table of one zero row; LayerNorm eps is 1e-12.

Loading trusts neither file: config.json is read with ``settings.read_json``'s limits and its
parameter count computed before anything is built (over 2^31 is refused); then the safetensors
header alone is read (``weights.read_header``) and every tensor's shape and dtype compared with what
the config implies, before the model is built or any tensor read.

Dimension legend: B batch, T positions, E hidden size, V vocabulary.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..models.config import MAX_LAYERS, MAX_PARAMETERS, check_float, check_int
from ..nn import Embedding, Encoder, LayerNorm, Module, basic
from ..nn.inference import encoder_packed, layernorm_packed, transposed_weights
from ..settings import FileFormatError, check_links, quoted, read_json, reading
from ..tensorfile import TensorEntry, read_header, read_tensors
from .hf import safetensors_file
from .weights import WEIGHT_DTYPES, expected_entries

# Architectures whose weights are a BertModel under ``bert.`` (or under no prefix).
BERT_ARCHITECTURES = ("BertModel", "BertForMaskedLM", "BertForPreTraining", "BertForSequenceClassification",
                      "BertForTokenClassification", "BertForQuestionAnswering", "BertForNextSentencePrediction",
                      "BertForMultipleChoice", "BertLMHeadModel")
# model_type -> the prefix of the encoder's weights in a checkpoint of a task model (BertForMaskedLM:
# "bert."); a checkpoint of the bare encoder (BertModel) has none
BERT_FAMILY = {"bert": "bert.", "roberta": "roberta.", "distilbert": "distilbert."}
FAMILY_NAMES = {"bert": "BERT", "roberta": "RoBERTa", "distilbert": "DistilBERT"}
# hidden_act -> npformer's FeedForward activation (both transformers' and npformer's: exact erf GELU, ReLU)
HIDDEN_ACTS = {"gelu": "gelu", "relu": "relu"}
# DistilBERT's config.json names -> BERT's, with transformers' DistilBertConfig defaults for absent ones
_DISTILBERT_FIELDS = {"dim": ("hidden_size", 768), "n_layers": ("num_hidden_layers", 6),
                      "n_heads": ("num_attention_heads", 12), "hidden_dim": ("intermediate_size", 3072),
                      "activation": ("hidden_act", "gelu")}
# DistilBERT's names inside transformer.layer.I -> BERT's inside encoder.layer.I
_DISTILBERT_LAYER = (("attention.q_lin.", "attention.self.query."), ("attention.k_lin.", "attention.self.key."),
                     ("attention.v_lin.", "attention.self.value."), ("attention.out_lin.", "attention.output.dense."),
                     ("sa_layer_norm.", "attention.output.LayerNorm."), ("ffn.lin1.", "intermediate.dense."),
                     ("ffn.lin2.", "output.dense."), ("output_layer_norm.", "output.LayerNorm."))
# Checkpoint entries that are not part of the encoder: the [CLS] pooler and task heads.
_IGNORED_PREFIXES = ("pooler.", "cls.", "classifier.", "qa_outputs.", "lm_head.")
_IGNORED_KEYS = ("embeddings.position_ids", "embeddings.token_type_ids")


@dataclass
class BertConfig:
    vocab_size: int                  # V, rows of the word-piece table
    hidden_size: int = 768           # E, the model width
    num_hidden_layers: int = 12      # encoder layers
    num_attention_heads: int = 12    # H; E must divide by H
    intermediate_size: int = 3072    # feed-forward inner width
    max_position_embeddings: int = 512  # rows of the position table as npformer builds it, the hard length
                                        # limit: config.json's less position_offset
    type_vocab_size: int = 2         # rows of the token-type (segment) table
    layer_norm_eps: float = 1e-12    # eps of every LayerNorm, as config.json says
    hidden_act: str = "gelu"         # "gelu" (exact, erf) or "relu"
    pad_token_id: int | None = 0     # id of [PAD] (None in some configs; the tokenizer pads with its own)
    torch_dtype: str | None = None   # the weights' dtype ("float32", "float16", "float64"); None: any of them
    model_type: str = "bert"         # "bert", "roberta" or "distilbert": how the checkpoint names its weights
    position_offset: int = 0         # the checkpoint's position rows before position 0 (roberta: pad_token_id + 1)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                     "max_position_embeddings", "type_vocab_size"):
            check_int(name, getattr(self, name))
        if self.pad_token_id is not None:
            check_int("pad_token_id", self.pad_token_id, minimum=0)
        if self.hidden_size % self.num_attention_heads != 0:
            raise ValueError(f"hidden_size ({self.hidden_size}) must be divisible by "
                             f"num_attention_heads ({self.num_attention_heads})")
        if self.hidden_act not in HIDDEN_ACTS:
            raise ValueError(f"hidden_act {quoted(self.hidden_act)} is not supported: npformer runs BERT with "
                             f"{' or '.join(map(repr, HIDDEN_ACTS))} (exact erf GELU, ReLU)")
        if self.model_type not in BERT_FAMILY:
            raise ValueError(f"model_type {quoted(self.model_type)} is not a BERT-family encoder "
                             f"({', '.join(BERT_FAMILY)})")
        check_int("position_offset", self.position_offset, minimum=0)
        if self.model_type == "distilbert" and self.type_vocab_size != 1:
            raise ValueError("a distilbert encoder has no token types: type_vocab_size must be 1")
        check_float("layer_norm_eps", self.layer_norm_eps, 0.0, 1.0, low_inclusive=False)
        if self.torch_dtype is not None and self.torch_dtype not in WEIGHT_DTYPES:
            raise ValueError(f"torch_dtype {quoted(self.torch_dtype)} is not supported: npformer reads "
                             f"{', '.join(WEIGHT_DTYPES)} weights")
        if self.num_hidden_layers > MAX_LAYERS:
            raise ValueError(f"num_hidden_layers is {self.num_hidden_layers:,}: npformer builds at most "
                             f"{MAX_LAYERS:,} layers")
        n = self.param_count()
        if n > MAX_PARAMETERS:
            raise ValueError(f"the config describes a model of {n:,} parameters, more than npformer builds "
                             f"({MAX_PARAMETERS:,}, 2^31)")

    def param_count(self) -> int:
        """The encoder's parameters, from the config alone: the sizes of ``checkpoint_shapes``."""
        return sum(math.prod(shape) for _, shape in self.checkpoint_shapes())

    def checkpoint_shapes(self):
        """Yields (name, shape) of every tensor of the encoder's checkpoint, named as in Hugging Face's
        BERT checkpoints (without a "bert." prefix), in the checkpoints' order of layers. The shapes are
        the checkpoint's: roberta's position table has its position_offset rows more, distilbert has no
        token-type table."""
        e, f = self.hidden_size, self.intermediate_size
        yield "embeddings.word_embeddings.weight", (self.vocab_size, e)
        yield "embeddings.position_embeddings.weight", (self.max_position_embeddings + self.position_offset, e)
        if self.model_type != "distilbert":
            yield "embeddings.token_type_embeddings.weight", (self.type_vocab_size, e)
        yield "embeddings.LayerNorm.weight", (e,)
        yield "embeddings.LayerNorm.bias", (e,)
        for i in range(self.num_hidden_layers):
            for name, shape in (("attention.self.query", (e, e)), ("attention.self.key", (e, e)),
                                ("attention.self.value", (e, e)), ("attention.output.dense", (e, e)),
                                ("attention.output.LayerNorm", (e,)), ("intermediate.dense", (f, e)),
                                ("output.dense", (e, f)), ("output.LayerNorm", (e,))):
                yield f"encoder.layer.{i}.{name}.weight", shape
                yield f"encoder.layer.{i}.{name}.bias", shape[:1]

    @classmethod
    def from_dict(cls, cfg: dict, source: str = "config.json") -> "BertConfig":
        """Checks that ``cfg`` (a Hugging Face config.json) describes a BERT-family encoder: model_type
        bert, roberta or distilbert (or no model_type and a Bert* architecture), and maps roberta's and
        distilbert's fields onto BERT's."""
        if not isinstance(cfg, dict):
            raise ValueError(f"{source} must hold a JSON object")
        arch = cfg.get("architectures") or []
        if not isinstance(arch, list) or not all(isinstance(a, str) for a in arch):
            raise ValueError(f"{source}: architectures must be a list of names, got {quoted(arch)}")
        model_type = cfg.get("model_type")
        if not isinstance(model_type, str) or model_type not in BERT_FAMILY:
            model_type = "bert" if any(a in BERT_ARCHITECTURES for a in arch) else repr(model_type)[:40]
        if model_type not in BERT_FAMILY:                                  # its repr, cut
            named = f"model_type {model_type}" + (f", architectures {arch}" if arch else "")
            raise ValueError(f"{source} describes {named}, not a BERT-family encoder "
                             f"(model_type {', '.join(map(repr, BERT_FAMILY))} or a Bert* architecture)")
        pos = cfg.get("position_embedding_type", "absolute")
        if pos != "absolute":
            raise ValueError(f"{source}: position_embedding_type {quoted(pos)} is not supported, only 'absolute'")
        if "torch_dtype" not in cfg and "dtype" in cfg:              # transformers 5 writes "dtype"
            cfg = {**cfg, "torch_dtype": cfg["dtype"]}
        if model_type == "distilbert":
            cfg = {**{bert: cfg.get(own, default) for own, (bert, default) in _DISTILBERT_FIELDS.items()},
                   **{k: cfg[k] for k in ("vocab_size", "max_position_embeddings", "pad_token_id", "torch_dtype")
                      if k in cfg},
                   "type_vocab_size": 1, "layer_norm_eps": 1e-12}          # as transformers' DistilBERT
        fields = {f: cfg[f] for f in cls.__dataclass_fields__
                  if f in cfg and f not in ("model_type", "position_offset")}     # set below, not by the file
        if "vocab_size" not in fields:
            raise ValueError(f"{source} has no vocab_size")
        fields["model_type"] = model_type
        if model_type == "roberta":
            pad = cfg.get("pad_token_id")
            if isinstance(pad, bool) or not isinstance(pad, int) or pad < 0:
                raise ValueError(f"{source}: a roberta encoder needs pad_token_id (an int >= 0: its positions "
                                 f"start after it), got {quoted(pad)}")
            rows = fields.get("max_position_embeddings", 512)
            if isinstance(rows, bool) or not isinstance(rows, int) or rows <= pad + 1:
                raise ValueError(f"{source}: max_position_embeddings must be an int above pad_token_id + 1 "
                                 f"({pad + 1}: roberta's positions start after the padding id), got {quoted(rows)}")
            fields.update(max_position_embeddings=rows - pad - 1, position_offset=pad + 1)
        return cls(**fields)

    def to_dict(self) -> dict:
        return asdict(self)


class BertEmbeddings(Module):
    """word + position + token type, then LayerNorm. Children named as in the checkpoints."""

    # children made by add_module in __init__, declared for readers and the type checker
    word_embeddings: Embedding
    position_embeddings: Embedding
    token_type_embeddings: Embedding
    LayerNorm: basic.LayerNorm                     # torch's name; the class is nn.basic.LayerNorm

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

    # children made by add_module in __init__, declared for readers and the type checker
    embeddings: BertEmbeddings
    encoder: Encoder

    def __init__(self, cfg: BertConfig, rng: np.random.Generator | None = None, dtype=np.float32) -> None:
        super().__init__()
        rng = rng if rng is not None else np.random.default_rng(0)
        self.config = cfg
        self.add_module("embeddings", BertEmbeddings(cfg, rng, dtype))
        self.add_module("encoder", Encoder(cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads,
                                           cfg.intermediate_size, dropout=0.0, activation=HIDDEN_ACTS[cfg.hidden_act],
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
    """A name of ``BertConfig.checkpoint_shapes`` -> npformer's key; None for the q/k/v entries,
    which are concatenated separately."""
    if key.startswith("embeddings."):
        return key
    parts = key.split(".")
    i, rest = parts[2], ".".join(parts[3:])                  # encoder.layer.I.REST
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


def _bert_name(model_type: str, local: str) -> str:
    """A checkpoint's key (its prefix removed) -> the name ``checkpoint_shapes`` gives it; a key it does
    not know comes back as it is (and is then refused as unexpected)."""
    local = local.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
    if model_type != "distilbert" or not local.startswith("transformer.layer."):
        return local
    i, _, rest = local[len("transformer.layer."):].partition(".")
    for own, bert in _DISTILBERT_LAYER:
        if rest.startswith(own):
            return f"encoder.layer.{i}.{bert}{rest[len(own):]}"
    return local


def _file_name(model_type: str, name: str) -> str:
    """A name of ``checkpoint_shapes`` -> the key a ``model_type`` checkpoint gives it (without prefix)."""
    if model_type != "distilbert" or not name.startswith("encoder.layer."):
        return name
    i, _, rest = name[len("encoder.layer."):].partition(".")
    for own, bert in _DISTILBERT_LAYER:
        if rest.startswith(bert):
            return f"transformer.layer.{i}.{own}{rest[len(bert):]}"
    return name


def _checkpoint_entries(path: Path, header: dict[str, TensorEntry], cfg: BertConfig) -> dict[str, TensorEntry]:
    """{name as ``checkpoint_shapes`` says it: entry} of the encoder's tensors in the safetensors
    header of ``path``: every tensor ``cfg`` implies, each of its shape and a float dtype (the config's
    torch_dtype when it names one), and no other; a FileFormatError naming the file and the tensor
    otherwise. The task heads and position_ids beside the encoder are left out; roberta's and
    distilbert's keys are matched under their own prefix and names."""
    keys = list(header)
    kind = cfg.model_type
    prefix = BERT_FAMILY[kind] if any(k.startswith(BERT_FAMILY[kind] + "embeddings.") for k in keys) else ""
    if f"{prefix}embeddings.word_embeddings.weight" not in header:
        raise FileFormatError(f"{path} holds no {FAMILY_NAMES[kind]} weights: no 'embeddings.word_embeddings.weight' "
                              f"(with prefix {quoted(BERT_FAMILY[kind])} or none); first keys: {keys[:4]}")
    found: dict[str, str] = {}                              # name as checkpoint_shapes says it -> key in the file
    for k in keys:
        local = k[len(prefix):]
        if not k.startswith(prefix) or local in _IGNORED_KEYS or local.startswith(_IGNORED_PREFIXES):
            continue                                        # task heads outside the encoder (cls.*, lm_head.*)
        name = _bert_name(kind, local)
        if name in found:
            raise FileFormatError(f"{path} holds {quoted(found[name])} and {quoted(k)}: one weight twice")
        found[name] = k
    return expected_entries(path, header, found, cfg.checkpoint_shapes(), cfg.torch_dtype,
                            lambda name: prefix + _file_name(kind, name),
                            f"a {FAMILY_NAMES[kind]} encoder of {cfg.num_hidden_layers} layers")


def _read_state(path: Path, entries: dict[str, TensorEntry], cfg: BertConfig) -> dict[str, np.ndarray]:
    """The checked ``entries`` of model.safetensors -> npformer BertModel state dict (numpy only):
    roberta's position rows before position 0 dropped, distilbert's token-type table one zero row."""
    raw = read_tensors(path, entries)
    state = {new: v for k, v in raw.items() if (new := _rename(k)) is not None}
    table = state["embeddings.position_embeddings.weight"]                 # (P + offset, E)
    state["embeddings.position_embeddings.weight"] = table[cfg.position_offset:]  # (P, E)
    if cfg.model_type == "distilbert":                                      # no segments: adds nothing
        state["embeddings.token_type_embeddings.weight"] = np.zeros((1, cfg.hidden_size), table.dtype)  # (1, E)
    for i in range(cfg.num_hidden_layers):
        base = f"encoder.layer.{i}.attention.self"
        for kind in ("weight", "bias"):
            # torch's MultiheadAttention stacks W_q, W_k, W_v row-wise in in_proj_weight (3E, E)
            state[f"encoder.layers.{i}.self_attn.in_proj_{kind}"] = np.concatenate(
                [raw[f"{base}.{p}.{kind}"] for p in ("query", "key", "value")])
    return state


def load_bert(path: str | Path, dtype=np.float32) -> BertModel:
    """A BertModel from a Hugging Face directory holding config.json and model.safetensors (a bert,
    roberta or distilbert encoder).

    Both are checked before the model is built: the config's size, then every tensor of the
    safetensors header against the config. Errors are one line naming the file; a directory with
    pytorch_model.bin (a pickle, never read) and no model.safetensors is told how to convert it."""
    path = Path(path)
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise FileNotFoundError(f"model directory {path} has no config.json")
    check_links(path)
    weights = safetensors_file(path)
    with reading(cfg_file):
        cfg = BertConfig.from_dict(read_json(cfg_file, top=dict), str(cfg_file))
    header, _ = read_header(weights)
    entries = _checkpoint_entries(weights, header, cfg)
    model = BertModel(cfg, dtype=dtype)
    state = _read_state(weights, entries, cfg)
    model.load_state_dict({k: v.astype(dtype, copy=False) for k, v in state.items()})
    return model
