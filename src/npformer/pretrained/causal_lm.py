"""A pretrained causal language model (a GPT-2-family Hugging Face directory) run by npformer:

    lm = CausalLM.load(DIR)
    lm.logits(ids)                      ids (B, T) int64, no padding -> logits (B, T, V)
    lm.generate("Once upon", 20)        greedy (temperature 0) or sampled continuation, a str
    lm.generate([464, 3290], 20)        the same from token ids: a list of the new ids

The model is an ``npformer.models.DecoderLM`` (``gpt2.load_gpt2``); both calls run through the KV
cache of ``npformer.decode`` (``CachedLM``): the prompt's positions in one step, then one position per
new token, its keys and values written into a cache allocated once for the whole generation.

Dimension legend: B batch, T positions, V vocabulary, L context length (n_positions).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..decode import decode_loop, make_stepper, sample_next
from ..models import DecoderLM
from ..settings import check_links
from .gpt2 import ByteBPETokenizer, GPT2Config, load_gpt2


class CausalLM:
    """A DecoderLM with its GPT-2 config and byte-level BPE tokenizer; inference only."""

    def __init__(self, model: DecoderLM, config: GPT2Config, tokenizer: ByteBPETokenizer,
                 eos_id: int | None = None) -> None:
        self.model, self.config, self.tokenizer = model.eval(), config, tokenizer
        self.eos_id = eos_id                # generation stops after this id (config.json's eos_token_id)

    @classmethod
    def load(cls, path: str | Path, dtype=np.float32) -> CausalLM:
        """The model of a GPT-2 directory: config.json, model.safetensors, and tokenizer.json or
        vocab.json + merges.txt. Each missing or malformed file is one line naming it."""
        path = Path(path)
        if not path.is_dir():
            raise FileNotFoundError(f"no model directory {path}")
        check_links(path)                                   # a link leading outside: refused before any read
        tokenizer = ByteBPETokenizer(path)                  # first: a missing tokenizer costs no weights read
        model, config = load_gpt2(path, dtype)
        eos = config.eos_token_id
        return cls(model, config, tokenizer, eos if eos is not None and eos < config.vocab_size else None)

    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size

    @property
    def n_positions(self) -> int:
        return self.config.n_positions

    def check_ids(self, ids, name: str = "ids") -> np.ndarray:
        """ids as a (B, T) int64 array, or a ValueError/TypeError naming ``name`` and what was expected."""
        ids = np.asarray(ids)
        if ids.dtype.kind not in "iu":
            raise TypeError(f"{name} must hold integer token ids (int64), got dtype {ids.dtype}")
        if ids.ndim != 2 or 0 in ids.shape:
            raise ValueError(f"{name} must have shape (batch, length) with both >= 1, got shape {ids.shape}")
        if ids.min() < 0 or ids.max() >= self.vocab_size:
            raise ValueError(f"{name} holds ids outside the vocabulary [0, {self.vocab_size}): "
                             f"min {ids.min()}, max {ids.max()}")
        if ids.shape[1] > self.n_positions:
            raise ValueError(f"{name} has {ids.shape[1]} positions, more than the model's n_positions "
                             f"{self.n_positions}")
        return ids.astype(np.int64, copy=False)

    def logits(self, ids) -> np.ndarray:
        """ids (B, T) int64, every position a real token (no padding) -> logits (B, T, V) for the token
        after each position. Runs as one KV-cache step (long inputs take the tiled attention kernel)."""
        ids = self.check_ids(ids)
        stepper = make_stepper(self.model, batch=ids.shape[0], max_len=ids.shape[1])
        return stepper.step(ids)                                               # (B, T, V)

    def encode(self, text: str) -> list[int]:
        """The token ids of ``text``, each checked against the model's vocabulary."""
        ids = self.tokenizer.encode(text)
        bad = [i for i in ids if i >= self.vocab_size]
        if bad:
            raise ValueError(f"the tokenizer gives id {bad[0]}, outside the model's vocabulary of "
                             f"{self.vocab_size}: tokenizer and weights do not belong together")
        return ids

    def generate(self, prompt: str | list[int], max_new_tokens: int = 50, temperature: float = 0.0,
                 top_k: int | None = None, seed: int | None = None) -> str | list[int]:
        """The continuation of ``prompt``: a str for a str prompt (the new text alone), a list of the new
        ids for a list of ids. temperature 0 is greedy (argmax); above 0, samples from
        softmax(logits / temperature), among the ``top_k`` most likely when given, with
        ``np.random.default_rng(seed)``. Stops after ``max_new_tokens`` or at config.json's
        eos_token_id (kept as the last id). prompt + new tokens must fit in n_positions."""
        text = isinstance(prompt, str)
        ids = self.encode(prompt) if isinstance(prompt, str) else self._prompt_ids(prompt)
        if not ids:
            raise ValueError("prompt is empty: give at least one token to continue")
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)) \
                or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}")
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) \
                or not np.isfinite(temperature) or temperature < 0:
            raise ValueError(f"temperature must be a number >= 0 (0: greedy), got {temperature!r}")
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer))
                                  or not 1 <= top_k <= self.vocab_size):
            raise ValueError(f"top_k must be None or an int in [1, {self.vocab_size}], got {top_k!r}")
        # the last new token is never fed back: the prompt and all but one new token need positions
        if len(ids) + max_new_tokens - 1 > self.n_positions:
            raise ValueError(f"prompt of {len(ids)} tokens + max_new_tokens {max_new_tokens} needs "
                             f"{len(ids) + max_new_tokens - 1} positions, more than the model's n_positions "
                             f"{self.n_positions}: at most {self.n_positions - len(ids) + 1} new tokens here")
        rng = np.random.default_rng(seed)

        def choose(logits: np.ndarray) -> np.ndarray:                          # (1, V) -> (1,)
            if temperature == 0:
                return logits.argmax(axis=-1)
            return sample_next(logits, rng, float(temperature), top_k)

        new = decode_loop(self.model, np.asarray([ids], dtype=np.int64), int(max_new_tokens), choose,
                          eos_id=self.eos_id)[0].tolist()                      # (N,)
        return self.tokenizer.decode(new) if text else new

    def _prompt_ids(self, prompt) -> list[int]:
        if not isinstance(prompt, (list, tuple)) or not all(
                isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in prompt):
            raise TypeError(f"prompt must be a str or a list of int token ids, got {type(prompt).__name__}")
        if prompt and not all(0 <= i < self.vocab_size for i in prompt):
            raise ValueError(f"prompt holds ids outside the vocabulary [0, {self.vocab_size}): "
                             f"min {min(prompt)}, max {max(prompt)}")
        return [int(i) for i in prompt]
