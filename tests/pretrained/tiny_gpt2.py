"""GPT-2 directories made by transformers itself from seeded random weights (``save_pretrained``),
with a byte-level BPE tokenizer trained here by ``tokenizers`` on a generated text: no checkpoint is
downloaded. Used by tests/pretrained/test_gpt2*.py, tests/explore and the docs examples.

    write_gpt2(dir, n_embd=32, n_layer=2, n_head=4, n_positions=1024, vocab_size=None, layout="json")

layout: "json" saves tokenizer.json, "files" vocab.json + merges.txt, "both" the three, "none" none.
vocab_size None: the tokenizer's own size; larger (50,257 for the 124M shape) leaves ids no text makes.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

TINY = dict(n_embd=32, n_layer=2, n_head=4, n_positions=1024)   # 1,024 positions: room for the tiled prefill
WIDE = dict(n_embd=768, n_layer=2, n_head=12, n_positions=1024, vocab_size=50257)   # GPT-2 124M, 2 layers
TOKENIZER_VOCAB = 400
_SYLLABLES = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "far", "and", "then", "it", "was", "in",
              "house", "tree", "über", "café", "naïve", "日本", "—", "!", ",", ".", "?", "42", "7", "\n"]


def corpus(n_words: int = 4000, seed: int = 0) -> list[str]:
    """Lines of words drawn from a fixed list (ASCII, accents, CJK, punctuation, digits), seeded."""
    rng = np.random.default_rng(seed)
    words = rng.choice(_SYLLABLES, size=n_words)
    return [" ".join(words[i:i + 12]) for i in range(0, n_words, 12)]


def train_tokenizer(vocab_size: int = TOKENIZER_VOCAB):
    """A byte-level BPE (GPT-2's kind) trained on ``corpus()``, with <|endoftext|> as id 0."""
    from tokenizers import ByteLevelBPETokenizer

    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator(corpus(), vocab_size=vocab_size, min_frequency=1, special_tokens=["<|endoftext|>"],
                            show_progress=False)
    return tok


def save_tokenizer(tok, path: Path, layout: str) -> None:
    if layout in ("json", "both"):
        tok.save(str(path / "tokenizer.json"))
    if layout in ("files", "both"):
        tok.save_model(str(path))                                  # vocab.json, merges.txt


def write_gpt2(path, n_embd: int = 32, n_layer: int = 2, n_head: int = 4, n_positions: int = 1024,
               vocab_size: int | None = None, layout: str = "json", seed: int = 0,
               activation_function: str = "gelu_new", eos: bool = True):
    """Save a random GPT2LMHeadModel (transformers, seeded) and a trained tokenizer into ``path``.
    eos: config.json's eos_token_id is <|endoftext|> (generation stops there), else None.
    Returns the torch model (eval mode) for the parity tests."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer()
    v = vocab_size or tok.get_vocab_size()
    eos_id = tok.token_to_id("<|endoftext|>") if eos else None
    cfg = GPT2Config(vocab_size=v, n_embd=n_embd, n_layer=n_layer, n_head=n_head, n_positions=n_positions,
                     activation_function=activation_function, bos_token_id=eos_id, eos_token_id=eos_id)
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(cfg).eval()
    model.save_pretrained(str(path))
    save_tokenizer(tok, path, layout)
    return model
