"""The shared base of character-level translation tasks (``copy``, ``dates``): pairs of strings
(source, target) become the encoder-decoder's three arrays

    src_ids  (B, S)  the source characters, right-padded with <pad>
    tgt_in   (B, T)  <bos> + target        (what the decoder reads; teacher forcing)
    tgt_out  (B, T)  target + <eos>        (what it must predict at each position; <pad> is ignored)

and are scored on held-out pairs by exact match: the share of sources whose whole output is right.

Exact match is computed from one teacher-forced forward pass. That equals greedy decoding's exact
match: greedy writes the target exactly iff, at every position t, the most likely token given the
true prefix target[:t] is target[t] (including the final <eos>), which is what the argmax of the
teacher-forced logits checks. Within one pass ties and rounding may differ from a step-by-step
decoder only in the last bit of a logit.
"""
from __future__ import annotations

import zlib

import numpy as np

from ..ops.softmax import log_softmax
from .tasks import Batch, Task
from .vocab import CharVocab, SharedVocab, pad_batch


def is_heldout(key: str, every: int) -> bool:
    """A stable split: ``key`` is held out when its CRC-32 is divisible by ``every`` (about 1 in ``every``).
    CRC-32 does not depend on Python's per-process hash seed, so the split is the same in every run."""
    return zlib.crc32(key.encode("utf-8")) % every == 0


class Seq2SeqTask(SharedVocab, Task):
    """Base for string-to-string tasks on the encoder-decoder Transformer.

    Subclasses provide ``vocab`` (a CharVocab shared by source and target), ``max_target_len``
    (target characters + 1 for <eos>), ``max_source_len`` and ``sample_pairs(rng, n, heldout)``.
    """

    model_kind = "transformer"
    primary_metric = "exact_match"
    higher_is_better = True
    eval_size = 1000                           # held-out pairs per evaluation by default

    vocab: CharVocab
    max_source_len: int
    max_target_len: int

    def sample_pairs(self, rng: np.random.Generator, n: int, heldout: bool) -> list[tuple[str, str]]:
        """``n`` (source, target) pairs from the training split, or from the held-out split."""
        raise NotImplementedError

    # text <-> ids (src_vocab and tgt_vocab come from SharedVocab)
    def encode_source(self, text: str) -> np.ndarray:
        """A source string -> (S,) ids; ValueError for empty text, unknown characters or overlong text."""
        if not isinstance(text, str) or not text.strip():
            raise ValueError("empty input: give a non-empty source text")
        ids = self.vocab.encode(text)                                   # (S,)
        if len(ids) > self.max_source_len:
            raise ValueError(f"source of {len(ids)} characters is longer than this task's limit of "
                             f"{self.max_source_len}: {text[:40]!r}")
        return ids

    def decode_target(self, ids) -> str:
        """Target ids -> text, stopping at <eos>."""
        return self.vocab.decode(ids)

    def encode_pairs(self, pairs: list[tuple[str, str]]):
        """pairs -> (src_ids (B, S), tgt_in (B, T), tgt_out (B, T)), int64, <pad>-filled."""
        v = self.vocab
        src = pad_batch([v.encode(s) for s, _ in pairs], v.pad_id)                  # (B, S)
        tgt_in = pad_batch([v.encode(t, bos=True) for _, t in pairs], v.pad_id)     # (B, T)
        tgt_out = pad_batch([v.encode(t, eos=True) for _, t in pairs], v.pad_id)    # (B, T)
        return src, tgt_in, tgt_out

    def default_model_config(self) -> dict:
        v = len(self.vocab)
        return {"src_vocab_size": v, "tgt_vocab_size": v, "pad_id": self.vocab.pad_id,
                "max_len": max(self.max_source_len, self.max_target_len)}

    # training and scoring
    def train_batch(self, rng: np.random.Generator, batch_size: int) -> Batch:
        src, tgt_in, tgt_out = self.encode_pairs(self.sample_pairs(rng, batch_size, heldout=False))
        pad = self.vocab.pad_id
        return Batch((src, tgt_in, tgt_out), n_tokens=int((src != pad).sum() + (tgt_in != pad).sum()))

    def evaluate(self, model, n: int | None = None, seed: int = 0, batch_size: int = 250) -> dict[str, float]:
        """exact_match (whole target right, <eos> included), token_accuracy and mean cross-entropy
        (nats per target token) on ``n`` held-out pairs drawn with ``seed``."""
        n = self.eval_size if n is None else int(n)
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        pairs = self.sample_pairs(np.random.default_rng(seed), n, heldout=True)
        pad = self.vocab.pad_id
        exact = right = tokens = 0
        nll = 0.0
        for i in range(0, n, batch_size):
            src, tgt_in, tgt_out = self.encode_pairs(pairs[i:i + batch_size])
            logits, _ = model.forward(src, tgt_in)                      # (B, T, V)
            logp = log_softmax(logits.astype(np.float64))               # (B, T, V)
            valid = tgt_out != pad                                      # (B, T)
            picked = np.take_along_axis(logp, tgt_out[..., None], axis=-1)[..., 0]   # (B, T)
            nll += float(-(picked * valid).sum())
            hit = logits.argmax(axis=-1) == tgt_out                     # (B, T)
            exact += int((hit | ~valid).all(axis=1).sum())
            right += int((hit & valid).sum())
            tokens += int(valid.sum())
        return {"exact_match": exact / n, "token_accuracy": right / tokens, "loss": nll / tokens, "n": n}
