"""The attention figure: one labelled panel per (kind, layer, head), written as a PNG."""
import numpy as np
import pytest

from npformer.viz import attention_figure, model_panels, save_attention_figure, token_labels


def _weights(rng, h, q, k):
    w = rng.random((h, q, k))
    return w / w.sum(-1, keepdims=True)                   # (H, Tq, Tk), rows sum to 1


def test_one_panel_per_kind_layer_and_head(rng, tmp_path):
    src, out = list("12 May"), ["2", "0", "<eos>"]
    panels = {"encoder self": [_weights(rng, 3, 6, 6)],
              "decoder self": [_weights(rng, 3, 3, 3), _weights(rng, 3, 3, 3)],
              "cross": [_weights(rng, 3, 3, 6), _weights(rng, 3, 3, 6)]}
    labels = {"encoder self": (src, src), "decoder self": (out, ["<bos>", "2", "0"]), "cross": (out, src)}
    fig = attention_figure(panels, labels, title="t")
    axes = [ax for ax in fig.axes if ax.get_label() == "attention"]
    assert len(axes) == (1 + 2 + 2) * 3
    first = axes[0]                                       # encoder layer 1, head 1: tokens on both axes
    assert [t.get_text() for t in first.get_yticklabels()] == ["1", "2", "\u2423", "M", "a", "y"]
    assert first.get_title() == "encoder self: head 1"
    np.testing.assert_array_equal(first.images[0].get_array(), panels["encoder self"][0][0])
    cross_last = axes[-1]
    assert [t.get_text() for t in cross_last.get_xticklabels()] == token_labels(src)
    np.testing.assert_array_equal(cross_last.images[0].get_array(), panels["cross"][1][2])
    path = save_attention_figure(panels, labels, tmp_path / "a.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_model_panels_pick_the_batch_item_of_every_layer(rng):
    enc = [{"self": rng.random((2, 4, 5, 5))} for _ in range(2)]                     # (B, H, S, S) per layer
    dec = [{"self": rng.random((2, 4, 3, 3)), "cross": rng.random((2, 4, 3, 5))}]    # (B, H, T, T), (B, H, T, S)
    p = model_panels({"encoder": enc, "decoder": dec}, index=1)
    assert {k: len(v) for k, v in p.items()} == {"encoder self": 2, "decoder self": 1, "cross": 1}
    for i in range(2):
        np.testing.assert_array_equal(p["encoder self"][i], enc[i]["self"][1])
    np.testing.assert_array_equal(p["decoder self"][0], dec[0]["self"][1])
    np.testing.assert_array_equal(p["cross"][0], dec[0]["cross"][1])
    lm = [{"self": rng.random((2, 2, 3, 3))}]
    p = model_panels(lm)
    assert list(p) == ["self"]
    np.testing.assert_array_equal(p["self"][0], lm[0]["self"][0])


def test_figure_errors(rng, tmp_path):
    w = [_weights(rng, 2, 3, 3)]
    with pytest.raises(ValueError, match="labels"):
        attention_figure({"self": w}, {})
    with pytest.raises(ValueError, match="3 query and 2 key"):
        attention_figure({"self": w}, {"self": (list("abc"), list("ab"))})
    with pytest.raises(ValueError, match="same number of heads"):
        attention_figure({"a": w, "b": [_weights(rng, 3, 3, 3)]}, {"a": (list("abc"),) * 2, "b": (list("abc"),) * 2})
    with pytest.raises(ValueError, match=".png"):
        save_attention_figure({"self": w}, {"self": (list("abc"),) * 2}, tmp_path / "a.pdf")
