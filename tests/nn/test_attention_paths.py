"""MultiHeadAttention's two kernels: which one runs (need_weights, training mode, Tq * Tk against
TILED_MIN_SCORES), and that the tiled one gives the exact one's outputs and every gradient within
1e-10 in float64, for self- and cross-attention with causal and padding masks and bias, up to a
whole DecoderLM. The exact kernel is pinned to torch by tests/nn/test_modules.py."""
import numpy as np
import pytest

import npformer.nn.attention as attention_module
from npformer.models import DecoderLM, DecoderLMConfig
from npformer.nn import MultiHeadAttention, padding_mask
from npformer.ops.flash_attention import FlashAttentionCache

TOL = 1e-10


def rel_err(a, b) -> float:
    a, b = np.asarray(a), np.asarray(b)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


@pytest.fixture
def tiled_everywhere(monkeypatch):
    """Make every size long enough for the tiled kernel, so small inputs exercise it."""
    monkeypatch.setattr(attention_module, "TILED_MIN_SCORES", 1)


def test_which_kernel_runs():
    use, n = attention_module.use_tiled, attention_module.TILED_MIN_SCORES
    assert use(None, True, n, 1) and use(False, False, n, 1)              # training, or weights not needed
    assert not use(None, False, n, 1)                                      # eval mode keeps the weights
    assert not use(True, True, n, 1)                                       # asked for the weights
    assert not use(None, True, 64, 64) and not use(False, True, 256, 256)   # short: the exact kernel is faster


def attend_both(mha, x_q, x_kv, dout, **kw):
    """The module's forward and backward twice: need_weights=True (exact) and False (tiled)."""
    results = []
    for need in (True, False):
        out, cache = mha.forward(x_q, x_kv, need_weights=need, **kw)
        assert isinstance(cache[2], FlashAttentionCache) == (not need)
        results.append((out, *mha.backward(dout, cache)))
    return results


@pytest.mark.parametrize("cross", [False, True])
def test_tiled_module_equals_exact(tiled_everywhere, cross):
    rng = np.random.default_rng(7 + cross)
    e, h, b, tq, tk = 24, 3, 2, 21, 17 if cross else 21
    mha = MultiHeadAttention(e, h, dropout=0.0, rng=rng, dtype=np.float64)
    mha.params["in_proj_bias"][...] = rng.normal(size=3 * e)
    x = rng.normal(size=(b, tq, e))                                         # (B, Tq, E)
    mem = rng.normal(size=(b, tk, e)) if cross else None                    # (B, Tk, E)
    ids = rng.integers(1, 5, size=(b, tk))
    ids[1, -5:] = 0                                                         # padding at the end of one row
    kw = dict(mask=padding_mask(ids, 0), bias=rng.normal(size=(h, tq, tk)), causal=not cross)
    dout = rng.normal(size=(b, tq, e))
    (o1, (dx1, dm1), g1), (o2, (dx2, dm2), g2) = attend_both(mha, x, mem, dout, **kw)
    assert rel_err(o2, o1) < TOL and rel_err(dx2, dx1) < TOL
    assert (dm1 is None) == (dm2 is None) == (not cross)
    if cross:
        assert rel_err(dm2, dm1) < TOL
    assert set(g1) == set(g2)
    for k in g1:
        assert rel_err(g2[k], g1[k]) < TOL, k


def test_weights_kept_in_eval_refused_from_a_tiled_cache(tiled_everywhere):
    rng = np.random.default_rng(0)
    mha = MultiHeadAttention(16, 2, dropout=0.1, rng=rng)
    x = rng.normal(size=(1, 12, 16)).astype(np.float32)                   # (B, T, E)
    _, cache = mha.forward(x, causal=True, rng=rng)                         # training: tiled
    with pytest.raises(ValueError, match=r"need_weights=True.*eval"):
        MultiHeadAttention.attention_weights(cache)
    _, cache = mha.forward(x, causal=True, rng=rng, need_weights=True)      # training, weights asked for
    assert MultiHeadAttention.attention_weights(cache).shape == (1, 2, 12, 12)
    mha.eval()
    _, cache = mha.forward(x, causal=True)                                  # eval: the weights, as before
    w = MultiHeadAttention.attention_weights(cache)
    np.testing.assert_allclose(w.sum(-1), 1.0, rtol=1e-5)


def test_short_sequences_keep_the_exact_kernel_in_training():
    rng = np.random.default_rng(1)
    mha = MultiHeadAttention(16, 2, dropout=0.1, rng=rng)
    _, cache = mha.forward(rng.normal(size=(2, 64, 16)).astype(np.float32), causal=True, rng=rng)
    assert not isinstance(cache[2], FlashAttentionCache)


@pytest.mark.parametrize("pad_id", [-1, 0])
def test_decoder_lm_step_tiled_equals_exact(monkeypatch, pad_id):
    """A whole training step (loss and every parameter gradient) with the tiled kernel in every layer
    equals the exact kernel's, in float64; padding keys masked when pad_id is set."""
    cfg = DecoderLMConfig(vocab_size=29, d_model=16, n_heads=2, d_ff=32, n_layers=2, max_len=40, dropout=0.0,
                          pad_id=pad_id)
    model = DecoderLM(cfg, rng=3).astype(np.float64)
    ids = np.random.default_rng(4).integers(1, 29, size=(3, 36))
    ids[0, -7:] = max(pad_id, 1)
    results = []
    for threshold in (2**62, 1):                                            # exact, then tiled
        monkeypatch.setattr(attention_module, "TILED_MIN_SCORES", threshold)
        results.append(model.loss(ids[:, :-1], ids[:, 1:], rng=np.random.default_rng(0)))
    _, cache = model.forward(ids[:, :-1], rng=np.random.default_rng(0))
    first_self_attention = cache[1][0][0][0].fn                             # blocks -> layer 0 -> sub-layer 1
    assert isinstance(first_self_attention[2], FlashAttentionCache)         # the tiled kernel ran
    (l1, g1), (l2, g2) = results
    assert abs(l2 - l1) <= TOL * abs(l1)
    assert set(g1) == set(g2)
    for k in g1:
        assert rel_err(g2[k], g1[k]) < TOL, k


def test_decoder_lm_dropout_step_with_tiled_kernel_is_reproducible(tiled_everywhere):
    cfg = DecoderLMConfig(vocab_size=29, d_model=16, n_heads=2, d_ff=32, n_layers=1, max_len=40, dropout=0.2)
    model = DecoderLM(cfg, rng=3)
    ids = np.random.default_rng(4).integers(0, 29, size=(2, 33))
    (l1, g1), (l2, g2) = (model.loss(ids[:, :-1], ids[:, 1:], rng=np.random.default_rng(9)) for _ in range(2))
    assert l1 == l2 and all(np.array_equal(g1[k], g2[k]) for k in g1)
    assert np.isfinite(l1) and all(np.isfinite(g).all() for g in g1.values())
    l3, _ = model.loss(ids[:, :-1], ids[:, 1:], rng=np.random.default_rng(10))
    assert l3 != l1                                                         # the masks come from the rng
