"""GPT-2 (Radford et al. 2019) from a Hugging Face directory, as an ``npformer.models.DecoderLM``.

GPT-2 is npformer's decoder-only blocks with these settings, all read from config.json:
    pre-LN blocks with a final LayerNorm (``ln_f``), learned positions added to unscaled token
    vectors, a causal mask, GELU's tanh approximation ("gelu_new"), the output tied to the token
    table, LayerNorm eps = layer_norm_epsilon.
So there is no GPT-2 class: the loader fills a DecoderLM. What differs is the checkpoint's layout,
handled here: its linear layers are ``Conv1D`` modules whose weights are stored (in, out), the
transpose of a torch Linear's (out, in); ``attn.c_attn`` holds q, k and v in one (E, 3E) matrix,
whose transpose is exactly MultiHeadAttention's in_proj_weight (3E, E) with rows q, k, v; and the
causal-mask buffers some checkpoints carry (``attn.bias``, ``attn.masked_bias``) are not weights.

Loading trusts no file: config.json is read with ``settings.read_json``'s limits and the model's size
computed from it before anything is built; the safetensors header alone is read next and every
tensor's shape and dtype compared with what the config implies; only then is the model built and
the tensors read. The tokenizer (``ByteBPETokenizer``) is a byte-level BPE read by the ``tokenizers``
library from tokenizer.json, or from vocab.json + merges.txt, each file read with a size limit first.

Dimension legend: E model width (n_embd), F inner width, V vocabulary, L positions (n_positions).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from ..models import DecoderLM, DecoderLMConfig
from ..models.config import MAX_LAYERS, MAX_PARAMETERS, check_float, check_int
from ..settings import FileFormatError, check_links, parse_json, quoted, read_bounded, read_json, reading
from ..tensorfile import TensorEntry, read_header, read_tensors
from .hf import safetensors_file
from .tokenizers_lib import MAX_TOKENIZER_BYTES, byte_level_bpe, read_tokenizer_json
from .weights import WEIGHT_DTYPES, expected_entries

# config.json's activation_function values that are GELU's tanh approximation
TANH_GELU_NAMES = ("gelu_new", "gelu_pytorch_tanh")
_BUFFERS = ("attn.bias", "attn.masked_bias")          # causal-mask buffers saved by older checkpoints


@dataclass
class GPT2Config:
    vocab_size: int = 50257            # V, rows of the token table (wte)
    n_embd: int = 768                  # E, the model width
    n_layer: int = 12                  # blocks
    n_head: int = 12                   # heads; E must divide by them
    n_positions: int = 1024            # rows of the learned position table (wpe): the longest context
    n_inner: int | None = None         # FFN inner width; None: 4 E
    layer_norm_epsilon: float = 1e-5   # eps of every LayerNorm
    activation_function: str = "gelu_new"  # only GELU's tanh approximation
    torch_dtype: str | None = None     # the weights' dtype ("float32", "float16", "float64"); None: any of them
    eos_token_id: int | None = None    # <|endoftext|>: generation stops after it (None, or outside V: never)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "n_embd", "n_layer", "n_head", "n_positions"):
            check_int(name, getattr(self, name))
        if self.n_inner is not None:
            check_int("n_inner", self.n_inner)
        if self.eos_token_id is not None:
            check_int("eos_token_id", self.eos_token_id, minimum=0)
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")
        if self.activation_function not in TANH_GELU_NAMES:
            raise ValueError(f"activation_function {quoted(self.activation_function)} is not supported: npformer runs "
                             f"GPT-2 with GELU's tanh approximation, {' or '.join(map(repr, TANH_GELU_NAMES))}")
        check_float("layer_norm_epsilon", self.layer_norm_epsilon, 0.0, 1.0, low_inclusive=False)
        if self.torch_dtype is not None and self.torch_dtype not in WEIGHT_DTYPES:
            raise ValueError(f"torch_dtype {quoted(self.torch_dtype)} is not supported: npformer reads "
                             f"{', '.join(WEIGHT_DTYPES)} weights")
        if self.n_layer > MAX_LAYERS:
            raise ValueError(f"n_layer is {self.n_layer:,}: npformer builds at most {MAX_LAYERS:,} layers")
        n = sum(math.prod(shape) for _, shape in self.checkpoint_shapes())
        if n > MAX_PARAMETERS:
            raise ValueError(f"the config describes a model of {n:,} parameters, more than npformer builds "
                             f"({MAX_PARAMETERS:,}, 2^31)")

    @property
    def d_ff(self) -> int:
        return self.n_inner if self.n_inner is not None else 4 * self.n_embd

    def checkpoint_shapes(self):
        """Yields (name, shape) of every weight, named as in Hugging Face's GPT2Model (no prefix)."""
        e, f = self.n_embd, self.d_ff
        yield "wte.weight", (self.vocab_size, e)
        yield "wpe.weight", (self.n_positions, e)
        for i in range(self.n_layer):
            for name, shape in (("ln_1", (e,)), ("attn.c_attn", (e, 3 * e)), ("attn.c_proj", (e, e)),
                                ("ln_2", (e,)), ("mlp.c_fc", (e, f)), ("mlp.c_proj", (f, e))):
                yield f"h.{i}.{name}.weight", shape
                yield f"h.{i}.{name}.bias", shape[-1:]
        yield "ln_f.weight", (e,)
        yield "ln_f.bias", (e,)

    @classmethod
    def from_dict(cls, cfg: dict, source: str = "config.json") -> GPT2Config:
        """Checks that ``cfg`` (a Hugging Face config.json) describes a GPT-2 that npformer's blocks run."""
        if cfg.get("model_type") != "gpt2":
            raise ValueError(f"{source}: model_type {quoted(cfg.get('model_type'))} is not 'gpt2'")
        # variants of GPT-2's attention that the blocks do not compute
        for key, plain in (("scale_attn_weights", True), ("scale_attn_by_inverse_layer_idx", False),
                           ("add_cross_attention", False)):
            if cfg.get(key, plain) != plain:
                raise ValueError(f"{source}: {key} {quoted(cfg[key])} is not supported (npformer runs {key} {plain})")
        if cfg.get("tie_word_embeddings", True) is not True:
            raise ValueError(f"{source}: tie_word_embeddings {quoted(cfg['tie_word_embeddings'])} is not supported: "
                             "npformer runs GPT-2 with its output tied to the token table")
        values = {f.name: cfg[f.name] for f in fields(cls) if f.name in cfg}
        if "torch_dtype" not in values and "dtype" in cfg:              # transformers 5 writes "dtype"
            values["torch_dtype"] = cfg["dtype"]
        return cls(**values)

    def lm_config(self) -> DecoderLMConfig:
        """The DecoderLM that computes this GPT-2 (inference: no dropout)."""
        return DecoderLMConfig(vocab_size=self.vocab_size, d_model=self.n_embd, n_heads=self.n_head, d_ff=self.d_ff,
                               n_layers=self.n_layer, max_len=self.n_positions, dropout=0.0, positional="learned",
                               activation="gelu_tanh", norm_first=True, final_norm=True, tie_output=True,
                               pad_id=-1, eps=float(self.layer_norm_epsilon), scale_embeddings=False)


