"""Greedy, beam search and sampling, checked against naive loops over the full forward."""
import itertools

import numpy as np
import pytest
from decode_models import BOS, EOS, greedy_gap, make_lm, make_seq2seq, sources

from npformer.decode import beam_search, greedy, length_penalty, sample, sample_next, strip_eos
from npformer.ops import log_softmax


def naive_greedy(model, src, max_new):
    """One source at a time, the whole prefix through model.forward at every step."""
    out = []
    for row in src:
        tgt = [BOS]
        for _ in range(max_new):
            logits, _ = model.forward(row[None], np.array([tgt]))
            tgt.append(int(logits[0, -1].argmax()))
            if tgt[-1] == EOS:
                break
        out.append(np.array(tgt[1:]))
    return out


def sequence_logprob(model, src_row, tokens):
    """log P(tokens | src) from one full forward."""
    tgt_in = np.array([[BOS, *tokens[:-1]]])
    logits, _ = model.forward(src_row[None], tgt_in)
    logp = log_softmax(logits[0].astype(np.float64))
    return float(logp[np.arange(len(tokens)), tokens].sum())


def test_greedy_equals_naive_loop(rng):
    model = make_seq2seq(np.float64)
    src = sources(rng, b=5)
    got = greedy(model, np.full((5, 1), BOS), 12, src_ids=src, eos_id=EOS)
    gap, scale = greedy_gap(model, got, src=src)
    assert gap > 1e-4 * scale                             # no near-tie that rounding could flip
    want = naive_greedy(model, src, 12)
    assert len({len(w) for w in want}) > 1                # rows end at different steps
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g[:len(w)], w)
        assert (g[len(w):] == EOS).all()                  # finished rows keep emitting EOS
    assert [len(r) for r in strip_eos(got, EOS)] == [len(w) - (w[-1] == EOS) for w in want]


def test_lm_greedy_equals_naive_loop(rng):
    model = make_lm(np.float64, tie=False)
    prompt = rng.integers(0, 12, (2, 3))
    got = greedy(model, prompt, 10)
    gap, scale = greedy_gap(model, got, prompt=prompt)
    assert gap > 1e-4 * scale
    ids = prompt.copy()
    for _ in range(10):
        logits, _ = model.forward(ids)
        ids = np.concatenate([ids, logits[:, -1].argmax(-1)[:, None]], axis=1)
    np.testing.assert_array_equal(got, ids[:, 3:])


def test_length_penalty_formula():
    assert length_penalty(1, 0.6) == pytest.approx(1.0)
    assert length_penalty(7, 0.6) == pytest.approx(2.0 ** 0.6)
    assert length_penalty(25, 0.5) == pytest.approx(np.sqrt(5.0))
    np.testing.assert_allclose(length_penalty(np.arange(1, 5), 0.0), 1.0)


def test_beam_one_without_penalty_is_greedy(rng):
    model = make_seq2seq(np.float64)
    src = sources(rng, b=5)
    g = greedy(model, np.full((5, 1), BOS), 12, src_ids=src, eos_id=EOS)
    gap, scale = greedy_gap(model, g, src=src)
    assert gap > 1e-4 * scale
    g = strip_eos(g, EOS)
    beams = beam_search(model, np.full((5, 1), BOS), 12, src_ids=src, eos_id=EOS, beam=1, alpha=0.0)
    for gi, (hyp,) in zip(g, beams, strict=True):
        np.testing.assert_array_equal(strip_eos(hyp.tokens[None], EOS)[0], gi)


@pytest.mark.parametrize("alpha", [0.6, 0.0, 1.5])
def test_beam_scores_sorted_and_equal_logprob_over_penalty(alpha, rng):
    model = make_seq2seq(np.float64, seed=3)
    src = sources(rng, b=3)
    results = beam_search(model, np.full((3, 1), BOS), 10, src_ids=src, eos_id=EOS, beam=4, alpha=alpha)
    assert len(results) == 3
    for row, hyps in zip(src, results, strict=True):
        assert len(hyps) == 4
        scores = [h.score for h in hyps]
        assert scores == sorted(scores, reverse=True)
        assert len({tuple(h.tokens) for h in hyps}) == 4          # no duplicates
        for h in hyps:
            assert h.finished == (h.tokens[-1] == EOS) and (h.tokens[:-1] != EOS).all()
            lp = sequence_logprob(model, row, h.tokens)
            assert h.logprob == pytest.approx(lp, abs=1e-9)
            assert h.score == pytest.approx(lp / ((5 + len(h.tokens)) / 6) ** alpha, abs=1e-9)


