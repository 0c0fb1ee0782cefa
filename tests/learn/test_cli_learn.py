"""``npformer learn init|check|quiz`` through the command line (in-process, so that the stand-in exercises of
learn_standin.py reach the forked grading child): the workbook, its refusal and --force's .bak copy, the
table, the exit codes, --json, the one-line errors of bad usage, and quiz's wiring."""
from __future__ import annotations

import json
import subprocess
import sys
import types

import learn_standin
import pytest
from learn_standin import SOLUTIONS

import npformer.learn
from npformer.cli import main


@pytest.fixture
def standin(monkeypatch):
    return learn_standin.installed(monkeypatch)


def cli(capsys, *argv) -> tuple[int, str, str]:
    rc = main(["learn", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


def one_line_error(capsys, *argv) -> str:
    with pytest.raises(SystemExit) as e:           # argparse's refusals
        main(["learn", *map(str, argv)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.splitlines()) == 1, err
    return err


def test_init_writes_the_stubs_and_a_readme(standin, tmp_path, capsys):
    rc, out, _ = cli(capsys, "init", tmp_path / "work")
    source = (tmp_path / "work" / "transformer.py").read_text()
    assert rc == 0 and f"wrote {tmp_path / 'work' / 'transformer.py'}" in out
    for ex in standin.EXERCISES.values():
        assert ex.stub.strip() in source
    assert [line for line in source.splitlines() if line.startswith("def ")] == [
        "def softmax(x):", "def split_heads(x, n_heads):", "def merge_heads(x):",
        "def layer_norm(x, gamma, beta, eps=1e-5):", "def causal_mask(T):"]
    compile(source, "transformer.py", "exec")
    readme = (tmp_path / "work" / "README.md").read_text()
    assert f"npformer learn check {tmp_path / 'work'}" in readme
    assert "| `layer_norm(x, gamma, beta, eps=1e-5)` | 3. Many heads, and a block around them |" in readme
    rc, out, _ = cli(capsys, "check", tmp_path / "work")
    assert rc == 0 and out.splitlines()[-1] == "0 pass, 0 fail, 0 error, 5 todo"


def test_init_refuses_a_transformer_py_and_force_keeps_a_bak(standin, tmp_path, capsys):
    mine = tmp_path / "transformer.py"
    mine.write_text(SOLUTIONS)
    rc, out, err = cli(capsys, "init", tmp_path)
    assert rc == 2 and out == "" and err == (f"npformer learn: error: {mine} already exists; --force overwrites it "
                                             "after keeping a .bak copy\n")
    assert mine.read_text() == SOLUTIONS
    assert cli(capsys, "init", tmp_path, "--force")[0] == 0
    assert (tmp_path / "transformer.py.bak").read_text() == SOLUTIONS and "NotImplementedError" in mine.read_text()
    mine.write_text(SOLUTIONS + "# second try\n")
    assert cli(capsys, "init", tmp_path, "--force")[0] == 0                   # the first .bak is kept too
    assert (tmp_path / "transformer.py.bak").read_text() == SOLUTIONS
    assert (tmp_path / "transformer.py.1.bak").read_text() == SOLUTIONS + "# second try\n"
    (tmp_path / "file").write_text("")
    rc, _, err = cli(capsys, "init", tmp_path / "file")
    assert rc == 2 and err == f"npformer learn: error: {tmp_path / 'file'} is a file, not a folder for the workbook\n"


def test_check_prints_the_table_and_exits_by_the_worst_status(standin, tmp_path, capsys):
    (tmp_path / "transformer.py").write_text(SOLUTIONS)
    rc, out, _ = cli(capsys, "check", tmp_path)
    assert rc == 0 and out.splitlines()[-1] == "5 pass, 0 fail, 0 error, 0 todo"
    (tmp_path / "transformer.py").write_text(SOLUTIONS + "\n\ndef causal_mask(T):\n    return np.tri(T, k=-1) > 0\n")
    rc, out, _ = cli(capsys, "check", tmp_path, "causal_mask", "softmax")
    lines = out.splitlines()
    assert rc == 1 and lines[:4] == ["exercise     status", "-----------  ------", "softmax      pass",
                                     "causal_mask  fail"]
    assert lines[-2] == "    the numbers are wrong (lesson section 4: Attention does not know the order)"
    rc, out, _ = cli(capsys, "check", tmp_path / "transformer.py", "causal_mask", "softmax", "--json")
    assert rc == 1 and json.loads(out) == {"exercises": [
        {"name": "softmax", "status": "pass", "message": ""},
        {"name": "causal_mask", "status": "fail", "message": learn_standin.EXERCISES["causal_mask"].grade(
            lambda T: learn_standin.np.tri(T, k=-1) > 0).message}]}
    (tmp_path / "transformer.py").write_text("def softmax(x):\n    raise RuntimeError('oops')\n")
    rc, out, _ = cli(capsys, "check", tmp_path, "--json", "--timeout", "5")
    assert rc == 1 and [e["status"] for e in json.loads(out)["exercises"]] == ["error"] * 5


def test_bad_usage_is_one_line_and_exit_2(standin, tmp_path, capsys):
    (tmp_path / "transformer.py").write_text(SOLUTIONS)
    for argv, expected in [
        (("check", tmp_path, "attn"), "no exercise named 'attn'; the exercises are softmax, split_heads, "
                                      "merge_heads, layer_norm, causal_mask"),
        (("check", tmp_path, "--timeout", "0"), "--timeout must be a positive number of seconds, got 0.0"),
        (("check", tmp_path / "nowhere"), f"{tmp_path / 'nowhere' / 'transformer.py'} not found: write a "
                                          f"workbook first with npformer learn init {tmp_path / 'nowhere'}"),
        ((), "say what to do: init DIR, check DIR [NAME ...] or quiz"),
    ]:
        rc, out, err = cli(capsys, *argv)
        assert (rc, out, err) == (2, "", f"npformer learn: error: {expected}\n"), argv
    assert "invalid float value: 'soon'" in one_line_error(capsys, "check", tmp_path, "--timeout", "soon")
    assert "the following arguments are required: DIR" in one_line_error(capsys, "init")
    assert "invalid choice: 'grade'" in one_line_error(capsys, "grade")


def test_quiz_is_wired_to_the_quiz_module(monkeypatch, capsys):
    calls = []
    quiz = types.SimpleNamespace(run=lambda *, no_input=False: calls.append(no_input) or 0)
    monkeypatch.setitem(sys.modules, "npformer.learn.quiz", quiz)
    monkeypatch.setattr(npformer.learn, "quiz", quiz, raising=False)
    assert cli(capsys, "quiz", "--no-input")[0] == 0 and cli(capsys, "quiz")[0] == 0
    assert calls == [True, False]


def test_the_installed_command_answers_bad_usage_without_a_traceback(tmp_path):
    done = subprocess.run([sys.executable, "-m", "npformer", "learn", "check", tmp_path], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (f"npformer learn: error: {tmp_path / 'transformer.py'} not found: write a workbook "
                           f"first with npformer learn init {tmp_path}\n")