def read_config(path: str | Path) -> GPT2Config:
    """The checked GPT2Config of the directory ``path``; one line naming the file otherwise."""
    path = Path(path)
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise FileNotFoundError(f"model directory {path} has no config.json")
    check_links(path)
    with reading(cfg_file):
        return GPT2Config.from_dict(read_json(cfg_file, top=dict), str(cfg_file))


def _checkpoint_entries(path: Path, header: dict[str, TensorEntry], cfg: GPT2Config) -> dict[str, TensorEntry]:
    """{name as ``checkpoint_shapes`` says it: entry}: every weight ``cfg`` implies, of its shape and a
    float dtype, found under the prefix "transformer." or none; the mask buffers are skipped and
    ``lm_head.weight`` is allowed (tied: it must then be the token table, see ``_check_lm_head``).
    Anything else is a FileFormatError naming the file and the tensor."""
    prefix = "transformer." if "transformer.wte.weight" in header else ""
    if f"{prefix}wte.weight" not in header:
        raise FileFormatError(f"{path} holds no GPT-2 weights: no 'wte.weight' (with prefix 'transformer.' or "
                              f"none); first keys: {list(header)[:4]}")
    found = {}
    for key in header:
        local = key[len(prefix):] if key.startswith(prefix) else None
        if key == "lm_head.weight" or (local is not None and _is_buffer(local)):
            continue
        if local is None:
            raise FileFormatError(f"{path}: unexpected weight {quoted(key)} for a GPT-2")
        found[local] = key
    entries = expected_entries(path, header, found, cfg.checkpoint_shapes(), cfg.torch_dtype,
                               lambda name: prefix + name, f"a GPT-2 of {cfg.n_layer} layers")
    head = header.get("lm_head.weight")
    if head is not None:
        if head.shape != (cfg.vocab_size, cfg.n_embd):
            raise FileFormatError(f"{path}: lm_head.weight has shape {head.shape}, the config gives "
                                  f"{(cfg.vocab_size, cfg.n_embd)}")
        entries["lm_head.weight"] = head
    return entries


def _is_buffer(name: str) -> bool:
    """h.N.attn.bias or h.N.attn.masked_bias: a causal-mask buffer, not a weight (c_attn.bias is one)."""
    parts = name.split(".", 2)
    return len(parts) == 3 and parts[0] == "h" and parts[1].isdigit() and parts[2] in _BUFFERS