@pytest.mark.parametrize("alpha", [0.6, 0.0])
def test_wide_beam_finds_the_exhaustive_best(alpha, rng):
    """With as many beams as there are prefixes, beam search is exhaustive: its best hypothesis
    must be the best of every sequence of up to max_new tokens (finished at EOS, or cut)."""
    v, max_new = 5, 3
    model = make_seq2seq(np.float64, seed=7, vocab=v)
    src = rng.integers(3, v, (2, 4))
    results = beam_search(model, np.full((2, 1), BOS), max_new, src_ids=src, eos_id=EOS,
                          beam=v ** (max_new - 1), alpha=alpha)
    for row, hyps in zip(src, results, strict=True):
        best = -np.inf
        for n in range(1, max_new + 1):
            for seq in itertools.product(range(v), repeat=n):
                if EOS in seq[:-1] or (n < max_new and seq[-1] != EOS):
                    continue
                best = max(best, sequence_logprob(model, row, list(seq)) / length_penalty(n, alpha))
        assert hyps[0].score == pytest.approx(best, abs=1e-9)


def lm_logprob(model, prompt_row, tokens):
    """log P(tokens | prompt) from one full forward of the decoder-only LM."""
    ids = np.array([[*prompt_row, *tokens[:-1]]])
    logits, _ = model.forward(ids)
    logp = log_softmax(logits[0, len(prompt_row) - 1:].astype(np.float64))      # (N, V)
    return float(logp[np.arange(len(tokens)), tokens].sum())


@pytest.mark.parametrize("alpha", [0.6, 1.5])
def test_beam_search_lm_scores_equal_logprob_over_penalty(alpha, rng):
    model = make_lm(np.float64, tie=False)
    prompt = rng.integers(0, 12, (2, 2))
    res = beam_search(model, prompt, 6, beam=3, alpha=alpha)
    assert [len(r) for r in res] == [3, 3]
    for row, hyps in zip(prompt, res, strict=True):
        scores = [h.score for h in hyps]
        assert scores == sorted(scores, reverse=True)
        assert len({tuple(h.tokens) for h in hyps}) == 3                # no duplicates
        for h in hyps:                                                  # no EOS: every beam runs to max_new
            assert len(h.tokens) == 6 and not h.finished
            lp = lm_logprob(model, row, h.tokens)
            assert h.logprob == pytest.approx(lp, abs=1e-9)
            assert h.score == pytest.approx(lp / length_penalty(6, alpha), abs=1e-9)


def test_lm_beam_one_is_greedy_and_a_wide_beam_is_exhaustive(rng):
    model = make_lm(np.float64, tie=False)
    prompt = rng.integers(0, 12, (2, 3))
    g = greedy(model, prompt, 5)
    gap, scale = greedy_gap(model, g, prompt=prompt)
    assert gap > 1e-4 * scale                             # no near-tie that rounding could flip
    for gi, (hyp,) in zip(g, beam_search(model, prompt, 5, beam=1), strict=True):
        np.testing.assert_array_equal(hyp.tokens, gi)
    v, max_new = 4, 3
    small = make_lm(np.float64, tie=False, vocab=v, seed=5)
    prompt = rng.integers(0, v, (2, 2))
    results = beam_search(small, prompt, max_new, beam=v ** (max_new - 1))
    for row, hyps in zip(prompt, results, strict=True):   # every sequence has the same length, so the same penalty
        best = max(lm_logprob(small, row, list(seq)) for seq in itertools.product(range(v), repeat=max_new))
        assert hyps[0].logprob == pytest.approx(best, abs=1e-9)


def test_beam_search_lm_errors():
    model = make_lm(np.float64, tie=False)
    with pytest.raises(ValueError, match="beam"):
        beam_search(model, np.zeros((1, 1), dtype=np.int64), 3, beam=0)
    with pytest.raises(ValueError, match="max_len"):
        beam_search(model, np.zeros((1, 1), dtype=np.int64), 41)


# -- sampling -------------------------------------------------------------------------------

def test_top_k_never_leaves_the_top_k():
    gen = np.random.default_rng(0)
    logits = gen.standard_normal((64, 30)).astype(np.float32)
    top3 = np.argsort(-logits, axis=-1)[:, :3]
    for _ in range(50):
        ids = sample_next(logits, gen, temperature=2.0, top_k=3)
        assert all(i in t for i, t in zip(ids, top3, strict=True))
    ids = sample_next(logits, gen, top_k=1)
    np.testing.assert_array_equal(ids, logits.argmax(-1))


def test_sampling_follows_softmax():
    gen = np.random.default_rng(1)
    logits = np.array([[2.0, 1.0, 0.0, -1.0, -np.inf]], dtype=np.float32)
    draws = np.array([sample_next(np.repeat(logits, 1000, 0), gen, temperature=1.5)
                      for _ in range(20)]).ravel()
    freq = np.bincount(draws, minlength=5) / draws.size
    p = np.exp(logits[0].astype(np.float64) / 1.5)
    p /= p.sum()
    np.testing.assert_allclose(freq, p, atol=0.01)
    assert freq[4] == 0


