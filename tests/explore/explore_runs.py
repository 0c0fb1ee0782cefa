"""Tiny trained runs of every kind the explorer opens (dates, text, digits, tabletop; gripper apart), built once per
test session through the library's Trainer, and the helpers the explorer's Python tests share."""
from __future__ import annotations

import numpy as np
import pytest

from npformer.data.tasks import get_task
from npformer.train.trainer import TrainConfig, Trainer

TINY_SEQ2SEQ = {"d_model": 16, "n_heads": 2, "d_ff": 32, "n_encoder_layers": 2, "n_decoder_layers": 2,
                "dropout": 0.1}
TINY_LM = {"d_model": 16, "n_heads": 2, "d_ff": 32, "n_layers": 2, "max_len": 24, "dropout": 0.1}
TINY_VIT = {"d_model": 16, "n_heads": 2, "d_ff": 16, "n_layers": 2, "patch_size": 2}
TINY_VLA = {"d_model": 16, "n_heads": 2, "d_ff": 16, "n_layers": 2}

_BUILT: dict = {}


def _train(task, model: dict, out, steps: int = 4):
    cfg = TrainConfig(steps=steps, batch_size=8, schedule="constant", lr=3e-3, eval_every=2, eval_n=10,
                      final_eval_n=10, label_smoothing=0.0, seed=1)
    Trainer.start(task, dict(model), cfg, out).run(progress=False, plot=False)
    return out


def build_runs(base) -> dict:
    """{"dates", "text", "digits", "tabletop"} -> run directory, each trained 4 steps (probes at 0, 2, 4)."""
    book = base / "book.txt"
    book.write_text("the quick brown fox jumps over the lazy dog. " * 20, encoding="utf-8")
    return {
        "dates": _train(get_task("dates").create(), TINY_SEQ2SEQ, base / "dates"),
        "text": _train(get_task("text").create({"block_size": 16}, data_path=str(book)), TINY_LM, base / "text"),
        "digits": _train(get_task("digits").create({"augment": False}), TINY_VIT, base / "digits"),
        "tabletop": _train(get_task("tabletop").create({"eval_size": 10}), TINY_VLA, base / "tabletop"),
    }


# a gripper run (action_lm) for the episode view: 4 steps on 20 demonstrations, 16 bins
TINY_GRIPPER = {"d_model": 16, "n_heads": 2, "d_ff": 16, "n_layers": 2}
GRIPPER_DATA = {"demos": 20, "action_bins": 16, "eval_size": 2}


@pytest.fixture(scope="session")
def gripper_run(tmp_path_factory):
    if "gripper" not in _BUILT:
        out = tmp_path_factory.mktemp("explore_gripper") / "gripper"
        cfg = TrainConfig(steps=4, batch_size=8, schedule="constant", lr=3e-3, eval_every=10_000, eval_n=2,
                          final_eval_n=2, label_smoothing=0.0, optimizer="adamw", blas_threads=1, seed=1)
        Trainer.start(get_task("gripper").create(GRIPPER_DATA), dict(TINY_GRIPPER), cfg, out).run(progress=False,
                                                                                                 plot=False)
        _BUILT["gripper"] = out
    return _BUILT["gripper"]


@pytest.fixture(scope="session")
def explore_runs(tmp_path_factory):
    if "runs" not in _BUILT:
        _BUILT["runs"] = build_runs(tmp_path_factory.mktemp("explore_runs"))
    return _BUILT["runs"]


# an input of each kind, as the explorer takes it
INPUTS = {"dates": [{"text": "29 November 2026"}], "text": [{"text": "the lazy fox"}],
          "digits": [{"index": 17}], "tabletop": [{"seed": 3}]}


def one_line_error(err: str, *fragments) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for f in fragments:
        assert f in lines[0], (f, lines[0])


def softmax_rows(scores: np.ndarray) -> np.ndarray:
    """float64 softmax over the last axis; a row with every key masked (-inf) gives zeros."""
    m = scores.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(scores - m)
    s = e.sum(axis=-1, keepdims=True)
    return np.divide(e, s, out=np.zeros_like(e), where=s > 0)
