"""The KV cache must give what the full forward gives.

Bit-identical logits are not possible with NumPy + BLAS: a matrix product's rounding depends on
its shape (OpenBLAS picks gemv for one row, gemm kernels and blockings by size), and NumPy's
pairwise summation in the softmax groups terms by row length, so computing one new row differs
from computing it inside the full (T, T) product in the last bits. The tests therefore ask for
float rounding: 1e-12 in float64 and 1e-6 relative to the logits' scale in float32 (a few ulps),
and exact equality of the decoded tokens.
"""
import numpy as np
import pytest
from decode_models import BOS, EOS, PAD, greedy_gap, make_lm, make_seq2seq, sources

from npformer.decode import KVCache, greedy, make_stepper

TOL = {np.float64: 1e-12, np.float32: 1e-6}


def _close(inc, full, dtype):
    assert inc.dtype == full.dtype == dtype
    err = np.abs(inc - full).max()
    assert err <= TOL[dtype] * max(1.0, np.abs(full).max()), err


def _incremental(stepper, ids, chunks):
    """Feed ids (B, T) in chunks of the given sizes; concatenate the logits."""
    out, p = [], 0
    for c in chunks:
        out.append(stepper.step(ids[:, p:p + c]))
        p += c
    assert p == ids.shape[1]
    return np.concatenate(out, axis=1)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("norm_first,shared", [(False, True), (True, False)])
def test_transformer_cache_equals_full_forward(dtype, norm_first, shared, rng):
    model = make_seq2seq(dtype, norm_first, shared)
    src = sources(rng)
    tgt = rng.integers(3, 12, (4, 10))
    tgt[:, 0] = BOS
    tgt[3, 8:] = PAD                                      # target padding is masked as keys too
    full, _ = model.forward(src, tgt)
    stepper = make_stepper(model, src_ids=src)
    inc = _incremental(stepper, tgt, [3, 1, 1, 2, 1, 1, 1])
    _close(inc, full, dtype)
    assert stepper.length == 10


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("norm_first,tie,pad_id,positional",
                         [(True, True, -1, "learned"), (False, False, 0, "sinusoidal")])
