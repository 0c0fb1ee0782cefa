"""npformer train / eval from the command line, and every bad input: one line on stderr, exit 2."""
import json

import pytest
from train_helpers import TINY_SETS, cli, one_line_error

from npformer.cli import main
from oracles import require


@pytest.fixture(scope="module")
def copy_run(tmp_path_factory):
    """A 3-step copy run made by the command line (plots too)."""
    out = tmp_path_factory.mktemp("cli") / "copy"
    rc = main(["train", "copy", "--out", str(out), "--steps", "3", "--seed", "5", "--no-progress", *TINY_SETS])
    assert rc == 0
    return out


def test_train_writes_a_run_and_resume_continues(copy_run, capsys):
    names = {p.name for p in copy_run.iterdir()}
    assert {"config.json", "model.safetensors", "optimizer.safetensors", "trainer_state.json", "metrics.json",
            "log.csv", "eval.csv", "curves.png"} <= names
    assert (copy_run / "curves.png").read_bytes()[:4] == b"\x89PNG"
    config = json.loads((copy_run / "config.json").read_text())
    assert config["train"]["seed"] == 5 and config["model"]["d_model"] == 16 and config["data"]["max_len"] == 4
    rc, out, _ = cli(capsys, "train", "copy", "--out", copy_run, "--resume", "--steps", 5, "--no-progress",
                     "--no-plot")
    assert rc == 0 and "resuming copy" in out and "step 5" in out
    assert json.loads((copy_run / "metrics.json").read_text())["step"] == 5


def test_eval_prints_json_matching_training(copy_run, capsys):
    # the run's final evaluation ran with its blas_threads (the copy recipe's 1); OpenBLAS's threaded
    # kernels may round a product otherwise, so the command evaluates on as many threads, and then
    # does the very same arithmetic
    threads = json.loads((copy_run / "config.json").read_text())["train"]["blas_threads"]
    assert threads == 1
    with require("threadpoolctl").threadpool_limits(threads, user_api="blas"):
        rc, out, _ = cli(capsys, "eval", copy_run, "--n", 40)
    assert rc == 0
    got = json.loads(out)
    saved = json.loads((copy_run / "metrics.json").read_text())
    assert got["task"] == "copy" and got["seed"] == 5 and got["n"] == 40
    assert got["exact_match"] == saved["held_out"]["exact_match"]      # same draw, same model
    assert got["loss"] == pytest.approx(saved["held_out"]["loss"], rel=1e-12)


def test_refuses_to_overwrite_and_to_mix_tasks(copy_run, capsys):
    rc, _, err = cli(capsys, "train", "copy", "--out", copy_run, "--steps", 2, "--no-progress")
    assert rc == 2
    one_line_error(err, "already holds a 'copy' run", "--resume")
    rc, _, err = cli(capsys, "train", "dates", "--out", copy_run, "--resume", "--no-progress")
    assert rc == 2
    one_line_error(err, "holds a 'copy' run, not a 'dates' run")
    rc, _, err = cli(capsys, "train", "dates", "--out", copy_run, "--force", "--no-progress")
    assert rc == 2
    one_line_error(err, "holds a 'copy' run, not a 'dates' run")
    rc, _, err = cli(capsys, "train", "copy", "--out", copy_run, "--resume", "--set", "d_model=32")
    assert rc == 2
    one_line_error(err, "--set may change only")


@pytest.mark.parametrize("argv,fragments", [
    (["train", "nosuchtask"], ["unknown task 'nosuchtask'", "copy", "dates", "text"]),
    (["train", "copy", "--set", "colour=red"], ["unknown setting 'colour'"]),
    (["train", "copy", "--set", "d_model=wide"], ["d_model expects int", "'wide'"]),
    (["train", "copy", "--set", "max_len=4"], ["ambiguous", "model.max_len", "data.max_len"]),
    (["train", "copy", "--set", "d_model"], ["key=value"]),
    (["train", "copy", "--set", "n_heads=3"], ["divisible"]),
    (["train", "copy", "--steps", "0"], ["--steps must be >= 1"]),
    (["train", "copy", "--data", "x.txt"], ["takes no --data"]),
    (["train", "text"], ["needs a text file: --data FILE"]),
    (["train", "text", "--data", "no/such/file.txt"], ["data file not found"]),
    (["eval", "no/such/run"], ["run directory not found"]),
    (["eval", "."], ["not an npformer run directory"]),
])
def test_bad_input_is_one_line_and_exit_2(argv, fragments, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, _, err = cli(capsys, *argv, "--no-progress") if argv[0] == "train" else cli(capsys, *argv)
    assert rc == 2
    one_line_error(err, *fragments)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_unknown_option_is_one_line_and_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["train", "copy", "--colour", "red"])
    assert e.value.code == 2
    one_line_error(capsys.readouterr().err, "unrecognized arguments: --colour red")


