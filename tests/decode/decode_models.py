"""Small models for the decoding tests. Random weights, with the output projection scaled up so
that greedy paths vary between sources and end with EOS at different steps (a freshly
initialised model mostly repeats one token, which would make the comparisons weak)."""
import numpy as np

from npformer.models import DecoderLM, DecoderLMConfig, Transformer, TransformerConfig

BOS, EOS, PAD = 1, 2, 0


def make_seq2seq(dtype=np.float64, norm_first=False, shared=True, seed=0, vocab=12):
    cfg = TransformerConfig(src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=16, n_heads=2, d_ff=32,
                            n_encoder_layers=1, n_decoder_layers=2, max_len=40, dropout=0.1,
                            norm_first=norm_first, share_embeddings=shared, tie_output=False,
                            activation="gelu" if norm_first else "relu", pad_id=PAD)
    model = Transformer(cfg, seed, dtype=dtype).eval()
    model.generator.params["weight"] *= 3
    return model


def make_lm(dtype=np.float64, norm_first=True, tie=True, pad_id=-1, seed=0, vocab=12,
            positional="learned"):
    cfg = DecoderLMConfig(vocab_size=vocab, d_model=16, n_heads=2, d_ff=32, n_layers=2, max_len=40,
                          dropout=0.1, norm_first=norm_first, tie_output=tie, pad_id=pad_id,
                          positional=positional)
    model = DecoderLM(cfg, seed, dtype=dtype).eval()
    if not tie:
        model.generator.params["weight"] *= 3
    return model


def sources(rng, b=4, s=7, vocab=12):
    """(B, S) source ids in [3, vocab) with right padding in some rows."""
    src = rng.integers(3, vocab, (b, s))
    src[1, 5:] = PAD
    if b > 2:
        src[2, 3:] = PAD
    return src

