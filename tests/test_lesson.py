"""`npformer lesson` prints the lesson's output lines digit for digit, then the one-step-further
results, and `--section N` runs one section."""
import itertools
import re
from pathlib import Path

import pytest

from npformer.cli import main
from npformer.lesson import SECTIONS

# the lesson's printed output, line by line (np.round(w, 2) prints as a three-line matrix)
LESSON_LINES = [
    "attention weights (rows = who is looking, columns = who is looked at):",
    "[[0.51 0.31 0.19]",
    " [0.31 0.51 0.19]",
    " [0.27 0.27 0.45]]",
    "each row sums to: [1.0, 1.0, 1.0]",
    "output shape: (3, 4)",
    "d = 4 | biggest weight without scaling: 0.43 | with scaling: 0.31",
    "d = 64 | biggest weight without scaling: 1.0 | with scaling: 0.51",
    "d = 1024 | biggest weight without scaling: 1.0 | with scaling: 0.41",
    "one slice per head: (8, 6, 64)",
    "merged back: (6, 512) | identical to the input: True",
    "block output shape (same as input): (6, 512)",
    "shuffling the tokens just shuffles the outputs: True",
]
SECTION_OF = [1] * 6 + [2] * 3 + [3] * 3 + [4]


@pytest.fixture(scope="module")
def full_output():
    import contextlib
    import io
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["lesson"]) == 0
    return buf.getvalue()


def test_lesson_lines_appear_exactly_and_in_order(full_output):
    lines = full_output.splitlines()
    pos = -1
    for want in LESSON_LINES:
        assert want in lines, f"missing line: {want!r}"
        i = lines.index(want, pos + 1)
        assert i > pos, f"out of order: {want!r}"
        pos = i
    # the weights as the lesson's page shows them, on one line
    flat = " ".join(" ".join(lines[lines.index(LESSON_LINES[1]) + j].split()) for j in range(3))
    assert flat == "[[0.51 0.31 0.19] [0.31 0.51 0.19] [0.27 0.27 0.45]]"


def test_one_step_further_results(full_output):
    out = full_output
    # causal: rows sum to 1 and the future gets exactly 0
    assert "each row still sums to: [1.0, 1.0, 1.0]" in out
    assert re.search(r"entries above the diagonal\): largest 0\.0, all exactly 0: True", out)
    # 1,000 draws per d: unscaled climbs toward 1, scaled stays put
    rows = re.findall(r"^\s+(\d+) \|\s+([\d.]+) \|\s+([\d.]+)$", out, flags=re.M)
    assert [int(r[0]) for r in rows] == [4, 16, 64, 256, 1024]
    unscaled, scaled = [float(r[1]) for r in rows], [float(r[2]) for r in rows]
    assert all(a < b for a, b in itertools.pairwise(unscaled)) and unscaled[-1] > 0.95
    assert max(scaled) - min(scaled) < 0.05 and max(scaled) < 0.5
    # layer norm: mean 0, variance 1 per token at large enough scales; the eps note is there
    assert "eps outside the square root" in out and "sqrt(var + eps)" in out
    ln = re.findall(r"^\s+([\d.e+-]+) \|\s+([\d.e+-]+) \| ([\d.]+) to ([\d.]+)", out, flags=re.M)
    by_scale = {float(s): (float(m), float(lo), float(hi)) for s, m, lo, hi in ln}
    assert set(by_scale) == {1000.0, 10.0, 1.0, 0.1, 0.01, 0.001}
    for s, (m, lo, hi) in by_scale.items():
        assert m < 1e-12
        if s >= 1:
            assert 1 - 1e-4 < lo <= hi < 1 + 1e-9
    assert by_scale[0.001][2] < 0.5                                   # eps takes over for tiny variance
    # positions break the permutation symmetry
    assert "with positions, shuffling the tokens just shuffles the outputs: False" in out


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_one_section(capsys, n):
    assert main(["lesson", "--section", str(n)]) == 0
    out = capsys.readouterr().out
    headers = re.findall(r"^(\d)\. ", out, flags=re.M)
    assert headers == [str(n)]
    for line, sec in zip(LESSON_LINES, SECTION_OF, strict=True):
        assert (line in out.splitlines()) == (sec == n)


@pytest.mark.parametrize("arg", ["0", "5", "-1"])
def test_bad_section_is_one_line_and_exit_2(capsys, arg):
    assert main(["lesson", "--section", arg]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--section must be 1, 2, 3 or 4" in err


def test_non_integer_section_exits_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["lesson", "--section", "two"])
    assert e.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1


def _without_noise(text: str) -> str:
    """``text`` with rounding noise (a number printed as 1.2e-16, or 0.0e+00) written ~0: its digits depend
    on the BLAS kernel; every other character must match."""
    return re.sub(r"\b\d\.\de([-+]\d\d)\b",
                  lambda m: "~0" if m.group(0).startswith("0.0e") or int(m.group(1)) <= -10 else m.group(0), text)


def test_the_docs_page_shows_each_sections_output(capsys):
    """docs/lesson.md holds, under each section's heading, the block `npformer lesson --section N` prints."""
    page = (Path(__file__).parents[1] / "docs" / "lesson.md").read_text()
    for n, title in SECTIONS.items():
        after = page.split(f"### Section {n}: {title}\n", 1)[1]
        block = after.split("```text\n", 1)[1].split("\n```\n", 1)[0]
        assert main(["lesson", "--section", str(n)]) == 0
        printed = capsys.readouterr().out.rstrip("\n")
        assert _without_noise(block) == _without_noise(printed), f"section {n}: regenerate docs/lesson.md"
