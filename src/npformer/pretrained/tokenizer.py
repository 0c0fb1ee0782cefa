"""WordPiece tokenization with the ``tokenizers`` library (called through ``tokenizers_lib``) reading
a tokenizer.json, and the padding that turns a list of id sequences into one (B, T) batch with its mask.

Truncation keeps [CLS] and [SEP]: with ``max_length`` 256 a long text becomes [CLS], its
first 254 word pieces, [SEP], as sentence-transformers truncates.
Dimension legend: B batch, T positions.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .tokenizers_lib import MAX_TOKENIZER_BYTES, read_tokenizer_json

__all__ = ["MAX_TOKENIZER_BYTES", "WordPieceTokenizer", "read_tokenizer_json"]


class WordPieceTokenizer:
    def __init__(self, path: str | Path, max_length: int) -> None:
        """path: a tokenizer.json; max_length: the most word pieces per text, special tokens included.

        The file is read with ``settings.parse_json``'s limits (size, depth, numbers) before the
        ``tokenizers`` library parses it; what that library refuses is a FileFormatError naming it."""

        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no tokenizer file {path}")
        if max_length < 2:
            raise ValueError(f"max_length must be >= 2 ([CLS] and [SEP]), got {max_length}")
        self.max_length = int(max_length)
        self._tok = read_tokenizer_json(path)
        self.vocab_size = self._tok.vocab_size()
        # tokenizer.json may carry its own padding/truncation (MiniLM's pads to 128): we pad ourselves
        self._tok.set_limits(self.max_length)
        pad = self._tok.token_to_id("[PAD]")
        self.pad_id = 0 if pad is None else pad
        # the largest id it can give: of the vocabulary with its added tokens, and of the special
        # tokens the post-processor adds (its template's ids need not be the vocabulary's)
        self.max_id = max(self._tok.max_vocab_id(), self.pad_id, *self._tok.encode_batch([""])[0]["ids"])

    def encode(self, texts: list[str]) -> list[np.ndarray]:
        """One int64 id array per text, [CLS] ... [SEP], at most ``max_length`` long."""
        return [np.asarray(e["ids"], dtype=np.int64) for e in self._tok.encode_batch(list(texts))]

    def tokens(self, texts: list[str]) -> list[list[str]]:
        """The word pieces of each text as strings, [CLS] ... [SEP], cut as ``encode`` cuts them."""
        return [e["tokens"] for e in self._tok.encode_batch(list(texts), tokens=True)]

    def spans(self, texts: list[str]) -> list[list[tuple[int, int]]]:
        """Each piece's (start, end) character offsets in its text, (0, 0) for [CLS] and [SEP], cut as
        ``encode`` cuts them (what the explorer reports of a truncated text)."""
        return [e["offsets"] for e in self._tok.encode_batch(list(texts), offsets=True)]

    def pad(self, seqs: list[np.ndarray]):
        """Right-pad to the longest: (ids (B, T) int64, mask (B, T) bool, True = real token)."""
        lengths = np.array([len(s) for s in seqs])                         # (B,)
        t = int(lengths.max())
        ids = np.full((len(seqs), t), self.pad_id, dtype=np.int64)         # (B, T)
        for i, s in enumerate(seqs):
            ids[i, :len(s)] = s
        mask = np.arange(t)[None, :] < lengths[:, None]                    # (B, T)
        return ids, mask
