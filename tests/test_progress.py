"""Progress draws a bar only where it can redraw in place (a terminal); in a file or a pipe it writes one
plain line per tenth of the work. The helper (``npformer.progress``) and a study through the command line."""
import io
import re
import types

import npformer.progress as progress_module
from npformer.cli import main
from npformer.progress import draws_bar, progress_display


class Terminal(io.StringIO):
    """A stream that says it is a terminal, as stderr does in an interactive shell."""

    def isatty(self) -> bool:
        return True


class NoIsatty:
    def write(self, text: str) -> int:
        return len(text)


class KernelStream(io.StringIO):
    """What a Jupyter kernel puts in sys.stderr: isatty() is False, but its output does redraw a bar."""


KernelStream.__module__ = "ipykernel.iostream"


def test_only_a_terminal_or_a_kernel_draws_a_bar(tmp_path):
    closed = io.StringIO()
    closed.close()
    with open(tmp_path / "log", "w") as f:
        assert not draws_bar(f)                                  # make demo > log 2>&1
    assert not draws_bar(io.StringIO()) and not draws_bar(closed) and not draws_bar(NoIsatty())
    assert draws_bar(Terminal()) and draws_bar(KernelStream())


def test_a_terminal_gets_the_bar_redrawn_in_place():
    term = Terminal()
    with progress_display(200, "train copy", "step", file=term) as bar:
        for _ in range(200):
            bar.update(1)
    text = term.getvalue()
    assert "\r" in text and "train copy" in text and "200/200" in text and "|" in text


def test_a_log_gets_one_line_per_tenth():
    log = io.StringIO()
    bar = progress_display(1000, "train dates", "step", file=log)
    for i in range(1000):
        bar.set_postfix_str(f"loss {i}")
        bar.update(1)
    bar.close()
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue() and len(lines) == 10
    for k, line in enumerate(lines, start=1):                    # 100 steps, then the 10% that they are
        assert re.fullmatch(rf"train dates: {100 * k:,}/1,000 steps \({10 * k}%\) in \d+\.\d s; loss {100 * k - 1}",
                            line), line


def test_a_resumed_run_counts_from_where_it_was_and_says_where_it_stopped():
    log = io.StringIO()
    bar = progress_display(1000, "train dates", "step", initial=450, file=log)
    bar.update(50)                                               # 500: the first tenth passed since 450
    bar.update(240)                                              # 740: 0.6 and 0.7 pass at once, one line
    bar.update(1)                                                # 741: within the tenth, no line
    bar.close()                                                  # stopped early (minutes, Ctrl-C): where
    bar.close()
    counts = [int(re.match(r"train dates: (\d+)/", ln).group(1)) for ln in log.getvalue().splitlines()]
    assert counts == [500, 740, 741]


def test_a_larger_step_than_a_tenth_and_a_tiny_total():
    log = io.StringIO()
    with progress_display(3, "study heads", "step", file=log) as bar:    # 3 units: every update passes a tenth
        bar.update(2)
        bar.update(1)
    assert [ln.split(" in ")[0] for ln in log.getvalue().splitlines()] == [
        "study heads: 2/3 steps (67%)", "study heads: 3/3 steps (100%)"]


def test_an_unknown_total_writes_a_line_a_minute(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(progress_module, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    log = io.StringIO()
    bar = progress_display(None, "train dates", "step", file=log)
    for _ in range(10):                                          # 10 updates, 25 s apart: 250 s in all
        clock[0] += 25.0
        bar.update(1)
    bar.close()
    assert log.getvalue().splitlines() == [                      # at 75 s, 150 s, 225 s; then the end
        "train dates: 3 steps in 1 min 15 s", "train dates: 6 steps in 2 min 30 s",
        "train dates: 9 steps in 3 min 45 s", "train dates: 10 steps in 4 min 10 s"]


def test_disabled_shows_nothing_and_written_lines_go_to_stdout(capsys):
    log = io.StringIO()
    bar = progress_display(10, "train copy", "step", file=log, enabled=False)
    bar.update(10)
    bar.write("step 10: held-out loss 1.0")
    bar.close()
    assert log.getvalue() == "" and capsys.readouterr().out == "step 10: held-out loss 1.0\n"


# -- a study through the command line, its stderr not a terminal (pytest captures it) ---------------------

TINY_SET = ["--set", "data.first_year=2000", "--set", "data.last_year=2003", "--set", "final_eval_n=40",
            "--set", "batch_size=16", "--set", "d_ff=32"]


def test_a_study_logs_a_line_per_run_not_a_bar(tmp_path, capsys):
    """``heads`` trains 5 settings x 1 seed of 2 steps: 10 steps, each run a fifth of them."""
    code = main(["study", "heads", "--seeds", "1", "--steps", "2", "--out", str(tmp_path), *TINY_SET])
    out, err = capsys.readouterr()
    assert code == 0 and "\r" not in out + err
    lines = [ln for ln in err.splitlines() if ln.startswith("study heads:")]
    assert [ln.split(" in ")[0] for ln in lines] == [f"study heads: {k}/10 steps ({10 * k}%)" for k in (2, 4, 6, 8, 10)]
    assert all(re.search(r"; \d+ heads?, seed 0$", ln) for ln in lines), err     # the setting it was on
