"""The tabletop scorers that give the README's success rates, ``TabletopTask.evaluate`` and
``evaluate_instructions``, against stub policies whose answers are known: a scene counts only when pick
AND place are both right. The stub reads the true cells off the image itself (each palette colour's
pixels, by nearest colour) and the names off the word ids, so its answers come from neither scorer."""
import json

import numpy as np
import pytest

from npformer.cli import main
from npformer.data import tabletop as tt
from npformer.data.tabletop_policy import evaluate_instruction_files, evaluate_instructions

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
    answer one cell on, so that one of the two is always wrong and the other always right; only for the
    instructions naming one of ``colours`` when it is given."""

    def __init__(self, wrong: str | None = None, colours: tuple = tuple(tt.COLOURS)):
        self.wrong, self.colours = wrong, colours
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
            if self.wrong is not None and colour in self.colours:
                col = 0 if self.wrong == "pick" else 1
                out[i, col] = (out[i, col] + 1) % tt.N_CELLS
        return out

    def forward(self, words, images):                                        # -> logits (B, 2, 16), no cache
        logits = np.full((len(words), 2, tt.N_CELLS), -5.0, dtype=np.float32)
        np.put_along_axis(logits, self.act(words, images)[..., None], 5.0, axis=-1)
        return logits, None


def test_the_oracle_reads_the_true_cells_off_the_image():
    """The stub itself, against the scenes' own record of where everything stands."""
    s = tt.render_scenes(np.random.default_rng(3), 300)
    cells = _cells_by_colour(s.images)
    truth = np.concatenate([s.blocks, s.containers], axis=1)                 # (B, 7), -1 where absent
    present = truth >= 0
    assert (cells[present] == truth[present]).all()


@pytest.mark.parametrize("wrong, success, pick, place", [
    (None, 1.0, 1.0, 1.0), ("place", 0.0, 1.0, 0.0), ("pick", 0.0, 0.0, 1.0)])
def test_evaluate_needs_pick_and_place_both_right(wrong, success, pick, place):
    res = tt.TabletopTask().evaluate(OraclePolicy(wrong), n=120, seed=5, batch_size=64)
    assert res["n"] == 120
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


# -- several instruction files at once: npformer eval RUN --instructions FILE [FILE ...] -----------------

FILE_A = [(1, "put the red block in the box", "red", "box"), (2, "put the blue block in the bowl", "blue", "bowl")]
FILE_B = [(3, "move the blue cube to the box", "blue", "box"),
          (5, "drop the green block into the bowl", "green", "bowl"),
          (6, "lift the purple brick into the box", "purple", "box")]


def test_several_files_success_is_the_mean_over_lines_not_over_files():
    """Red lines fail, every other line succeeds: file A scores 1/2, file B 3/3, and the overall success is
    4 of 5 lines (0.8), not the mean of the two files (0.75)."""
    res = evaluate_instruction_files(OraclePolicy("place", colours=("red",)), [("a.tsv", FILE_A), ("b.tsv", FILE_B)],
                                     n=40, seed=1)
    assert res["files"] == [{"file": "a.tsv", "n_lines": 2, "success": 0.5},
                            {"file": "b.tsv", "n_lines": 3, "success": 1.0}]
    assert res["success"] == pytest.approx(0.8) and res["n_lines"] == 5
    assert [(r["file"], r["line"], r["success"]) for r in res["lines"]] == [
        ("a.tsv", 1, 0.0), ("a.tsv", 2, 1.0), ("b.tsv", 3, 1.0), ("b.tsv", 5, 1.0), ("b.tsv", 6, 1.0)]
    assert res["unknown_words"] == 2 and res["lines_with_unknown_words"] == 1        # "lift", "brick"


TINY = ["--set", "d_model=16", "--set", "n_heads=2", "--set", "d_ff=16", "--set", "n_layers=1", "--set",
        "batch_size=8", "--set", "eval_size=8", "--set", "eval_every=1000", "--no-progress", "--no-plot"]


def _tsv(path, lines):
    path.write_text("".join(f"{text}\t{colour}\t{container}\n" for _, text, colour, container in lines))
    return str(path)


def test_eval_instructions_takes_several_files(tmp_path, capsys):
    """Each file's rows are what the file gives alone, the overall success the mean over all the lines; a bad
    second file is one line naming it, exit 2, before anything is scored."""
    run = str(tmp_path / "run")
    assert main(["train", "tabletop", "--steps", "2", "--out", run, *TINY]) == 0
    a, b = _tsv(tmp_path / "a.tsv", FILE_A), _tsv(tmp_path / "b.tsv", FILE_B)
    alone = {}
    for f in (a, b):
        capsys.readouterr()
        assert main(["eval", run, "--instructions", f, "--n", "30"]) == 0
        alone[f] = json.loads(capsys.readouterr().out)
    assert main(["eval", run, "--instructions", a, b, "--n", "30"]) == 0
    both = json.loads(capsys.readouterr().out)
    assert both["instructions"] == [a, b] and both["n_lines"] == 5
    assert both["lines"] == alone[a]["lines"] + alone[b]["lines"]
    assert [f["success"] for f in both["files"]] == [alone[a]["success"], alone[b]["success"]]
    assert both["success"] == pytest.approx(np.mean([r["success"] for r in both["lines"]]))
    assert both["success"] == pytest.approx((2 * alone[a]["success"] + 3 * alone[b]["success"]) / 5)
    bad = tmp_path / "bad.tsv"
    bad.write_text("put the red block in the crate\tred\tcrate\n")
    assert main(["eval", run, "--instructions", a, str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "container 'crate'" in err and err.count("\n") == 1, err
