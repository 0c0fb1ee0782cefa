"""``npformer learn init DIR --notebook``: DIR/lesson.ipynb is valid nbformat v4, holds every exercise in the
lesson's order (description, stub, check), follows transformer.py's refusal and --force/.bak rules, and
runs in a real Jupyter kernel: with the reference solutions filled in every check passes, as written every
check is todo, and a mistake fails with its diagnosis. Each check() there forks from the kernel, which is
what proves that grading works inside Jupyter."""
from __future__ import annotations

import json
import re
import sys

import pytest

from npformer.cli import main
from npformer.learn.exercises import EXERCISES
from npformer.lesson import SECTIONS
from oracles import require


def cli(capsys, *argv) -> tuple[int, str, str]:
    rc = main(["learn", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


def read_notebook(path):
    nbformat = require("nbformat")
    nb = nbformat.read(str(path), as_version=4)
    nbformat.validate(nb)                          # raises on anything nbformat v4 does not allow
    return nb


def test_the_notebook_is_valid_and_holds_every_exercise_in_order(tmp_path, capsys):
    rc, out, _ = cli(capsys, "init", tmp_path, "--notebook")
    assert rc == 0 and f"wrote {tmp_path / 'lesson.ipynb'}" in out
    nb = read_notebook(tmp_path / "lesson.ipynb")
    assert (nb.nbformat, nb.nbformat_minor) == (4, 5) and nb.metadata.kernelspec.name == "python3"
    intro, imports, *cells = nb.cells
    assert intro.cell_type == "markdown" and "check(...)" in intro.source
    assert imports.cell_type == "code" and "import numpy as np" in imports.source
    assert "from npformer.learn import check" in imports.source
    assert len(cells) == 3 * len(EXERCISES) == 36
    for n, ex in enumerate(EXERCISES.values(), 1):
        about, stub, check = cells[3 * n - 3: 3 * n]
        assert about.cell_type == "markdown" and about.source.startswith(f"## {n}. `{ex.name}`")
        assert f"section {ex.section}: *{SECTIONS[ex.section]}*" in about.source
        assert ex.signature in about.source and ex.hint in about.source
        assert all(line.strip() in about.source for line in ex.contract.splitlines())
        assert stub.cell_type == "code" and stub.source == ex.stub.strip("\n") and stub.outputs == []
        assert check.cell_type == "code" and check.source == f'check("{ex.name}", {ex.name})'
    assert [ex.spec.beyond for ex in EXERCISES.values()].count(True) == 2
    assert sum("Beyond the lesson" in c.source for c in cells[::3]) == 2
    readme = (tmp_path / "README.md").read_text()
    assert "`lesson.ipynb` holds the same exercises" in readme
    # the notebook's stubs are the workbook's: the same functions, in the same order
    workbook = (tmp_path / "transformer.py").read_text()
    assert all(c.source in workbook for c in cells[1::3])


def test_lesson_ipynb_is_refused_and_force_keeps_a_bak(tmp_path, capsys):
    mine = tmp_path / "lesson.ipynb"
    mine.write_text('{"my": "work"}\n')
    rc, out, err = cli(capsys, "init", tmp_path, "--notebook")
    assert rc == 2 and out == "" and err == (f"npformer learn: error: {mine} already exists; --force overwrites it "
                                             "after keeping a .bak copy\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lesson.ipynb"]    # refused before writing anything
    assert cli(capsys, "init", tmp_path)[0] == 0                             # no --notebook: not its business
    assert mine.read_text() == '{"my": "work"}\n' and not (tmp_path / "lesson.ipynb.bak").exists()
    rc, out, _ = cli(capsys, "init", tmp_path, "--notebook")                 # transformer.py exists now
    assert rc == 2 and mine.read_text() == '{"my": "work"}\n'
    rc, out, _ = cli(capsys, "init", tmp_path, "--notebook", "--force")
    assert rc == 0 and f"wrote {tmp_path / 'lesson.ipynb.bak'}" in out
    assert (tmp_path / "lesson.ipynb.bak").read_text() == '{"my": "work"}\n'
    read_notebook(mine)
    mine.write_text(mine.read_text().replace("raise NotImplementedError(\\\"softmax\\\")", "return x"))
    assert cli(capsys, "init", tmp_path, "--notebook", "--force")[0] == 0    # the first .bak is kept too
    assert (tmp_path / "lesson.ipynb.bak").read_text() == '{"my": "work"}\n'
    assert "return x" in (tmp_path / "lesson.ipynb.1.bak").read_text()
    assert "return x" not in mine.read_text()


# -- executed in a real kernel ------------------------------------------------------------------------------

@pytest.fixture
def kernel_env(tmp_path, monkeypatch):
    """A "python3" kernel that runs this interpreter (the venv's), found before any other of that name,
    with Jupyter's and IPython's files kept in tmp_path."""
    require("nbclient")
    require("ipykernel")
    spec = tmp_path / "jupyter" / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    return tmp_path


def execute(nb, where):
    from nbclient import NotebookClient
    NotebookClient(nb, kernel_name="python3", timeout=60, resources={"metadata": {"path": str(where)}}).execute()
    return nb


def check_results(nb) -> dict[str, tuple[str, str]]:
    """{exercise: (status, the row's message)} read from each check cell's report, text and HTML."""
    results = {}
    for cell in nb.cells:
        found = re.fullmatch(r'check\("(\w+)", \w+\)', cell.source)
        if not found:
            continue
        (output,) = [o for o in cell.outputs if o.output_type == "execute_result"]
        text, page = output.data["text/plain"], output.data["text/html"]
        lines = text.splitlines()
        name, status = lines[2].split()
        assert lines[0].split() == ["exercise", "status"] and name == found[1], text
        # the summary is the last line: no note saying it was graded in the kernel, so it was graded in a fork
        assert re.fullmatch(r"\d pass, \d fail, \d error, \d todo", lines[-1]), text
        assert f'<td><code>{name}</code></td><td style="color:' in page and f">{status}</td>" in page
        results[name] = (status, "\n".join(line.strip() for line in lines[3:-1]))
    return results


def test_the_notebook_passes_with_the_solutions_and_is_todo_as_written(kernel_env, capsys):
    assert cli(capsys, "init", kernel_env / "work", "--notebook")[0] == 0
    nb = read_notebook(kernel_env / "work" / "lesson.ipynb")
    stubs = execute(read_notebook(kernel_env / "work" / "lesson.ipynb"), kernel_env)
    assert check_results(stubs) == {name: ("todo", "") for name in EXERCISES}
    for cell in nb.cells:
        if cell.get("id", "").startswith("exercise-"):
            cell.source = EXERCISES[cell.id.removeprefix("exercise-")].solution
    assert check_results(execute(nb, kernel_env)) == {name: ("pass", "") for name in EXERCISES}


def test_a_mistake_in_the_notebook_fails_with_its_diagnosis(kernel_env, capsys):
    assert cli(capsys, "init", kernel_env / "work", "--notebook")[0] == 0
    nb = read_notebook(kernel_env / "work" / "lesson.ipynb")
    unscaled = EXERCISES["attention"].solution.replace(") * scale", ")")
    assert unscaled != EXERCISES["attention"].solution
    written = ["softmax", "attention", "split_heads", "merge_heads", "multi_head_attention"]
    for cell in nb.cells:
        name = cell.get("id", "").removeprefix("exercise-")
        if cell.get("id", "").startswith("exercise-") and name in written:
            cell.source = unscaled if name == "attention" else EXERCISES[name].solution
    results = check_results(execute(nb, kernel_env))
    assert {name: status for name, (status, _) in results.items()} == {
        **{name: "todo" for name in EXERCISES}, "softmax": "pass", "attention": "fail", "split_heads": "pass",
        "merge_heads": "pass", "multi_head_attention": "fail"}
    attention, mha = results["attention"][1].splitlines(), results["multi_head_attention"][1].splitlines()
    assert len(attention) == 3 and attention[2] == (
        f"The scores are not scaled: divide q k^T by sqrt(d), d = q.shape[-1] (lesson section 2: {SECTIONS[2]})")
    # the notebook's own attention is found next to its multi_head_attention, and named
    assert len(mha) == 3 and mha[2] == (
        "This matches a correct multi-head attention built on your attention, which fails its own check: "
        f"fix attention first (lesson section 1: {SECTIONS[1]})")