def test_temperature_to_zero_is_greedy(rng):
    model = make_seq2seq(np.float32)
    src = sources(rng, b=4)
    bos = np.full((4, 1), BOS)
    g = greedy(model, bos, 12, src_ids=src, eos_id=EOS)
    gap, _ = greedy_gap(model, g, src=src)
    assert gap / 1e-5 > 50                                # at temperature 1e-5 a runner-up has p < e^-50
    for t in (0.0, 1e-5):
        s = sample(model, bos, 12, np.random.default_rng(5), temperature=t, src_ids=src, eos_id=EOS)
        np.testing.assert_array_equal(s, g)
    hot = sample(model, bos, 12, np.random.default_rng(5), temperature=5.0, src_ids=src, eos_id=EOS)
    assert not np.array_equal(hot, g)                     # a hot sampler does wander off


def test_sampling_is_deterministic_given_the_rng(rng):
    # float64: the cached and the uncached logits then differ by ~1e-15, so that no uniform draw of
    # the inverse-CDF sampler can land between their two cumulative sums (in float32, ~1e-6 apart,
    # it could, on some BLAS kernel)
    model = make_lm(np.float64, tie=False)
    prompt = rng.integers(0, 12, (3, 2))
    a = sample(model, prompt, 15, np.random.default_rng(9), temperature=0.8, top_k=5)
    b = sample(model, prompt, 15, np.random.default_rng(9), temperature=0.8, top_k=5)
    c = sample(model, prompt, 15, np.random.default_rng(9), temperature=0.8, top_k=5, cache=False)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)


def test_sampling_errors():
    model = make_lm()
    p = np.zeros((1, 1), dtype=np.int64)
    with pytest.raises(TypeError, match="rng"):
        sample(model, p, 3, 0)
    with pytest.raises(ValueError, match="temperature"):
        sample(model, p, 3, np.random.default_rng(0), temperature=-1)
    with pytest.raises(ValueError, match="top_k"):
        sample(model, p, 3, np.random.default_rng(0), top_k=0)
    with pytest.raises(ValueError, match="larger than the vocabulary"):
        sample(model, p, 3, np.random.default_rng(0), top_k=13)


# -- beam search on a scripted model, where the right answer is known by hand ---------------

class Scripted:
    """A stepper whose next-token probabilities are a function of the tokens generated so far
    (the fed prefix is ignored). Tokens: 0 'a', 1 'b', 2 EOS."""

    def __init__(self, batch, probs):
        self.probs, self.hist = probs, [[] for _ in range(batch)]
        self.fed = 0

    def step(self, ids):
        if self.fed:                                      # after the prefix: record what was chosen
            for h, t in zip(self.hist, ids[:, 0], strict=True):
                h.append(int(t))
        self.fed += 1
        with np.errstate(divide="ignore"):
            return np.log(np.array([self.probs(tuple(h)) for h in self.hist]))[:, None]  # (B, 1, V)

    def reorder(self, index):
        self.hist = [list(self.hist[i]) for i in index]


def test_beam_only_finishes_eos_that_ranks_among_the_beams():
    """Beam 1 keeps one extension a step: EOS at rank 2 (p .4 < .5) must not become a
    hypothesis, or beam 1 would return [EOS] although greedy continues with 'a'."""
    def probs(h):
        return [.5, .1, .4] if not h else [.45, .45, .1] if len(h) < 3 else [0., 0., 1.]
    from npformer.decode.beam import beam_search_stepper
    (best,) = beam_search_stepper(Scripted(1, probs), np.zeros((1, 1), int), 6, eos_id=EOS, beam=1, alpha=0.0)[0]
    assert best.tokens.tolist() == [0, 0, 0, EOS]
    assert best.logprob == pytest.approx(np.log(.5 * .45 * .45))


def test_beam_does_not_stop_while_a_longer_hypothesis_can_still_win():
    """alpha 1: [EOS] scores log .6 = -0.51 at step 1. The live 'a' beam (log .4) can still end
    at length 10 with score (log .4 + 9 log .99) / 2.5 = -0.40, which is better, so the search
    must go on (a bound using the next step's penalty, -0.92 / (7/6), would stop)."""
    def probs(h):
        return [.4, 0., .6] if not h else [.99, 0., .01] if len(h) < 9 else [.01, 0., .99]
    from npformer.decode.beam import beam_search_stepper
    (best,) = beam_search_stepper(Scripted(1, probs), np.zeros((1, 1), int), 10, eos_id=EOS, beam=1, alpha=1.0)[0]
    assert best.tokens.tolist() == [0] * 9 + [EOS]
    assert best.score == pytest.approx((np.log(.4) + 9 * np.log(.99)) / 2.5)
    hyps = beam_search_stepper(Scripted(2, probs), np.zeros((2, 1), int), 10, eos_id=EOS, beam=2, alpha=1.0)
    for h in hyps:                                        # a batch of two identical sources
        assert [x.tokens.tolist() for x in h] == [[0] * 9 + [EOS], [EOS]]
