"""Instructions read through a frozen pretrained language model: every word piece's last hidden state.

    text -> word pieces ([CLS] ... [SEP]) -> all-MiniLM-L6-v2's hidden states (pieces, S = 384)

Real vision-language-action models (RT-2, OpenVLA) read instructions this way: the language model
already places "crate" near "box" and "lift" near "pick up", so a policy trained on its states can
follow wordings its robot data never held. The model is frozen and its states depend on the text
alone, so each distinct text is run once and its states are kept: training on them then costs what
training on a learned word table does. The tabletop task uses it (``tabletop.text_reader``).

Dimension legend: B texts, L word pieces (padded), S state width.
"""
from __future__ import annotations

import numpy as np

UNK_PIECE = "[UNK]"


class PretrainedText:
    """A frozen sentence-transformers encoder's per-word-piece states, cached per text: ``inputs`` gives
    (B, L, S) float32 with zero rows for padding (a layer-normed state is never all zeros)."""

    name = "minilm"

    def __init__(self, encoder=None, max_words: int = 32) -> None:
        """encoder: a loaded ``pretrained.SentenceEncoder`` (None: all-MiniLM-L6-v2); max_words: the most
        word pieces a text may have, [CLS] and [SEP] included."""
        if encoder is None:
            from ..pretrained import SentenceEncoder
            encoder = SentenceEncoder.load()
        self.encoder, self.max_words = encoder, max_words
        self.text_dim = encoder.model.config.hidden_size       # S
        self._states: dict[str, np.ndarray] = {}                 # text -> (pieces, S), computed once

    def tokens(self, text: str) -> list[str]:
        """The word pieces read, in order: [CLS], the text's pieces, [SEP]."""
        return self.encoder.tokenizer.tokens([text])[0]

    def unknown(self, text: str) -> list[str]:
        """Word pieces the tokenizer could not read ([UNK]); their states are still read."""
        return [p for p in self.tokens(text) if p == UNK_PIECE]

    def inputs(self, texts: list[str], unknown_ok: bool = True) -> np.ndarray:
        """Text states (B, L, S) float32, L the longest text's pieces, shorter texts padded with zero rows.
        ValueError for an empty text or one of more than max_words pieces. (``unknown_ok``: any text is
        read; the argument matches the other readers'.)"""
        missing = sorted({t for t in texts if t not in self._states})
        for text in missing:
            n = len(self.tokens(text))
            if n <= 2:
                raise ValueError("the instruction is empty")
            if n > self.max_words:
                raise ValueError(f"the instruction has {n} word pieces, at most {self.max_words} are allowed")
        if missing:
            for text, st in zip(missing, self.encoder.token_embeddings(missing), strict=True):
                self._states[text] = st                          # (pieces, S)
        states = [self._states[t] for t in texts]
        out = np.zeros((len(texts), max(len(s) for s in states), self.text_dim), dtype=np.float32)  # (B, L, S)
        for i, st in enumerate(states):
            out[i, :len(st)] = st
        return out
