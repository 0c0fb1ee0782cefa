"""The tabletop scorers that give the README's success rates, ``TabletopTask.evaluate`` and
``evaluate_instructions``, against stub policies whose answers are known: a scene counts only when pick
AND place are both right. The stub reads the true cells off the image itself (each palette colour's
pixels, by nearest colour) and the names off the word ids, so its answers come from neither scorer."""
import numpy as np
import pytest

from npformer.data import tabletop as tt
from npformer.data.tabletop_policy import evaluate_instructions

# the palette a pixel is matched against: the five block colours, the two containers, the table
_PALETTE = np.array([tt.COLOURS[c] for c in tt.COLOUR_NAMES] + [tt.CONTAINERS[k] for k in tt.CONTAINER_NAMES]
                    + [tt.TABLE])                                             # (8, 3)


def _cells_by_colour(images: np.ndarray) -> np.ndarray:
    """(B, 7) the cell holding the most pixels nearest each block colour and container colour."""
    n = len(images)
    tiles = images.reshape(n, tt.GRID, tt.CELL, tt.GRID, tt.CELL, 3).transpose(0, 1, 3, 2, 4, 5)
    tiles = tiles.reshape(n, tt.N_CELLS, tt.CELL * tt.CELL, 3)                # (B, 16, 64, 3)
    nearest = np.abs(tiles[..., None, :] - _PALETTE).sum(-1).argmin(-1)     # (B, 16, 64)
    counts = np.stack([(nearest == j).sum(-1) for j in range(len(_PALETTE) - 1)], axis=-1)  # (B, 16, 7)
    return counts.argmax(1)                                                  # (B, 7)


class OraclePolicy:
    """A stand-in for a scratch VLA policy: it looks up which colour and container the instruction names,
    finds them in the image, and answers with those cells. ``wrong`` ("pick" or "place") moves that
    answer one cell on, so that one of the two is always wrong and the other always right."""

    def __init__(self, wrong: str | None = None):
        self.wrong = wrong
        self.dtype = np.float32
        self.config = type("Config", (), {"text_dim": 0, "vocab_size": len(tt.VOCAB)})()

    def act(self, words, images):                                            # (B, L), (B, H, W, C) -> (B, 2)
        cells = _cells_by_colour(images)
        out = np.empty((len(words), 2), dtype=np.int64)
        for i, ids in enumerate(words):
            names = {tt.VOCAB[j] for j in ids}
            colour, = names & set(tt.COLOURS)
            container, = names & set(tt.CONTAINERS)
            out[i] = (cells[i, tt.COLOUR_NAMES.index(colour)],
                      cells[i, len(tt.COLOUR_NAMES) + tt.CONTAINER_NAMES.index(container)])
        if self.wrong is not None:
            col = 0 if self.wrong == "pick" else 1
            out[:, col] = (out[:, col] + 1) % tt.N_CELLS
        return out

    def forward(self, words, images):                                        # -> logits (B, 2, 16), no cache
        logits = np.full((len(words), 2, tt.N_CELLS), -5.0, dtype=np.float32)
        np.put_along_axis(logits, self.act(words, images)[..., None], 5.0, axis=-1)
        return logits, None


def test_the_oracle_reads_the_true_cells_off_the_image():
    """The stub itself, against the scenes' own record of where everything stands."""
    s = tt.render_scenes(np.random.default_rng(3), 600)
    cells = _cells_by_colour(s.images)
    truth = np.concatenate([s.blocks, s.containers], axis=1)                 # (B, 7), -1 where absent
    present = truth >= 0
    assert (cells[present] == truth[present]).all()


@pytest.mark.parametrize("wrong, success, pick, place", [
    (None, 1.0, 1.0, 1.0), ("place", 0.0, 1.0, 0.0), ("pick", 0.0, 0.0, 1.0)])
def test_evaluate_needs_pick_and_place_both_right(wrong, success, pick, place):
    res = tt.TabletopTask().evaluate(OraclePolicy(wrong), n=300, seed=5, batch_size=128)
    assert res["n"] == 300
    assert (res["success"], res["pick_accuracy"], res["place_accuracy"]) == (success, pick, place)
    assert res["yellow_bowl_success"] == success


@pytest.mark.parametrize("wrong, success", [(None, 1.0), ("place", 0.0), ("pick", 0.0)])
def test_evaluate_instructions_needs_pick_and_place_both_right(wrong, success):
    lines = [(1, "put the red block in the box", "red", "box"),
             (4, "lift the yellow brick into the bowl", "yellow", "bowl"),     # "lift", "brick": [UNK]
             (9, "the purple cube goes inside the bowl", "purple", "bowl")]
    res = evaluate_instructions(OraclePolicy(wrong), lines, n=80, seed=2)
    assert [r["line"] for r in res["lines"]] == [1, 4, 9]
    assert [r["success"] for r in res["lines"]] == [success] * 3
    assert res["success"] == success and res["n_lines"] == 3
