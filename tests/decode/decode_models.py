"""Small models for the decoding tests. Random weights, with the output projection scaled up so
that greedy paths vary between sources and end with EOS at different steps (a freshly
initialised model mostly repeats one token, which would make the comparisons weak), and every
parameter moved off its initial value (LayerNorm 1 and 0, attention biases 0), so that a cached
path that drops a norm or a bias cannot match the full forward."""
import numpy as np

from npformer.models import DecoderLM, DecoderLMConfig, Transformer, TransformerConfig
from random_params import randomize

BOS, EOS, PAD = 1, 2, 0


def make_seq2seq(dtype=np.float64, norm_first=False, shared=True, seed=0, vocab=12):
    cfg = TransformerConfig(src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=16, n_heads=2, d_ff=32,
                            n_encoder_layers=1, n_decoder_layers=2, max_len=40, dropout=0.1,
                            norm_first=norm_first, share_embeddings=shared, tie_output=False,
                            activation="gelu" if norm_first else "relu", pad_id=PAD)
    model = randomize(Transformer(cfg, seed, dtype=dtype).eval(), np.random.default_rng(seed + 100))
    model.generator.params["weight"] *= 3
    return model


def make_lm(dtype=np.float64, norm_first=True, tie=True, pad_id=-1, seed=0, vocab=12,
            positional="learned", max_len=40):
    cfg = DecoderLMConfig(vocab_size=vocab, d_model=16, n_heads=2, d_ff=32, n_layers=2, max_len=max_len,
                          dropout=0.1, norm_first=norm_first, tie_output=tie, pad_id=pad_id,
                          positional=positional)
    model = randomize(DecoderLM(cfg, seed, dtype=dtype).eval(), np.random.default_rng(seed + 100))
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


def greedy_gap(model, tokens, src=None, prompt=None):
    """How clearly the choices along the path ``tokens`` (B, N) were made: (the smallest gap between
    the best and the second-best logit at those steps, the logits' largest magnitude), from one full
    forward over the path; with src, each row counts up to its first EOS.

    Two paths to the same logits (cached or not, one row or a batch) differ by rounding: 1e-12 of
    the scale in float64, 1e-6 in float32 (test_kvcache). Choices that win by far more than that
    are the same on every BLAS kernel, so a test that compares greedy tokens first checks that."""
    if src is not None:                                   # seq2seq: the decoder fed BOS, then its own tokens
        tgt_in = np.concatenate([np.full((len(tokens), 1), BOS), tokens[:, :-1]], axis=1)   # (B, N)
        logits, _ = model.forward(src, tgt_in)            # (B, N, V)
        eos_before = np.cumsum(tokens == EOS, axis=1) - (tokens == EOS)
        chosen = eos_before == 0                          # (B, N): up to and including the first EOS
    else:                                                 # LM: the prompt, then its own tokens
        ids = np.concatenate([prompt, tokens[:, :-1]], axis=1)
        logits, _ = model.forward(ids)                    # (B, P + N - 1, V)
        logits = logits[:, prompt.shape[1] - 1:]          # (B, N, V): the choices of the N tokens
        chosen = np.ones(tokens.shape, bool)
    top2 = np.sort(logits.astype(np.float64), axis=-1)[..., -2:]   # (B, N, 2)
    return float((top2[..., 1] - top2[..., 0])[chosen].min()), float(np.abs(logits).max())
