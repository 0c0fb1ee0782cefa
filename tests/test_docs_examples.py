"""Every example in README.md and docs/**/*.md runs: each is found by reading the Markdown
(tests/doc_examples.py), so a new example anywhere is run without editing this file.

What is an example:
- a fenced block tagged ``python`` (or ``py``, ``python3``): run as one script (``exec``);
- a fenced block, untagged or tagged bash/sh/shell/console, whose non-blank lines are commands: a line
  starting with ``npformer``, or the whole block made of lines starting with make, pip, python, env,
  torchrun, ... (doc_examples.OTHER_PROGRAMS). Text after an unquoted ``#`` is a comment, a trailing
  backslash continues the line. The lines run in order, in one directory. Other untagged blocks
  (diagrams, layouts, formats) are not examples, and a block mixing ``npformer`` lines with other text
  is an error;
- in prose, a code span that is a concrete ``npformer`` command: a subcommand and at least one argument,
  no placeholder (a word in capitals alone, such as RUN, FILE, N, KEY=VALUE, or a bracketed ``[--port
  8765]``). A file name like ``FILE.txt`` is taken literally: the test writes it. A bare
  ``npformer explore`` names a command and is not run. A code span that imports npformer (``import
  npformer``, ``from npformer.explore import show; ...``) is a Python example. A span showing what an
  example before it already shows (a block's line, an earlier span) is not run again.

A block that cannot run here carries ``<!-- example: skip (reason) -->`` on the line before it (blank
lines between are allowed); the reason is required, the marker skips only that block, and a malformed
marker, one not followed by a fenced block or one before a block that is no example fails
``test_markers_and_blocks_are_well_formed``, as does a command block running another program than
npformer without a marker (only npformer commands run here).

How they run: each example in a directory of its own, which stands for the repository's root: it holds
``src`` (a link to the checkout's, for the paraphrase files), the files the README names without making
them (sentences.txt, FILE.txt: a text corpus), and a copy of every run directory (runs/NAME) the example
reads without training it. Commands run in-process through ``npformer.cli.main`` and must exit 0; the
files they promise (a run's config.json, model.safetensors, metrics.json and log.csv, each --out or
--output, a study's NAME.csv/png/txt, explore's printed page) must exist, and ``npformer eval`` must
print JSON.

The budget: a ``npformer train`` example runs as written plus ``--steps 1`` (``--steps 2`` with
--resume; argparse keeps the last --steps) and ``--set eval_n=8 --set final_eval_n=8``; a ``npformer
study`` gets ``--steps 1 --seeds 1`` and the same evaluation. A block's commands run in order, as a
reader would type them: one that trains into a run directory the block already made gets npformer's own
answer (a refusal, unless it says --resume or --force). The run directories other examples read are
trained by the first command of the docs that trains each (``npformer train dates`` makes runs/dates);
a training command is run once per module with the same arguments and its run copied where it runs
again. ``npformer explore ... --serve`` runs on an ephemeral port (``--port 0`` appended): the test
fetches the page once and stops the server as Ctrl-C does. ``--engine torch --nproc 2`` starts real
workers. An example naming MiniLM (embed and similar included) asks for the weights, one naming torch
for torch: a missing one skips, and fails under CI (tests/oracles.py).
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import socketserver
import threading
import urllib.request
from pathlib import Path

import pytest

import doc_examples as docs
from doc_examples import Example, find_examples, fresh, outputs, parse, reads, rewrite, trains
from npformer.cli import main
from oracles import minilm_dir, require

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES, PROBLEMS = find_examples(ROOT)

# the files the examples name and do not make
CORPUS = ("The robot looks at the table, reads the instruction and picks up the red block. It carries the block "
          "over the bowl and puts it in the box instead... Then it tries again, slowly, and gets it right. ")
FILES = {
    "sentences.txt": "put the red block in the box\nplace the red cube into the box\na robot picks up a block\n"
                     "the weather is nice today\nA man plays a guitar.\n",
    "FILE.txt": CORPUS * 12,
}


class Runs:
    """The run directories the examples read, each trained by the first command of the docs that trains
    it, and every training command's result, so that the same command runs once per module."""

    def __init__(self, base: Path, examples: list[Example]):
        self.base, self.made, self.n = base, {}, 0
        self.providers = {}                                    # runs/NAME -> the first command training it
        for ex in examples:
            for argv in ex.commands if not ex.skip else ():
                if fresh(argv):
                    self.providers.setdefault(trains(argv), argv)

    def directory(self, name: str) -> Path:
        """A new directory standing for the repository's root."""
        self.n += 1
        d = self.base / f"{self.n:02d}-{name}"
        d.mkdir()
        (d / "src").symlink_to(ROOT / "src", target_is_directory=True)
        for f, text in FILES.items():
            (d / f).write_text(text, encoding="utf-8")
        return d

    def provide(self, run: str, where: Path) -> None:
        assert run in self.providers, f"an example reads {run}, which no example of the docs trains"
        argv = rewrite(self.providers[run])
        if argv not in self.made:
            with _inside(self.directory("build")):
                rc, out, err = self.train(argv)
            assert rc == 0, f"{' '.join(argv)} (training {run}) exited {rc}:\n{out[-2000:]}\n{err[-2000:]}"
        shutil.copytree(self.made[argv][0], where / run)

    def train(self, argv: tuple) -> tuple:
        """Run a training command in the current directory; or, when it starts a new run that it made
        before, copy that run and give its exit code and output again."""
        run = Path(trains(argv))
        if run.exists():                       # the block made it already: npformer answers, as for a reader
            return invoke(argv)
        if argv in self.made:
            shutil.copytree(self.made[argv][0], run)
            return self.made[argv][1:]
        rc, out, err = invoke(argv)
        if rc == 0:
            self.made[argv] = (self.base / f"train-{len(self.made)}" / run, rc, out, err)
            shutil.copytree(run, self.made[argv][0])
        return rc, out, err


