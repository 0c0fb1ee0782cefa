"""The demo's measured cross-attention shares: the right rows and columns, and shares that are shares."""
import numpy as np

from npformer.cli import main
from npformer.cli.demo import ATTENTION_PARTS, ATTENTION_SOURCE, EXAMPLES, cross_attention_shares


def test_parts_name_the_right_characters():
    source, iso = EXAMPLES[0]
    assert source == ATTENTION_SOURCE
    for text, _ in ATTENTION_PARTS.values():
        assert text in source
    assert [iso[rows] for _, rows in ATTENTION_PARTS.values()] == ["2026", "11", "29"]


def test_shares_are_fractions_of_the_rows_attention(tmp_path, monkeypatch):
    from npformer.data.dates import DatesTask
    monkeypatch.setattr(DatesTask, "eval_size", 8)
    run = tmp_path / "dates"
    assert main(["train", "dates", "--out", str(run), "--steps", "2", "--no-progress", "--no-plot",
                 "--set", "final_eval_n=8"]) == 0
    shares = cross_attention_shares(run, ATTENTION_SOURCE, ATTENTION_PARTS)
    assert set(shares) == set(ATTENTION_PARTS)
    assert all(0.0 <= s <= 1.0 for s in shares.values())
    # a 2-step model attends almost evenly: no part can hold nearly all of its rows' attention
    assert not all(s > 0.9 for s in shares.values())
    assert np.isfinite(list(shares.values())).all()
