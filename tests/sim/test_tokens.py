"""Action tokens: percentiles, bins, clipping, bin centres, the gripper's own tokens, and the saved form."""
import numpy as np
import pytest

from npformer.sim.tokens import ActionTokenizer

LOW, HIGH = np.array([-0.7, -1.0]), np.array([0.9, 0.5])


def test_a_round_trip_loses_at_most_half_a_bin():
    for bins in (7, 256):
        tok = ActionTokenizer(bins, LOW, HIGH)
        m = np.random.default_rng(bins).uniform(LOW, HIGH, (20000, 2))
        back, g = tok.decode(tok.encode(m, np.zeros(len(m), int)))
        half = (HIGH - LOW) / (2 * bins)                         # by hand: 0.8 / bins and 0.75 / bins
        slack = 4 * np.finfo(np.float32).eps                     # decoding returns float32
        assert (np.abs(back - m) <= half + slack).all()
        assert np.abs(back - m).max(axis=0) == pytest.approx(half, rel=0.02)   # and nearly half is reached
        assert (g == 0).all()


def test_fit_reads_the_1st_and_99th_percentiles():
    v = (np.arange(101) - 50) / 50.0                             # -1, -0.98, ..., 1: percentile p is -1 + p / 50
    moves = np.stack([v, 0.5 * v[::-1]], axis=1)
    tok = ActionTokenizer.fit(moves, 16)
    np.testing.assert_allclose(tok.low, [-0.98, -0.49], atol=1e-12)
    np.testing.assert_allclose(tok.high, [0.98, 0.49], atol=1e-12)
    with pytest.raises(ValueError, match="percentiles"):
        ActionTokenizer.fit(np.ones((50, 2)), 16)


def test_values_outside_are_clipped_to_the_end_bins():
    tok = ActionTokenizer(10, LOW, HIGH)
    t = tok.encode_moves(np.array([[-5.0, 5.0], [LOW[0], HIGH[1]], [HIGH[0], LOW[1]]]))
    assert t.tolist() == [[0, 9], [0, 9], [9, 0]]
    centres = tok.decode_moves(np.array([[0, 9]]))
    np.testing.assert_allclose(centres[0], [LOW[0] + 0.08, HIGH[1] - 0.075], rtol=1e-6)


def test_every_token_is_reachable_and_gripper_tokens_follow_the_bins():
    bins = 256
    tok = ActionTokenizer(bins, LOW, HIGH)
    edges = np.linspace(LOW, HIGH, bins + 1)                     # (bins + 1, 2)
    centres = (edges[:-1] + edges[1:]) / 2
    t = tok.encode(centres, np.arange(bins) % 3)
    assert t[:, 0].tolist() == list(range(bins)) and t[:, 1].tolist() == list(range(bins))
    assert sorted(set(t[:, 2].tolist())) == [bins, bins + 1, bins + 2]
    assert tok.vocab_size == bins + 3
    assert tok.allowed(0).tolist() == tok.allowed(4).tolist() == list(range(bins))
    assert tok.allowed(2).tolist() == tok.allowed(5).tolist() == [bins, bins + 1, bins + 2]
    moves, g = tok.decode(t)
    np.testing.assert_allclose(moves, centres, atol=1e-6)
    assert g.tolist() == (np.arange(bins) % 3).tolist()


def test_to_dict_round_trips_and_from_dict_names_the_bad_field():
    tok = ActionTokenizer(64, LOW, HIGH)
    back = ActionTokenizer.from_dict(tok.to_dict())
    assert back.bins == 64 and back.low.tolist() == LOW.tolist() and back.high.tolist() == HIGH.tolist()
    good = tok.to_dict()
    for bad, word in (({k: v for k, v in good.items() if k != "low"}, "low"), ({**good, "bins": 1}, "bins"),
                      ({**good, "bins": 2.0}, "bins"), ({**good, "high": [0.9]}, "high"),
                      ({**good, "high": [0.9, float("nan")]}, "high"), ({**good, "low": [1.0, -1.0]}, "exceed"),
                      ({**good, "extra": 1}, "extra"), ([1, 2], "object")):
        with pytest.raises(ValueError, match=word):
            ActionTokenizer.from_dict(bad)
    with pytest.raises(ValueError, match="gripper"):
        tok.decode(np.array([[0, 0, 3]]))
