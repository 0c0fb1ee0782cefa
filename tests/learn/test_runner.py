"""The runner: a learner's code graded in a child process, one exercise after another, with a time limit
each; endless loops, exits and crashes are that exercise's error and the rest are still graded; printing
is captured; tracebacks show the learner's frames only; ``npformer.learn.check`` on function objects,
forked or in-process; the report's text, HTML and JSON.

Most tests grade against a stand-in for the exercises (learn_standin.py), so that they test the runner and
not the grader. The last two run against the real ``npformer.learn.exercises``: the stubs as written give
todo, and npformer's own functions pass every exercise.
"""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import learn_standin
import numpy as np
import pytest
from learn_standin import SOLUTIONS

from npformer.learn import Report, Row, check, runner

HERE = Path(__file__).parent


@pytest.fixture
def standin(monkeypatch):
    return learn_standin.installed(monkeypatch)


def workbook(tmp_path: Path, source: str, name: str = "transformer.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return path


def statuses(report: Report) -> dict[str, str]:
    return {r.name: r.status for r in report.rows}


def test_pass_fail_error_todo_and_printing_in_one_child(standin, tmp_path, capfd):
    path = workbook(tmp_path, '''
        import numpy as np


        def softmax(x):                        # the wrong axis
            e = np.exp(x - x.max(axis=0, keepdims=True))
            return e / e.sum(axis=0, keepdims=True)


        def _heads(x, n_heads):
            raise ValueError("my own mistake")


        def split_heads(x, n_heads):
            return _heads(x, n_heads)


        def merge_heads(x):
            raise NotImplementedError("merge_heads")


        def layer_norm(x, gamma, beta, eps=1e-5):
            print("debugging layer_norm", x.shape)
            mu = x.mean(axis=-1, keepdims=True)
            return (x - mu) / np.sqrt(x.var(axis=-1, keepdims=True) + eps) * gamma + beta
        ''')
    report = runner.grade_file(path, timeout=10)
    assert statuses(report) == {"softmax": "fail", "split_heads": "error", "merge_heads": "todo",
                                "layer_norm": "pass", "causal_mask": "error"}
    rows = {r.name: r for r in report.rows}
    assert "the numbers are wrong" in rows["softmax"].message                # the grader's diagnosis, as it is
    error = rows["split_heads"].message
    assert f'File "{path}", line 11, in _heads' in error and "line 15, in split_heads" in error
    assert "ValueError: my own mistake" in error
    assert "runner.py" not in error and "learn_standin" not in error and "exercises" not in error
    assert rows["merge_heads"].message == "" and rows["layer_norm"].message == ""
    assert rows["causal_mask"].message == "there is no function causal_mask: causal_mask(T) is expected"
    assert "debugging layer_norm (2, 3, 4)" in rows["layer_norm"].output
    assert "debugging" not in capfd.readouterr().out                         # captured, not printed
    assert report.exit_code == 1


def test_an_endless_loop_an_exit_and_a_crash_are_errors_and_the_rest_is_graded(standin, tmp_path):
    path = workbook(tmp_path, SOLUTIONS + '''

def softmax(x):
    while True:
        pass


def split_heads(x, n_heads):
    import os
    os._exit(3)


def merge_heads(x):
    import sys
    sys.exit(4)


def layer_norm(x, gamma, beta, eps=1e-5):
    import os
    import signal
    os.kill(os.getpid(), signal.SIGKILL)
''')
    report = runner.grade_file(path, timeout=1)
    assert statuses(report) == {"softmax": "error", "split_heads": "error", "merge_heads": "error",
                                "layer_norm": "error", "causal_mask": "pass"}
    m = {r.name: r.message for r in report.rows}
    assert m["softmax"] == "softmax took longer than the time limit of 1 s (an endless loop?)"
    assert m["split_heads"] == ("the process ended while grading split_heads: exit status 3 "
                                "(os._exit, or a crash in compiled code)")
    assert "SystemExit: 4" in m["merge_heads"] and ", in merge_heads" in m["merge_heads"]
    assert m["layer_norm"] == "the process ended while grading layer_norm: killed by SIGKILL (a crash)"


def test_a_syntax_error_names_its_file_and_line(standin, tmp_path):
    path = workbook(tmp_path, SOLUTIONS + "\n\ndef softmax(x)\n    return x\n")
    line = len((SOLUTIONS + "\n\ndef softmax(x)\n").splitlines())
    report = runner.grade_file(path, ["softmax", "causal_mask"])
    assert statuses(report) == {"softmax": "error", "causal_mask": "error"}
    assert report.rows[0].message.startswith(f"syntax error in {path}, line {line}: ")
    assert "def softmax(x)" in report.rows[0].message
    text = report.text().splitlines()                       # the table says it once, then points up
    assert sum(line.strip().startswith("syntax error in") for line in text) == 1
    assert text[text.index("causal_mask  error") + 1] == "    (the same as above)"


def test_an_error_at_import_is_every_exercises_error_with_its_traceback(standin, tmp_path):
    path = workbook(tmp_path, SOLUTIONS + "\nscale = 1 / 0\n")
    report = runner.grade_file(path, ["causal_mask", "softmax"])
    assert [r.name for r in report.rows] == ["softmax", "causal_mask"]      # the lesson's order
    for row in report.rows:
        assert row.status == "error"
        assert row.message.startswith("importing transformer.py raised (your code's frames):")
        assert f'File "{path}", line' in row.message and "ZeroDivisionError" in row.message


def test_bad_arguments_are_named(standin, tmp_path):
    with pytest.raises(ValueError, match="no exercise named 'attn'; the exercises are softmax, split_heads"):
        runner.grade_file(workbook(tmp_path, SOLUTIONS), ["attn"])
    for bad in (0, -1, float("nan"), float("inf"), "soon"):
        with pytest.raises(ValueError, match="timeout must be a positive number of seconds"):
            runner.grade_file(workbook(tmp_path, SOLUTIONS), timeout=bad)
    with pytest.raises(FileNotFoundError):
        runner.grade_file(tmp_path / "missing.py")
    with pytest.raises(ValueError, match="is a folder"):
        runner.grade_file(tmp_path)
    with pytest.raises(TypeError, match="fn must be a function, got list"):
        check("softmax", [1, 2])
    with pytest.raises(ValueError, match="no exercise named 'Softmax'"):
        check("Softmax", np.exp)


def _closure_softmax(shift: float):
    """A function defined where no child could import it by name, as in a notebook."""
    def my_softmax(x):
        e = np.exp(x - x.max(axis=-1, keepdims=True) + shift)
        return e / e.sum(axis=-1, keepdims=True) * (1.0 + shift)
    return my_softmax


def test_check_grades_a_function_object_in_a_forked_child(standin, capfd):
    assert runner.can_fork()
    good = check("softmax", _closure_softmax(0.0))
    assert [(r.name, r.status, r.message) for r in good.rows] == [("softmax", "pass", "")]
    assert good.note == "" and good.exit_code == 0
    bad = check("softmax", _closure_softmax(0.5))
    assert bad.rows[0].status == "fail" and "(lesson section 1: Attention over three hand-made tokens)" in str(bad)

    def loops(x):
        print("thinking")
        while True:
            pass
    slow = check("softmax", loops, timeout=0.5)
    assert slow.rows[0].message == "softmax took longer than the time limit of 0.5 s (an endless loop?)"
    assert "thinking" not in capfd.readouterr().out


def test_check_grades_in_process_where_it_cannot_fork_and_says_so(standin, monkeypatch):
    monkeypatch.setattr(runner, "can_fork", lambda: False)

    def noisy(T):
        print("hello from the learner")
        return np.tri(T, dtype=bool)
    report = check("causal_mask", noisy)
    assert report.rows[0].status == "pass" and report.rows[0].output == "hello from the learner\n"
    assert report.note.startswith("graded in this process: this platform cannot fork")
    assert report.note in str(report)
    wrong = check("causal_mask", lambda T: np.tri(T, k=-1, dtype=bool))
    assert wrong.rows[0].status == "fail"
    stub = check("causal_mask", lambda T: (_ for _ in ()).throw(NotImplementedError()))
    assert stub.rows[0].status == "todo"


def test_the_report_as_text_html_and_json():
    report = Report((Row("softmax", "pass", output="printed"), Row("attention", "fail", "line 1\nline 2 <b>"),
                     Row("split_heads", "error", "Traceback"), Row("merge_heads", "todo")))
    assert str(report).splitlines() == [
        "exercise     status", "-----------  ------", "softmax      pass", "attention    fail", "    line 1",
        "    line 2 <b>", "split_heads  error", "    Traceback", "merge_heads  todo", "1 pass, 1 fail, 1 error, 1 todo"]
    assert json.loads(json.dumps(report.to_json())) == {"exercises": [
        {"name": "softmax", "status": "pass", "message": ""},
        {"name": "attention", "status": "fail", "message": "line 1\nline 2 <b>"},
        {"name": "split_heads", "status": "error", "message": "Traceback"},
        {"name": "merge_heads", "status": "todo", "message": ""}]}
    page = report._repr_html_()
    assert page.count("<tr>") == 5 and "line 2 &lt;b&gt;" in page and "<b>" not in page
    assert report.exit_code == 1
    assert Report((Row("softmax", "pass"), Row("attention", "todo"))).exit_code == 0
    assert Report((Row("softmax", "error"),)).exit_code == 1
    with pytest.raises(ValueError, match="status must be one of pass, fail, error, todo, got 'ok'"):
        Row("softmax", "ok")


# ---------------------------------------------------- against the real exercises (npformer.learn.exercises)

def test_the_stubs_as_written_give_todo_for_every_exercise(tmp_path):
    from npformer.learn.exercises import EXERCISES
    from npformer.learn.workbook import init
    init(tmp_path)
    report = runner.grade_file(tmp_path / "transformer.py")
    assert [(r.name, r.status, r.message) for r in report.rows] == [(n, "todo", "") for n in EXERCISES]
    assert len(report.rows) == 12 and report.exit_code == 0


def test_npformers_own_functions_pass_every_exercise():
    """This tests the wiring, through a workbook file and the grading child: the expected values come from
    these same ops, so agreement here says nothing about their being right. The hand-written solutions
    (right_solutions.py, graded in test_exercises.py) are the independent check."""
    from npformer.learn.exercises import EXERCISES
    report = runner.grade_file(HERE / "npformer_wrapped.py")
    assert [(r.name, r.status, r.message) for r in report.rows] == [(n, "pass", "") for n in EXERCISES]
