"""WordPiece tokenization with the ``tokenizers`` library reading a tokenizer.json, and the
padding that turns a list of id sequences into one (B, T) batch with its mask.

Truncation keeps [CLS] and [SEP]: with ``max_length`` 256 a long text becomes [CLS], its
first 254 word pieces, [SEP], as sentence-transformers truncates.
Dimension legend: B batch, T positions.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..settings import FileFormatError, parse_json, read_bounded

MAX_TOKENIZER_BYTES = 64 << 20      # MiniLM's tokenizer.json is 466 KB; a 250,000-piece vocabulary's ~20 MB



def read_tokenizer_json(path: Path):
    """The ``tokenizers.Tokenizer`` of the tokenizer.json at ``path``: read with a size bound, checked as
    limited JSON first, a file the library refuses a FileFormatError of one line naming it."""
    from tokenizers import Tokenizer

    data = read_bounded(path, MAX_TOKENIZER_BYTES)
    parse_json(data, path, top=dict)
    try:
        return Tokenizer.from_str(data.decode("utf-8"))
    except Exception as e:                                              # tokenizers raises its own exception type
        raise FileFormatError(f"{path} is not a tokenizer the tokenizers library reads "
                              f"({(str(e).splitlines() or [''])[0]})") from None

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
        self.vocab_size = self._tok.get_vocab_size()
        # tokenizer.json may carry its own padding/truncation (MiniLM's pads to 128): we pad ourselves
        self._tok.no_padding()
        self._tok.enable_truncation(self.max_length)
        pad = self._tok.token_to_id("[PAD]")
        self.pad_id = 0 if pad is None else int(pad)

    def encode(self, texts: list[str]) -> list[np.ndarray]:
        """One int64 id array per text, [CLS] ... [SEP], at most ``max_length`` long."""
        return [np.asarray(e.ids, dtype=np.int64) for e in self._tok.encode_batch(list(texts))]

    def tokens(self, texts: list[str]) -> list[list[str]]:
        """The word pieces of each text as strings, [CLS] ... [SEP], cut as ``encode`` cuts them."""
        return [list(e.tokens) for e in self._tok.encode_batch(list(texts))]

    def spans(self, texts: list[str]) -> list[list[tuple[int, int]]]:
        """Each piece's (start, end) character offsets in its text, (0, 0) for [CLS] and [SEP], cut as
        ``encode`` cuts them (what the explorer reports of a truncated text)."""
        return [[(int(a), int(b)) for a, b in e.offsets] for e in self._tok.encode_batch(list(texts))]

    def pad(self, seqs: list[np.ndarray]):
        """Right-pad to the longest: (ids (B, T) int64, mask (B, T) bool, True = real token)."""
        lengths = np.array([len(s) for s in seqs])                         # (B,)
        t = int(lengths.max())
        ids = np.full((len(seqs), t), self.pad_id, dtype=np.int64)         # (B, T)
        for i, s in enumerate(seqs):
            ids[i, :len(s)] = s
        mask = np.arange(t)[None, :] < lengths[:, None]                    # (B, T)
        return ids, mask