def test_lm_cache_equals_full_forward(dtype, norm_first, tie, pad_id, positional, rng):
    model = make_lm(dtype, norm_first, tie, pad_id, positional=positional)
    ids = rng.integers(1, 12, (3, 12))
    if pad_id >= 0:
        ids[1, 2] = pad_id
    full, _ = model.forward(ids)
    inc = _incremental(make_stepper(model, batch=3), ids, [1, 4, 1, 1, 1, 1, 1, 1, 1])
    _close(inc, full, dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_long_prompt_prefills_through_the_tiled_kernel(dtype, rng, monkeypatch):
    """A prompt with t * t >= TILED_MIN_SCORES runs the tiled kernel (no (t, t) mask or scores),
    and its logits, and the steps after it, equal the full forward's."""
    import npformer.decode.kvcache as kvcache
    from npformer.nn.attention import TILED_MIN_SCORES

    t = 520
    assert t * t >= TILED_MIN_SCORES
    model = make_lm(dtype, norm_first=False, tie=True, pad_id=0, positional="sinusoidal", max_len=t + 8)
    ids = rng.integers(1, 12, (2, t + 3))
    ids[1, 5] = 0                                         # a padded key inside the prompt
    calls = []
    real = kvcache.flash_attention_forward

    def spy(q, k, v, **kw):
        calls.append((q.shape, kw["causal"], kw["mask"].shape))
        return real(q, k, v, **kw)

    monkeypatch.setattr(kvcache, "flash_attention_forward", spy)
    full, _ = model.forward(ids)
    inc = _incremental(make_stepper(model, batch=2), ids, [t, 1, 2])
    assert calls == [((2, 2, t, 8), True, (2, 1, 1, t))] * 2  # the prompt, in both layers; not the steps
    _close(inc, full, dtype)


@pytest.mark.parametrize("threshold,tiled", [(36, True), (37, False)])
def test_the_prefill_reads_tiled_min_scores_at_its_one_home(threshold, tiled, rng, monkeypatch):
    """nn.attention.TILED_MIN_SCORES, set there and nowhere else, picks the prefill's kernel: a
    6-token prompt (36 scores per head) goes tiled at a threshold of 36 and exact at 37."""
    import npformer.decode.kvcache as kvcache
    import npformer.nn.attention as attention_module

    monkeypatch.setattr(attention_module, "TILED_MIN_SCORES", threshold)
    calls = []
    real = kvcache.flash_attention_forward

    def spy(q, k, v, **kw):
        calls.append(q.shape)
        return real(q, k, v, **kw)

    monkeypatch.setattr(kvcache, "flash_attention_forward", spy)
    model = make_lm(np.float64, norm_first=False, tie=True, pad_id=0)
    ids = rng.integers(1, 12, (2, 8))
    full, _ = model.forward(ids)
    inc = _incremental(make_stepper(model, batch=2), ids, [6, 1, 1])
    assert calls == ([(2, 2, 6, 8)] * 2 if tiled else [])   # the prompt, in both layers; never the steps
    _close(inc, full, np.float64)


def test_cached_and_uncached_decoding_give_the_same_tokens(rng):
    model = make_seq2seq(np.float32)
    src = sources(rng, b=5)
    bos = np.full((5, 1), BOS)
    cached = greedy(model, bos, 15, src_ids=src, eos_id=EOS)
    plain = greedy(model, bos, 15, src_ids=src, eos_id=EOS, cache=False)
    gap, scale = greedy_gap(model, plain, src=src)
    assert gap > 1e-4 * scale                             # 100 times the float32 rounding: no choice can flip
    np.testing.assert_array_equal(cached, plain)
    lm = make_lm(np.float32, tie=False)
    prompt = rng.integers(0, 12, (3, 2))
    plain = greedy(lm, prompt, 20, cache=False)
    gap, scale = greedy_gap(lm, plain, prompt=prompt)
    assert gap > 1e-4 * scale
    np.testing.assert_array_equal(greedy(lm, prompt, 20), plain)


def test_cache_is_filled_in_place_and_reordered():
    cache = KVCache(n_layers=2, batch=3, n_heads=2, head_dim=4, max_len=5)
    buf = cache.k[0]
    k = np.arange(3 * 2 * 2 * 4, dtype=np.float32).reshape(3, 2, 2, 4)
    mask = cache.self_mask(2, None)
    assert mask.shape == (3, 1, 2, 2) and not mask[0, 0, 0, 1] and mask[0, 0, 1, 0]
    k_all, _ = cache.write(0, k, k)
    cache.write(1, k, k)
    cache.advance(2)
    assert k_all.base is buf and cache.k[0] is buf        # a view of the preallocated buffer
    cache.reorder(np.array([2, 2, 0]))
    np.testing.assert_array_equal(cache.k[0][:, :, :2], k[[2, 2, 0]])
    assert cache.k[0] is buf                              # same batch size: reordered in place
    cache.reorder(np.array([0, 0, 1, 1, 2, 2]))           # sources -> beams: new buffers
    assert cache.k[1].shape == (6, 2, 5, 4)
    np.testing.assert_array_equal(cache.k[1][:, :, :2], k[[2, 2, 2, 2, 0, 0]])
    with pytest.raises(ValueError, match="KV cache full"):
        cache.self_mask(4, None)


def test_cache_errors():
    model = make_seq2seq()
    with pytest.raises(ValueError, match="training mode"):
        make_stepper(model.train(), src_ids=np.ones((1, 3), dtype=np.int64))
    model.eval()
    with pytest.raises(ValueError, match="src_ids"):
        make_stepper(model, batch=1)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        make_stepper(model, src_ids=np.full((1, 3), 99))
    with pytest.raises(ValueError, match="no src_ids"):
        make_stepper(make_lm(), batch=1, src_ids=np.ones((1, 3), dtype=np.int64))
