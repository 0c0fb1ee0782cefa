"""npformer train's progress in a log (stderr a file or a pipe): one plain line per tenth of the steps,
the held-out evaluations on lines of their own, no carriage returns; a terminal still gets the bar."""
import io
import re
import subprocess
import sys

from train_helpers import TINY_SETS, cli

STEPS = ["--steps", 40, "--set", "eval_every=10", "--no-plot"]


def progress_steps(err: str) -> list[int]:
    """The step counts of the progress lines in ``err``."""
    return [int(m.group(1)) for m in re.finditer(r"^train copy: (\d+)/40 steps \(\d+%\) in ", err, flags=re.M)]


def test_a_log_gets_ten_lines_and_one_per_evaluation(tmp_path, capsys):
    """stderr is pytest's capture here, not a terminal, as in ``make demo > log 2>&1``."""
    rc, out, err = cli(capsys, "train", "copy", "--out", tmp_path / "run", *STEPS, *TINY_SETS)
    assert rc == 0 and "\r" not in out + err
    assert progress_steps(err) == list(range(4, 41, 4)), err
    assert len(err.splitlines()) == 10, err                             # nothing else on stderr
    assert re.findall(r"^step (\d+): held-out ", out, flags=re.M) == ["10", "20", "30", "40"], out


def test_no_progress_writes_no_progress_lines(tmp_path, capsys):
    rc, out, err = cli(capsys, "train", "copy", "--out", tmp_path / "run", *STEPS, "--no-progress", *TINY_SETS)
    assert rc == 0 and err == "" and len(re.findall(r"^step \d+: held-out ", out, flags=re.M)) == 4


def test_a_terminal_still_gets_the_bar(tmp_path, capsys, monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True
    term = Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    rc, _, _ = cli(capsys, "train", "copy", "--out", tmp_path / "run", *STEPS, *TINY_SETS)
    bar = term.getvalue()
    assert rc == 0 and "\r" in bar and "train copy:" in bar and "40/40" in bar and "step/s" in bar
    assert progress_steps(bar) == []                                     # the bar, not the log's lines


def test_a_real_file_as_stderr(tmp_path):
    """The command as a shell runs it with ``2> log``: the process's own stderr is a file."""
    log = tmp_path / "log"
    argv = [sys.executable, "-m", "npformer", "train", "copy", "--out", str(tmp_path / "run"),
            *map(str, STEPS), *TINY_SETS]
    with open(log, "w") as f:
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=f, text=True, timeout=120)
    err = log.read_text()
    assert done.returncode == 0 and "\r" not in err and progress_steps(err) == list(range(4, 41, 4)), err


def test_label_smoothing_is_explained_once_at_the_first_evaluation(tmp_path, capsys):
    """The training loss includes the smoothing, the held-out loss does not: said once, under the first
    held-out line, and not at all without smoothing."""
    note = "the training loss includes label smoothing 0.1 and the held-out loss does not"
    rc, out, _ = cli(capsys, "train", "copy", "--out", tmp_path / "a", *STEPS, "--no-progress", *TINY_SETS,
                     "--set", "label_smoothing=0.1")
    lines = out.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("step 10: held-out "))
    assert rc == 0 and out.count(note) == 1 and note in lines[first + 1], out
    rc, out, _ = cli(capsys, "train", "copy", "--out", tmp_path / "b", *STEPS, "--no-progress", *TINY_SETS,
                     "--set", "label_smoothing=0")
    assert rc == 0 and "label smoothing" not in out, out