@contextlib.contextmanager
def _inside(d: Path):
    """Work in ``d`` for a while (contextlib.chdir is Python 3.11's)."""
    cwd = os.getcwd()
    os.chdir(d)
    try:
        yield
    finally:
        os.chdir(cwd)


def invoke(argv: tuple) -> tuple:
    """``npformer ARGS`` in-process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv[1:]))
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return Runs(tmp_path_factory.mktemp("docs_examples"), EXAMPLES)


def test_markers_and_blocks_are_well_formed():
    assert not PROBLEMS, "\n".join(PROBLEMS)
    assert {e.kind for e in EXAMPLES} == {"python", "commands"} and any(e.inline for e in EXAMPLES)


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.id for e in EXAMPLES])
def test_example_runs(example: Example, runs: Runs, monkeypatch):
    if example.skip:
        pytest.skip(f"marked in {example.path}: {example.skip}")
    text = example.source.lower()
    if "minilm" in text or "sentenceencoder" in text or any(c[1:2] in (("embed",), ("similar",))
                                                             for c in example.commands):
        minilm_dir()
    if "torch" in text:
        require("torch")
    where = runs.directory(example.id.split(":")[0].replace("/", "_") + f"-{example.line}")
    for run in reads(example):
        runs.provide(run, where)
    docs.provide_models(example, where)
    monkeypatch.chdir(where)
    if example.kind == "python":
        exec(compile(example.source, example.id, "exec"), {"__name__": "__docs_example__"})
        return
    for argv in example.commands:
        run_command(argv, runs, monkeypatch)


def run_command(argv: tuple, runs: Runs, monkeypatch) -> None:
    shown = " ".join(argv)
    assert argv[0] == "npformer", f"{shown}: only npformer commands run here"
    argv = rewrite(argv)
    served = []
    if "--serve" in argv:
        argv += ("--port", "0")
        monkeypatch.setattr("npformer.explore.serve.ExploreServer.serve_forever", _fetch_once(served))
    rc, out, err = runs.train(argv) if fresh(argv) else invoke(argv)
    assert rc == 0, f"{shown} (run as {' '.join(argv)}) exited {rc}:\n{out[-3000:]}\n{err[-3000:]}"
    missing = [p for p in outputs(argv) if not Path(p).exists()]
    assert not missing, f"{shown} did not write {missing}"
    if argv[1] == "eval":
        json.loads(out)
    if argv[1] == "explore" and "--serve" not in argv:
        page = Path(out.strip().splitlines()[-1])
        assert page.suffix == ".html" and page.is_file(), (shown, out)
    if "--serve" in argv:
        assert served and served[0][0] == 200 and b"<html" in served[0][1].lower(), (shown, served)


def _fetch_once(served: list):
    """A serve_forever that serves in a thread, fetches the page once, stops and ends as Ctrl-C does."""
    def serve_forever(server, poll_interval=0.05):
        t = threading.Thread(target=socketserver.BaseServer.serve_forever, args=(server, poll_interval))
        t.start()
        try:
            with urllib.request.urlopen(server.url, timeout=60) as r:
                served.append((r.status, r.read()))
        finally:
            server.shutdown()
            t.join()
        raise KeyboardInterrupt
    return serve_forever


# -- the rules, on made-up Markdown ------------------------------------------------------------------

def _parse(md: str):
    return parse(md, "X.md")


def test_blocks_spans_and_what_is_not_an_example():
    md = ("text `npformer train copy` and `npformer eval RUN --n N`, `npformer explore`, `npformer act x --seed=S`,\n"
          "`npformer explore runs/dates --serve [--port 8765]`, `import npformer`\n\n"
          "```\nnpformer train dates   # a comment \\\n"
          "npformer translate runs/dates \"29 November 2026\" --beam 1 \\\n  --alpha 0.6\n\n# note\n```\n\n"
          "```python\nprint(1)\n```\n\n"
          "```\nsrc/npformer/\n  ops/   op pairs, npformer's own\n```\n\n"
          "```json\n{\"a\": 1}\n```\n")
    ex, problems = _parse(md)
    assert problems == []
    assert [(e.line, e.kind, e.inline) for e in ex] == [(1, "commands", True), (2, "python", True),
                                                      (4, "commands", False), (12, "python", False)]
    assert ex[0].commands == (("npformer", "train", "copy"),)
    assert ex[2].commands == (("npformer", "train", "dates"),
                              ("npformer", "translate", "runs/dates", "29 November 2026", "--beam", "1",
                               "--alpha", "0.6"))


def test_a_marker_skips_the_next_block_only_and_needs_a_reason():
    ex, problems = _parse("<!-- example: skip (needs a GPU) -->\n\n```\nnpformer lesson\n```\n\n"
                          "```\nnpformer info\n```\n")
    assert problems == [] and [e.skip for e in ex] == ["needs a GPU", None]
    for bad in ("<!-- example: skip () -->", "<!-- example: skip -->", "<!-- example: skipp (x) -->",
                "<!-- example skip (x) -->"):
        ex, problems = _parse(f"{bad}\n```\nnpformer lesson\n```\n")
        assert len(problems) == 1 and "malformed marker" in problems[0] and ex[0].skip is None, (bad, problems)


@pytest.mark.parametrize("md,problem", [
    ("<!-- example: skip (x) -->\nsome prose\n\n```\nnpformer lesson\n```\n", "not followed by a fenced block"),
    ("<!-- example: skip (x) -->\n", "not followed by a fenced block"),
    ("<!-- example: skip (x) -->\n<!-- example: skip (y) -->\n```\nnpformer lesson\n```\n",
     "not followed by a fenced block"),
    ("<!-- example: skip (x) -->\n```\nsrc/\n  ops/\n```\n", "block that is not an example"),
    ("```\nmake demo\n```\n", "mark it"),
    ("```\nnpformer lesson\n  then read the output\n```\n", "neither npformer nor"),
    ("<!-- Example: skip (x) -->\n```\nnpformer lesson\n```\n", "malformed marker"),
    ("<!-- example: run -->\n```\nnpformer lesson\n```\n", "malformed marker"),
])
def test_misplaced_markers_and_unmarked_other_programs_are_problems(md, problem):
    _, problems = _parse(md)
    assert len(problems) == 1 and problem in problems[0], problems


def test_budgets_outputs_and_the_runs_an_example_reads():
    resumed = rewrite(("npformer", "train", "dates", "--resume", "--steps", "3000"))
    assert resumed[:6] == ("npformer", "train", "dates", "--resume", "--steps", "3000")
    assert resumed[6:8] == ("--steps", str(docs.RESUME_STEPS)) and resumed[8:] == docs.SMALL_EVAL
    assert rewrite(("npformer", "train", "copy"))[3:5] == ("--steps", str(docs.TRAIN_STEPS))
    assert rewrite(("npformer", "eval", "runs/dates")) == ("npformer", "eval", "runs/dates")
    assert "runs/x/model.safetensors" in outputs(("npformer", "train", "copy", "--out", "runs/x"))
    assert outputs(("npformer", "attention", "runs/d", "t", "--out", "a.png")) == ["a.png"]
    ex, _ = _parse("```\nnpformer train dates --out runs/a\nnpformer eval runs/a\nnpformer eval runs/b\n"
                   "npformer train copy --resume\n```\n")
    assert reads(ex[0]) == ["runs/b", "runs/copy"]
    assert os.path.basename(trains(("npformer", "train", "text", "--data", "f.txt"))) == "text"


def test_every_markdown_page_under_docs_is_read(tmp_path):
    (tmp_path / "docs" / "guide").mkdir(parents=True)
    (tmp_path / "README.md").write_text("```\nnpformer lesson\n```\n\nThen `npformer lesson --section 2`.\n")
    (tmp_path / "docs" / "guide" / "page.md").write_text("`npformer lesson --section 2` again, and\n\n"
                                                        "```python\nimport npformer\n```\n")
    ex, problems = find_examples(tmp_path)
    assert problems == []
    assert [e.id for e in ex] == ["README.md:1", "README.md:5:npformer lesson --section 2", "docs/guide/page.md:3"]
