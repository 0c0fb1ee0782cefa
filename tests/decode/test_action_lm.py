"""ActionLM's cached decode must give what its full forward gives: the prefix (words with padding, patches)
computed once and both ways, then the action tokens one at a time over the KV cache. Logits to float
rounding (relative 1e-10 in float64, 1e-5 in float32), the same tokens, each slot inside its allowed ids."""
import numpy as np
import pytest

from npformer.decode import KVCache
from npformer.decode.action_lm import CachedActionLM, act_tokens
from npformer.models.action_lm import ActionLM, ActionLMConfig

TOL = {np.float64: 1e-10, np.float32: 1e-5}
BINS = 5
V_A = BINS + 3                                         # dx, dy bins, then three gripper tokens
ALLOWED = [np.arange(BINS), np.arange(BINS), np.arange(BINS, V_A)]


def model_and_inputs(dtype, norm_first, text_dim=0, seed=0, b=4, word_reads="prefix"):
    cfg = ActionLMConfig(vocab_size=11, max_words=6, image_size=8, patch_size=4, action_vocab=V_A, action_len=3,
                         d_model=16, n_heads=2, d_ff=24, n_layers=2, norm_first=norm_first, text_dim=text_dim,
                         word_reads=word_reads)
    model = ActionLM(cfg, rng=seed, dtype=dtype).eval()
    rng = np.random.default_rng(seed)
    for p in model.state_dict().values():
        p += (0.3 * rng.standard_normal(p.shape)).astype(dtype)   # logits far from flat: no near-ties
    if text_dim:
        words = rng.standard_normal((b, 5, text_dim)).astype(dtype)
        words[1, 2:] = 0.0
        words[3, 4:] = 0.0
    else:
        words = rng.integers(1, 11, (b, 6))
        words[1, 2:] = 0                                           # padded instructions
        words[3, 5:] = 0
    images = rng.random((b, 8, 8, 3)).astype(dtype)
    return model, words, images


def restricted(logits, ids):
    out = np.full_like(logits, -np.inf)
    out[..., ids] = logits[..., ids]
    return out


def softmax(z):
    z = np.exp(z - z.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("norm_first,text_dim,word_reads", [(True, 0, "prefix"), (False, 0, "prefix"),
                                                             (True, 5, "prefix"), (True, 0, "self")])
def test_cached_decode_equals_the_full_forward(dtype, norm_first, text_dim, word_reads):
    model, words, images = model_and_inputs(dtype, norm_first, text_dim, word_reads=word_reads)
    tokens, probs = act_tokens(model, words, images, ALLOWED)
    assert tokens.shape == (4, 3) and tokens.dtype == np.int64 and probs.shape == (4, 3, V_A)
    bos = np.full((4, 1), model.config.bos_id)
    full, _ = model.forward(words, images, np.concatenate([bos, tokens[:, :2]], axis=1))   # (B, 3, V_A)
    for j, ids in enumerate(ALLOWED):                              # greedy over each slot's allowed ids
        np.testing.assert_array_equal(tokens[:, j], restricted(full[:, j], ids).argmax(-1))
        assert np.isin(tokens[:, j], ids).all()
        np.testing.assert_allclose(probs[:, j], softmax(restricted(full[:, j].astype(np.float64), ids)),
                                   rtol=0, atol=TOL[dtype] * 10)
        assert np.all(probs[:, j, np.setdiff1d(np.arange(V_A), ids)] == 0)
    # the stepper's logits, fed in two pieces, against the full forward's
    dec = CachedActionLM(model, words, images)
    ain = np.concatenate([bos, tokens[:, :2]], axis=1)
    inc = np.concatenate([dec.step(ain[:, :1]), dec.step(ain[:, 1:])], axis=1)
    assert inc.dtype == full.dtype == dtype and dec.slots == 3
    assert np.abs(inc - full).max() <= TOL[dtype] * np.abs(full).max()
    with pytest.raises(ValueError, match="action_len 3"):
        dec.step(ain[:, :1])


def test_sampling_follows_the_seed_and_the_allowed_ids():
    model, words, images = model_and_inputs(np.float64, True, seed=1, b=64)
    draws = [act_tokens(model, words, images, ALLOWED, temperature=2.0, rng=np.random.default_rng(s))
             for s in (7, 7, 8)]
    np.testing.assert_array_equal(draws[0][0], draws[1][0])        # the same seed, the same tokens
    assert not np.array_equal(draws[0][0], draws[2][0])
    for j, ids in enumerate(ALLOWED):
        assert np.isin(draws[2][0][:, j], ids).all()
    greedy, probs = act_tokens(model, words, images, ALLOWED)
    hot = act_tokens(model, words, images, ALLOWED, temperature=2.0, rng=np.random.default_rng(0))[1]
    # a higher temperature flattens slot 0's distribution: the greedy token's probability drops
    top = np.take_along_axis(probs[:, 0], greedy[:, :1], axis=1)
    assert np.all(np.take_along_axis(hot[:, 0], greedy[:, :1], axis=1) <= top + 1e-12)


def test_bad_requests_are_refused():
    model, words, images = model_and_inputs(np.float64, True)
    with pytest.raises(ValueError, match="list of 3 arrays"):
        act_tokens(model, words, images, ALLOWED[:2])
    with pytest.raises(ValueError, match=r"allowed\[2\] must be a non-empty"):
        act_tokens(model, words, images, [ALLOWED[0], ALLOWED[1], np.arange(V_A + 1)])
    with pytest.raises(TypeError, match="needs rng"):
        act_tokens(model, words, images, ALLOWED, temperature=1.0)
    with pytest.raises(ValueError, match="temperature"):
        act_tokens(model, words, images, ALLOWED, temperature=-1.0)
    model.train()
    with pytest.raises(ValueError, match="training mode"):
        act_tokens(model, words, images, ALLOWED)


def test_prefix_mask_reads_both_ways_then_causal():
    cache = KVCache(1, 2, 1, 1, 5)
    valid = np.array([[True, True, False], [True, True, True]])
    np.testing.assert_array_equal(cache.prefix_mask(3, valid)[:, 0, 0], valid)   # key padding, no causal rule
    cache.advance(3)
    step = cache.self_mask(2, None)[0, 0]                          # (2, 5): the prefix, then causal
    np.testing.assert_array_equal(step, [[1, 1, 0, 1, 0], [1, 1, 0, 1, 1]])
    with pytest.raises(ValueError, match="prefix_mask needs an empty cache"):
        cache.prefix_mask(1, None)
