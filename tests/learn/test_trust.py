"""The verdict comes from code the learner's code cannot reach: four workbooks that scored 12 of 12 without
one right function (cheats.py) now fail each with a plain message, a forged record is refused, the child's
data is plain (JSON and raw array bytes, never a pickle), and an exception comes back as data: its type,
message and the learner's frames with their lines and array arguments."""
from __future__ import annotations

import pickle
import sys

import cheats
import learn_standin
import numpy as np
import pytest
from learn_standin import SOLUTIONS

from npformer.learn import runner, wire
from npformer.learn.exercises import EXERCISES
from npformer.learn.trial import LocalTrials


@pytest.mark.parametrize("trick", sorted(cheats.TRICKS))
def test_a_cheating_workbook_passes_nothing(trick, tmp_path):
    allclose = np.allclose
    path = tmp_path / "transformer.py"
    path.write_text(cheats.workbook(trick))
    report = runner.grade_file(path, timeout=20)
    assert len(report.rows) == 12 and report.counts()["pass"] == 0, report
    assert np.allclose is allclose and "transformer" not in sys.modules      # the parent never ran it
    messages = {r.name: r.message for r in report.rows}
    if trick == "pipe":             # its own messages are refused, and it said nothing else
        assert {r.status for r in report.rows} == {"error"}
        assert messages["softmax"].startswith("the workbook interfered with the grading while importing "
                                              "transformer.py: the grader received ")
    elif trick == "subclass":
        assert {r.status for r in report.rows} == {"fail"}
        assert ("y is of type Agreeable, a subclass of np.ndarray, expected a plain NumPy array"
                in messages["softmax"])
    else:                           # the grader's own function and NumPy's are untouched in the parent
        assert {r.status for r in report.rows} == {"fail"}
        assert "y[1, 1, 2] is 0 but expected 0.594204" in messages["softmax"]
        assert "mask[0, 0] is False but expected True" in messages["causal_mask"]


FORGER = '''

def softmax(x):
    import gc
    from multiprocessing.connection import Connection

    from npformer.learn import wire
    for conn in [o for o in gc.get_objects() if isinstance(o, Connection)]:
        try:
            conn.send_bytes(wire.encode({"kind": "end", "nonce": "a guess", "output": ""}))
        except OSError:
            pass
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)
'''


def test_a_forged_record_is_that_exercises_error_and_a_fresh_child_grades_the_rest(monkeypatch, tmp_path):
    learn_standin.installed(monkeypatch)
    path = tmp_path / "transformer.py"
    path.write_text(SOLUTIONS + FORGER)
    report = runner.grade_file(path, timeout=10)
    assert [(r.name, r.status) for r in report.rows] == [
        ("softmax", "error"), ("split_heads", "pass"), ("merge_heads", "pass"), ("layer_norm", "pass"),
        ("causal_mask", "pass")]
    assert report.rows[0].message == ("the workbook interfered with the grading while grading softmax: the grader "
                                      "received a record that answers no request of the grader, so nothing more "
                                      "from that process counts")


def test_the_wire_carries_plain_data_and_refuses_anything_else():
    record = {"kind": "case", "index": 0, "nonce": "n", "result": {"data": np.arange(6.0).reshape(2, 3)},
              "inputs": [[["x", {"data": np.array([True, False])}]]]}
    back = wire.decode(wire.encode(record))
    assert back["result"]["data"].dtype == np.float64 and back["result"]["data"].flags.writeable
    np.testing.assert_array_equal(back["result"]["data"], record["result"]["data"])
    assert back["inputs"][0][0][1]["data"].tolist() == [True, False]
    good = wire.encode({"kind": "ready"})
    header = b'{"record": {"x": {"$array": 0}}, "arrays": [{"dtype": "object", "shape": [1]}]}'
    objects = wire.MAGIC + len(header).to_bytes(8, "big") + header + b"\0" * 8
    for bad, why in [(pickle.dumps(("pass", "", "")), "not the grader's"),
                     (good + b"\0", "longer than its arrays"),
                     (objects, "an array the grader does not read"),
                     (wire.encode({"kind": "case", "x": np.zeros(4)})[:-8], "shorter than its arrays")]:
        with pytest.raises(wire.Garbled, match=why):
            wire.decode(bad)


def test_an_exception_comes_back_as_data_with_the_learners_frames(tmp_path):
    path = tmp_path / "transformer.py"
    path.write_text("def _scores(q, k):\n    return q @ k\n\n\ndef softmax(x):\n    y = x * 2\n"
                    "    return _scores(y, x[..., :2])\n")
    namespace: dict = {"np": np}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    with pytest.raises(wire.LearnerRaised) as raised:
        list(LocalTrials(EXERCISES, {"softmax": namespace["softmax"]}).run("softmax"))
    error = raised.value.error
    assert error.type == "ValueError" and "matmul" in error.message and not error.todo
    assert [(f.file, f.line, f.function, f.source) for f in error.frames] == [
        (str(path), 7, "softmax", "return _scores(y, x[..., :2])"), (str(path), 2, "_scores", "return q @ k")]
    assert error.frames[0].arguments == {"x": ((2, 3, 5), "float64")}
    assert error.frames[1].arguments == {"q": ((2, 3, 5), "float64"), "k": ((2, 3, 2), "float64")}
    back = wire.parse_error(wire.decode(wire.encode({"e": _as_plain(error)}))["e"])
    assert back == error                                           # the same data after the wire
    assert error.text("softmax raised").splitlines()[1:3] == [
        f'  File "{path}", line 7, in softmax', "    return _scores(y, x[..., :2])"]


def _as_plain(error: wire.LearnerError) -> dict:
    return {"type": error.type, "todo": error.todo, "message": error.message, "omitted": error.omitted,
            "frames": [{"file": f.file, "line": f.line, "function": f.function, "source": f.source,
                        "arguments": {k: [list(s), d] for k, (s, d) in f.arguments.items()}} for f in error.frames]}
