"""Tiny digits and tabletop runs through the trainer, then eval, attention and act from the command line,
including the bad inputs that must end in one clear line and exit code 2."""
import json

import numpy as np
import pytest

from npformer.cli import main
from npformer.data.tabletop_policy import scene_for_seed
from npformer.data.tasks import get_task
from npformer.train.trainer import TrainConfig, Trainer

TINY_VIT = {"d_model": 16, "n_heads": 2, "d_ff": 16, "n_layers": 1, "patch_size": 4}
TINY_VLA = {"d_model": 16, "n_heads": 2, "d_ff": 16, "n_layers": 2}


def train(task_name, model, out, steps, data=None, lr=3e-3):
    task = get_task(task_name).create(data or {})
    cfg = TrainConfig(steps=steps, batch_size=32, schedule="constant", lr=lr, eval_every=1000, eval_n=20,
                      label_smoothing=0.0)
    trainer = Trainer.start(task, dict(model), cfg, out)
    trainer.run(progress=False, plot=False)
    return trainer


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("vision_runs")
    digits = train("digits", TINY_VIT, d / "digits", steps=30, data={"augment": False}, lr=1e-2)
    tabletop = train("tabletop", TINY_VLA, d / "tabletop", steps=40, data={"eval_size": 40})
    return d, digits, tabletop


def losses(run_dir):
    rows = (run_dir / "log.csv").read_text().splitlines()[1:]
    return np.array([float(r.split(",")[1]) for r in rows])


def test_tiny_training_learns(runs):
    d, digits, tabletop = runs
    for name in ("digits", "tabletop"):
        loss = losses(d / name)
        assert loss[-5:].mean() < 0.8 * loss[:5].mean(), (name, loss[:5], loss[-5:])
    assert digits.metrics["held_out"]["accuracy"] > 0.3                       # chance is 0.1
    assert tabletop.metrics["held_out"]["place_accuracy"] > 0.3                # chance is 1/16


def test_eval_prints_json_for_both_tasks(runs, capsys):
    d, _, _ = runs
    assert main(["eval", str(d / "digits")]) == 0
    m = json.loads(capsys.readouterr().out)
    assert m["task"] == "digits" and m["n"] == 450 and 0 <= m["accuracy"] <= 1
    assert main(["eval", str(d / "tabletop"), "--n", "30", "--seed", "4"]) == 0
    m = json.loads(capsys.readouterr().out)
    assert m["n"] == 30 and {"success", "yellow_bowl_success", "pick_accuracy", "place_accuracy"} <= set(m)


def test_attention_on_a_digit_and_act_figures(runs, capsys):
    d, _, _ = runs
    assert main(["attention", str(d / "digits"), "17", "--out", str(d / "digit.png")]) == 0
    assert (d / "digit.png").stat().st_size > 1000
    assert main(["act", str(d / "tabletop"), "--seed", "3", "--out", str(d / "act.png")]) == 0
    out = capsys.readouterr().out
    assert "action: pick cell" in out and (d / "act.png").stat().st_size > 1000


@pytest.mark.parametrize("argv,message", [
    (["act", "{tab}", "--instruction", "put the red teapot in the box"], "unknown word 'teapot'"),
    (["act", "{tab}", "--seed", "{no_red}", "--instruction", "put the red block in the box"],
     "no red block in this scene"),
    (["act", "{tab}", "--seed", "{no_bowl}", "--instruction", "put the blue block in the bowl"],
     "no bowl in this scene"),
    (["act", "{tab}", "--instruction", "put it in the box"], "exactly one block colour"),
    (["act", "{tab}", "--instruction", "   "], "empty instruction"),
    (["act", "{dig}", "--instruction", "put the red block in the box"], "not a 'tabletop' run"),
    (["attention", "{dig}", "seven", "--out", "{tmp}/x.png"], "test-set index"),
    (["attention", "{dig}", "450", "--out", "{tmp}/x.png"], "test-set index must be in 0..449"),
])
def test_bad_input_is_one_line_and_exit_2(runs, capsys, argv, message):
    d, _, _ = runs
    scenes = [scene_for_seed(s)[0] for s in range(40)]
    no_red = next(i for i, s in enumerate(scenes) if "red" not in s.blocks and "box" in s.containers)
    no_bowl = next(i for i, s in enumerate(scenes) if "bowl" not in s.containers and "blue" in s.blocks)
    argv = [a.format(tab=d / "tabletop", dig=d / "digits", tmp=d, no_red=no_red, no_bowl=no_bowl) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_demo_tabletop_step(tmp_path, capsys, monkeypatch):
    """The demo's tabletop step on a 3-step budget: trains into RUNS/tabletop, acts, draws."""
    from npformer.cli import demo

    assert [n for n, _ in demo.STEPS].count("tabletop") == 1
    monkeypatch.setattr(demo, "STEPS", [s for s in demo.STEPS if s[0] == "tabletop"])
    monkeypatch.setattr(demo, "DEMO_STEPS", 3)
    monkeypatch.setattr(demo, "DEMO_EVAL_N", 20)
    assert main(["demo", "--runs", str(tmp_path), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "yellow-with-bowl" in out and (tmp_path / "tabletop" / "act.png").is_file()
    assert not (tmp_path / "tabletop.training").exists()
