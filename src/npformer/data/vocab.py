"""A character vocabulary: one id per character, after four special tokens.

    id 0 <pad>   fills the end of shorter sequences in a batch (ignored by the loss)
    id 1 <bos>   begins a target sequence (the decoder's first input)
    id 2 <eos>   ends a sequence (decoding stops when the model writes it)
    id 3 <unk>   stands for a character the vocabulary lacks, only when asked for
    id 4 ...     the characters, in the order given
"""
from __future__ import annotations

from typing import Iterable

import numpy as np

SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")


class CharVocab:
    pad_id, bos_id, eos_id, unk_id = 0, 1, 2, 3

    def __init__(self, chars: Iterable[str]) -> None:
        chars = list(chars)
        for c in chars:
            if not (isinstance(c, str) and len(c) == 1):
                raise ValueError(f"a character vocabulary holds single characters, got {c!r}")
        if len(set(chars)) != len(chars):
            dup = sorted({c for c in chars if chars.count(c) > 1})
            raise ValueError(f"characters appear twice in the vocabulary: {dup!r}")
        self.chars = chars
        self.stoi = {c: i + len(SPECIALS) for i, c in enumerate(chars)}

    @classmethod
    def from_text(cls, text: str) -> "CharVocab":
        """Every distinct character of ``text``, sorted by code point."""
        return cls(sorted(set(text)))

    def __len__(self) -> int:
        return len(SPECIALS) + len(self.chars)

    def __contains__(self, c: str) -> bool:
        return c in self.stoi

    def missing(self, text: str) -> list[str]:
        """The characters of ``text`` the vocabulary lacks, each once, in order of appearance."""
        return list(dict.fromkeys(c for c in text if c not in self.stoi))

    def encode(self, text: str, bos: bool = False, eos: bool = False, unknown: str = "error") -> np.ndarray:
        """text -> (T,) int64 ids. unknown="error" raises ValueError naming the characters the
        vocabulary lacks; unknown="unk" maps them to <unk>."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        if unknown not in ("error", "unk"):
            raise ValueError(f"unknown must be 'error' or 'unk', got {unknown!r}")
        if unknown == "error":
            bad = self.missing(text)
            if bad:
                shown = ", ".join(repr(c) for c in bad[:10]) + (" ..." if len(bad) > 10 else "")
                raise ValueError(f"characters outside the vocabulary: {shown} in {_clip(text)!r}")
        ids = [self.stoi.get(c, self.unk_id) for c in text]
        if bos:
            ids.insert(0, self.bos_id)
        if eos:
            ids.append(self.eos_id)
        return np.asarray(ids, dtype=np.int64)                          # (T,)

    def decode(self, ids, stop_at_eos: bool = True) -> str:
        """ids -> text, dropping <pad> and <bos>, stopping at the first <eos>; <unk> shows as U+FFFD."""
        out = []
        n = len(self)
        for i in np.asarray(ids).reshape(-1).tolist():
            if i == self.eos_id and stop_at_eos:
                break
            if i in (self.pad_id, self.bos_id, self.eos_id):
                continue
            if i == self.unk_id:
                out.append("\ufffd")
            elif 0 <= i < n:
                out.append(self.chars[i - len(SPECIALS)])
            else:
                raise ValueError(f"id {i} is outside the vocabulary of {n} tokens")
        return "".join(out)

    def to_dict(self) -> dict:
        return {"specials": list(SPECIALS), "chars": "".join(self.chars)}

    @classmethod
    def from_dict(cls, d: dict) -> "CharVocab":
        if not isinstance(d, dict) or not isinstance(d.get("chars"), str):
            raise ValueError("a vocabulary must be a dict with a 'chars' string")
        if list(d.get("specials", SPECIALS)) != list(SPECIALS):
            raise ValueError(f"vocabulary specials must be {list(SPECIALS)}, got {d.get('specials')}")
        return cls(list(d["chars"]))

    def __eq__(self, other) -> bool:
        return isinstance(other, CharVocab) and self.chars == other.chars

    def __repr__(self) -> str:
        return f"CharVocab({len(self)} tokens)"


class SharedVocab:
    """Mixin for tasks whose source and target share one character vocabulary, ``self.vocab``."""

    vocab: CharVocab

    @property
    def src_vocab(self) -> CharVocab:
        return self.vocab

    @property
    def tgt_vocab(self) -> CharVocab:
        return self.vocab


def _clip(text: str, n: int = 40) -> str:
    return text if len(text) <= n else text[:n] + "..."


def pad_batch(seqs: list[np.ndarray], pad_id: int = CharVocab.pad_id, length: int | None = None) -> np.ndarray:
    """Stack 1-D id arrays into (B, L) int64, right-padded with ``pad_id`` (L = longest, or ``length``)."""
    if not seqs:
        raise ValueError("pad_batch needs at least one sequence")
    width = max(len(s) for s in seqs) if length is None else length
    out = np.full((len(seqs), width), pad_id, dtype=np.int64)           # (B, L)
    for i, s in enumerate(seqs):
        if len(s) > width:
            raise ValueError(f"sequence {i} has {len(s)} ids, more than the length {width}")
        out[i, :len(s)] = s
    return out
