"""``text``: a character-level decoder-only language model on any UTF-8 text file (``--data FILE``).

The model (GPT-style, ``DecoderLM``) reads ``block_size`` characters and predicts each next one.
The vocabulary is every character of the file. The last ``heldout_fraction`` of the file is never
trained on; it is scored in nats and bits per character.
"""
from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass

import numpy as np

from ..ops.softmax import log_softmax
from .tasks import Batch, Task
from .vocab import CharVocab, SharedVocab


def read_utf8(path: str) -> str:
    """The text of ``path``; ValueError (one line) when it is missing, not UTF-8 or empty."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"data file not found: {path}")
    raw = open(path, "rb").read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not UTF-8 text ({e.reason} at byte {e.start})") from None
    if not text:
        raise ValueError(f"{path} is empty")
    return text


class TextTask(SharedVocab, Task):
    name = "text"
    model_kind = "decoder_lm"
    primary_metric = "bits_per_char"
    higher_is_better = False
    uses_data_file = True
    description = "character-level language model on a UTF-8 file (--data FILE; decoder-only)"
    eval_size = 64                      # held-out windows per evaluation by default

    @dataclass
    class Settings:
        data_path: str = ""             # the text file (absolute path)
        sha256: str = ""                # its hash when the run started (resuming checks it)
        chars: str = ""                 # the vocabulary: every distinct character of the file
        block_size: int = 64            # characters of context per training window
        heldout_fraction: float = 0.1   # the file's last part, never trained on

        def __post_init__(self) -> None:
            if self.block_size < 1:
                raise ValueError(f"block_size must be >= 1, got {self.block_size}")
            if not 0.0 < self.heldout_fraction < 1.0:
                raise ValueError(f"heldout_fraction must be in (0, 1), got {self.heldout_fraction}")

    settings: Settings

    def __init__(self, settings=None) -> None:
        super().__init__(settings)
        self.vocab = CharVocab(list(self.settings.chars))
        self._splits: tuple[np.ndarray, np.ndarray] | None = None

    @classmethod
    def create(cls, overrides=None, data_path=None) -> "TextTask":
        """Read ``data_path`` (UTF-8), build the vocabulary, and check both splits hold a window."""
        if data_path is None:
            raise ValueError("task 'text' needs a text file: --data FILE")
        for key in ("data_path", "sha256", "chars"):
            if key in (overrides or {}):
                raise ValueError(f"data.{key} comes from --data and cannot be set")
        text = read_utf8(data_path)
        raw = text.encode("utf-8")
        base = {"data_path": os.path.abspath(data_path), "sha256": hashlib.sha256(raw).hexdigest(),
                "chars": "".join(sorted(set(text)))}
        task = cls(cls.settings_with({**(overrides or {}), **base}))
        task._set_text(text)
        return task

    def _set_text(self, text: str) -> None:
        s = self.settings
        ids = self.vocab.encode(text)                                   # (N,)
        cut = int(len(ids) * (1.0 - s.heldout_fraction))
        train, held = ids[:cut], ids[cut:]
        need = s.block_size + 1
        if len(train) < need or len(held) < need:
            raise ValueError(f"{s.data_path} is too short: {len(ids)} characters split into {len(train)} for "
                             f"training and {len(held)} held out, each needs at least block_size + 1 = {need}")
        self._splits = (train, held)

    def splits(self) -> tuple[np.ndarray, np.ndarray]:
        """(train ids, held-out ids), reading the file on first use and checking it is unchanged."""
        if self._splits is None:
            s = self.settings
            text = read_utf8(s.data_path)
            if hashlib.sha256(text.encode("utf-8")).hexdigest() != s.sha256:
                raise ValueError(f"{s.data_path} changed since this run started (its sha256 differs)")
            self._set_text(text)
        assert self._splits is not None                            # _set_text made them
        return self._splits

    # text <-> ids (src_vocab and tgt_vocab come from SharedVocab)
    def encode_source(self, text: str) -> np.ndarray:
        """A prompt -> (T,) ids; ValueError for an empty prompt or characters the file never had."""
        if not isinstance(text, str) or not text:
            raise ValueError("empty input: give a non-empty prompt")
        return self.vocab.encode(text)

    def decode_target(self, ids) -> str:
        return self.vocab.decode(ids, stop_at_eos=False)

    @property
    def max_target_len(self) -> int:
        return self.settings.block_size

    # model, training and scoring
    def default_model_config(self) -> dict:
        # GPT-style (pre-LN, learned positions, GELU) at a size a CPU trains in minutes
        return {"vocab_size": len(self.vocab), "max_len": self.settings.block_size, "d_model": 128,
                "n_heads": 4, "d_ff": 512, "n_layers": 3, "dropout": 0.1}

    def default_train_config(self) -> dict:
        return {"steps": 1000, "batch_size": 32, "optimizer": "adamw", "weight_decay": 0.01,
                "schedule": "cosine", "lr": 3e-3, "warmup": 100, "eval_every": 250, "eval_n": 32,
                "label_smoothing": 0.0}

    def _windows(self, ids: np.ndarray, starts: np.ndarray) -> np.ndarray:
        span = np.arange(self.settings.block_size + 1)                  # (T + 1,)
        return ids[starts[:, None] + span]                              # (B, T + 1)

    def train_batch(self, rng, batch_size) -> Batch:
        train, _ = self.splits()
        starts = rng.integers(0, len(train) - self.settings.block_size, size=batch_size)   # (B,)
        w = self._windows(train, starts)                                # (B, T + 1)
        return Batch((w[:, :-1], w[:, 1:]), n_tokens=int(w[:, :-1].size))

    def evaluate(self, model, n=None, seed=0, batch_size: int = 16) -> dict[str, float]:
        """Mean cross-entropy over ``n`` held-out windows: loss (nats/char) and bits_per_char."""
        n = self.eval_size if n is None else int(n)
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        _, held = self.splits()
        rng = np.random.default_rng(seed)
        starts = rng.integers(0, len(held) - self.settings.block_size, size=n)   # (n,)
        nll, count = 0.0, 0
        for i in range(0, n, batch_size):
            w = self._windows(held, starts[i:i + batch_size])           # (b, T + 1)
            logits, _ = model.forward(w[:, :-1])                        # (b, T, V)
            logp = log_softmax(logits.astype(np.float64))               # (b, T, V)
            nll += float(-np.take_along_axis(logp, w[:, 1:, None], axis=-1).sum())
            count += w[:, 1:].size
        loss = nll / count
        return {"loss": loss, "bits_per_char": loss / math.log(2), "n": n}
