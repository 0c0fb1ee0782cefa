"""Properties of attention that hold for every input (hypothesis):
rows of weights sum to 1 under any mask that leaves a key; masked positions get exactly 0;
with a causal mask, output t does not change when later tokens do; without positions,
shuffling the tokens shuffles the outputs the same way."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import npformer
from npformer.ops import causal_mask

SETTINGS = settings(max_examples=40, deadline=None)
seeds = st.integers(0, 2**32 - 1)


@SETTINGS
@given(seed=seeds, tq=st.integers(1, 6), tk=st.integers(1, 7), d=st.integers(1, 5),
       heads=st.integers(1, 3), causal=st.booleans(), dtype=st.sampled_from([np.float64, np.float32]))
def test_rows_sum_to_one_and_masked_get_exactly_zero(seed, tq, tk, d, heads, causal, dtype):
    rng = np.random.default_rng(seed)
    q = (rng.normal(size=(heads, tq, d)) * 3).astype(dtype)            # (H, Tq, D)
    k = (rng.normal(size=(heads, tk, d)) * 3).astype(dtype)            # (H, Tk, D)
    v = rng.normal(size=(heads, tk, 2)).astype(dtype)                  # (H, Tk, 2)
    mask = rng.random((heads, tq, tk)) < rng.random()                  # any density, empty rows too
    out, w = npformer.attention(q, k, v, mask=mask, causal=causal)
    allowed = mask & causal_mask(tq, tk) if causal else mask
    assert w.dtype == out.dtype == dtype
    assert np.all(w[~allowed] == 0)                                    # exactly zero, not tiny
    has_key = allowed.any(-1)                                          # (H, Tq)
    tol = 1e-12 if dtype == np.float64 else 1e-6
    np.testing.assert_allclose(w.sum(-1)[has_key], 1.0, rtol=0, atol=tol)
    assert np.all(w[~has_key] == 0) and np.all(out[~has_key] == 0)    # a row with no key: zeros
    assert not np.isnan(out).any()


@SETTINGS
@given(seed=seeds, t=st.integers(2, 8), e=st.integers(1, 6), cut=st.integers(0, 7))
def test_causal_output_ignores_later_tokens(seed, t, e, cut):
    cut = cut % (t - 1)                                                # change tokens after position cut
    rng = np.random.default_rng(seed)
    wq, wk, wv = (rng.normal(size=(e, e)) for _ in range(3))           # (E, E) projections
    x = rng.normal(size=(t, e))                                        # (T, E)
    x2 = x.copy()
    x2[cut + 1:] = rng.normal(size=(t - cut - 1, e)) * 10              # rewrite the future
    out1, w1 = npformer.attention(x @ wq, x @ wk, x @ wv, causal=True)
    out2, w2 = npformer.attention(x2 @ wq, x2 @ wk, x2 @ wv, causal=True)
    np.testing.assert_allclose(out2[: cut + 1], out1[: cut + 1], rtol=0, atol=1e-12)
    np.testing.assert_allclose(w2[: cut + 1], w1[: cut + 1], rtol=0, atol=1e-12)


@SETTINGS
@given(seed=seeds, t=st.integers(1, 8), e=st.integers(1, 6), perm_seed=seeds)
def test_shuffling_tokens_shuffles_outputs(seed, t, e, perm_seed):
    rng = np.random.default_rng(seed)
    wq, wk, wv = (rng.normal(size=(e, e)) for _ in range(3))           # (E, E)
    x = rng.normal(size=(t, e))                                        # (T, E)
    perm = np.random.default_rng(perm_seed).permutation(t)
    out, w = npformer.attention(x @ wq, x @ wk, x @ wv)
    xp = x[perm]
    out_p, w_p = npformer.attention(xp @ wq, xp @ wk, xp @ wv)
    np.testing.assert_allclose(out_p, out[perm], rtol=0, atol=1e-12)
    np.testing.assert_allclose(w_p, w[perm][:, perm], rtol=0, atol=1e-12)