def _state_dict(raw: dict[str, np.ndarray], n_layers: int, dtype) -> dict[str, np.ndarray]:
    """The checkpoint's tensors -> DecoderLM's state_dict: Conv1D weights (in, out) transposed to
    Linear's (out, in); c_attn's (E, 3E) transposed is in_proj_weight (3E, E), rows q, k, v."""
    def cast(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a, dtype=dtype)

    state = {"embed.tok.weight": cast(raw["wte.weight"]), "embed.pos.weight": cast(raw["wpe.weight"]),
             "blocks.norm.weight": cast(raw["ln_f.weight"]), "blocks.norm.bias": cast(raw["ln_f.bias"])}
    conv1d = {"attn.c_attn": "self_attn.in_proj_", "attn.c_proj": "self_attn.out_proj.",
              "mlp.c_fc": "ffn.linear1.", "mlp.c_proj": "ffn.linear2."}
    for i in range(n_layers):
        src, dst = f"h.{i}.", f"blocks.layers.{i}."
        for a, b in conv1d.items():
            state[dst + b + "weight"] = cast(raw[f"{src}{a}.weight"].T)     # (out, in)
            state[dst + b + "bias"] = cast(raw[f"{src}{a}.bias"])
        for a, b in (("ln_1", "norm1"), ("ln_2", "norm2")):
            for kind in ("weight", "bias"):
                state[f"{dst}{b}.{kind}"] = cast(raw[f"{src}{a}.{kind}"])
    return state


def load_gpt2(path: str | Path, dtype=np.float32) -> tuple[DecoderLM, GPT2Config]:
    """(DecoderLM in eval mode, its GPT2Config) from a Hugging Face GPT-2 directory holding config.json
    and model.safetensors. Everything is checked before the model is built; errors are one line."""
    path = Path(path)
    cfg = read_config(path)
    weights = safetensors_file(path)            # refuses pickled weights, saying how to convert them
    header, _ = read_header(weights)
    entries = _checkpoint_entries(weights, header, cfg)
    raw = read_tensors(weights, entries)
    head = raw.pop("lm_head.weight", None)
    if head is not None and not np.array_equal(head, raw["wte.weight"]):
        raise FileFormatError(f"{weights}: lm_head.weight differs from wte.weight; npformer runs GPT-2 with "
                              "its output tied to the token table")
    model = _empty_model(cfg.lm_config(), dtype)
    model.load_state_dict(_state_dict(raw, cfg.n_layer, dtype))
    model.eval()
    return model, cfg


def _empty_model(config: DecoderLMConfig, dtype) -> DecoderLM:
    """A DecoderLM whose weights are about to be overwritten: built with one-row tables, then given
    empty tables of the real sizes, so that the (V, E) table's random draws are not made and thrown away."""
    model = DecoderLM(DecoderLMConfig(**{**config.to_dict(), "vocab_size": 1, "max_len": 1}), rng=0, dtype=dtype)
    model.config = config
    model.embed.tok.params["weight"] = np.empty((config.vocab_size, config.d_model), dtype=dtype)  # (V, E)
    model.embed.pos.params["weight"] = np.empty((config.max_len, config.d_model), dtype=dtype)    # (L, E)
    model.embed.max_len = config.max_len
    return model


# -- the tokenizer ----------------------------------------------------------------------------

class ByteBPETokenizer:
    """GPT-2's byte-level BPE, run by the ``tokenizers`` library: ``encode(text) -> ids``,
    ``decode(ids) -> text``. Reads tokenizer.json, or else vocab.json + merges.txt."""

    FILES = ("tokenizer.json", "vocab.json + merges.txt")

    def __init__(self, path: str | Path) -> None:
        path = Path(path)
        check_links(path)
        tok_file, vocab_file, merges_file = path / "tokenizer.json", path / "vocab.json", path / "merges.txt"
        if tok_file.is_file():
            self._tok = read_tokenizer_json(tok_file)
        elif vocab_file.is_file() and merges_file.is_file():
            vocab = parse_json(read_bounded(vocab_file, MAX_TOKENIZER_BYTES), vocab_file, top=dict)
            if not all(isinstance(k, str) and type(v) is int and v >= 0 for k, v in vocab.items()):
                raise FileFormatError(f"{vocab_file} must map tokens to non-negative int ids")
            with reading(merges_file):
                lines = read_bounded(merges_file, MAX_TOKENIZER_BYTES).decode("utf-8").splitlines()
                merges = [_merge(line, merges_file, n) for n, line in enumerate(lines, 1)
                          if line and not line.startswith("#version")]
            self._tok = byte_level_bpe(vocab, merges, f"{vocab_file} and {merges_file}")
        else:
            raise FileNotFoundError(f"model directory {path} has no tokenizer: npformer needs tokenizer.json, "
                                    "or vocab.json and merges.txt")
        self._tok.set_limits(None)
        self.vocab_size = self._tok.vocab_size()

    def encode(self, text: str) -> list[int]:
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        return self._tok.encode_batch([text], add_special_tokens=False)[0]["ids"]

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids)

    def token_texts(self, ids: list[int]) -> list[str]:
        """Each id decoded alone (a piece of a multi-byte character shows as U+FFFD)."""
        return self._tok.decode_each(ids)


def _merge(line: str, source: Path, n: int) -> tuple[str, str]:
    parts = line.split(" ")
    if len(parts) != 2:                                     # the line is never quoted: it may be anything
        raise FileFormatError(f"{source} line {n}: a merge is two tokens separated by one space")
    return parts[0], parts[1]