@pytest.mark.parametrize("content,fragment", [
    (b"caf\xe9 au lait\n" * 50, "is not UTF-8 text (invalid continuation byte"),
    (b"", "is empty"),
    (b"short", "too short"),
])
def test_bad_text_files(content, fragment, capsys, tmp_path):
    f = tmp_path / "data.txt"
    f.write_bytes(content)
    rc, _, err = cli(capsys, "train", "text", "--data", f, "--out", tmp_path / "run", "--no-progress")
    assert rc == 2
    one_line_error(err, fragment)
    assert not (tmp_path / "run").exists()


def test_eval_of_a_checkpoint_that_does_not_match_its_config(copy_run, capsys, tmp_path):
    import shutil
    bad = tmp_path / "bad"
    shutil.copytree(copy_run, bad)
    config = json.loads((bad / "config.json").read_text())
    config["model"]["d_model"] = 32
    (bad / "config.json").write_text(json.dumps(config))
    rc, _, err = cli(capsys, "eval", bad)
    assert rc == 2
    one_line_error(err, "does not match config.json")


def test_commands_come_from_one_table(monkeypatch):
    """Every command of cli.COMMANDS is a subcommand, in order; building the parser changes no table;
    a command module that fails to import is an error that names it (nothing is skipped)."""
    from npformer import cli
    from npformer.cli import demo
    from npformer.data import tasks

    before = ([name for name, _ in demo.STEPS], dict(tasks.TASKS), dict(tasks.MODEL_KINDS))
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert list(sub.choices) == cli.COMMANDS
    assert ([name for name, _ in demo.STEPS], dict(tasks.TASKS), dict(tasks.MODEL_KINDS)) == before
    assert [name for name, _ in demo.STEPS] == ["lesson", "train", "translate", "attention", "tabletop", "explore"]
    monkeypatch.setattr(cli, "COMMANDS", [*cli.COMMANDS, "nonesuch"])
    with pytest.raises(ImportError, match="command 'nonesuch': module npformer.cli.nonesuch failed to import"):
        cli.build_parser()


def test_demo_runs_its_steps_end_to_end(tmp_path, capsys, monkeypatch):
    """The demo's glue on a 2-step dates model: train into runs/dates (twice: the second run replaces
    the first only when it has finished), then translate. The lesson and the attention figure have
    their own tests; the curves and a 2,000-date evaluation are skipped here for time."""
    from npformer.cli import demo
    from npformer.data.dates import DatesTask
    from npformer.train.trainer import Trainer
    monkeypatch.setattr(DatesTask, "eval_size", 20)
    monkeypatch.setattr(Trainer, "plot", lambda self: None)
    monkeypatch.setattr(demo, "STEPS", [s for s in demo.STEPS if s[0] in ("lesson", "train", "translate")])
    argv = ("demo", "--runs", tmp_path, "--steps", 2, "--skip", "lesson", "--no-progress")
    for _ in range(2):
        rc, out, _ = cli(capsys, *argv)
        assert rc == 0
        assert "held-out exact match" in out and "29 November 2026  ->" in out
        assert (tmp_path / "dates" / "model.safetensors").is_file()
        assert {p.name for p in tmp_path.iterdir()} == {"dates"}
    rc, _, err = cli(capsys, "demo", "--skip", "nothing")
    assert rc == 2
    one_line_error(err, "unknown step 'nothing'")


def test_demo_help_names_every_step_it_runs(capsys):
    """``npformer demo --help`` says what the tour does: each step the demo runs (``demo.STEPS``) is named
    in the description above the options, not only in the list --skip takes."""
    import re

    from npformer.cli import demo
    with pytest.raises(SystemExit) as e:
        main(["demo", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    description = " ".join(out.split("\n\n")[1].split())                # the paragraph after the usage lines
    assert not description.startswith("options:")
    for name, _ in demo.STEPS:
        assert re.search(rf"\b{name}\b", description), f"step {name!r} is not named in: {description}"
