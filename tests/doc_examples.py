"""The examples of README.md and docs/**/*.md, found by reading the Markdown; tests/test_docs_examples.py
runs them. Its docstring states the rules; this module applies them:

- ``find_examples(root)`` -> (examples, problems): every example in document order (README.md, then
  docs/**/*.md sorted by path), and a line per malformed or misplaced skip marker or per command block
  that runs another program without a marker;
- ``parse(text, path)`` does the same for one Markdown text;
- ``rewrite(argv)`` gives the budget a training command runs with here, ``outputs(argv)`` what it
  promises to write, ``reads(example)`` the run directories an example needs from elsewhere;
- ``provide_models(example, where)`` makes the model directories an example names (``MODEL_DIRS``).
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

PYTHON_TAGS = {"python", "py", "python3"}
SHELL_TAGS = {"", "bash", "sh", "shell", "console"}
# programs a command block may start a line with; only npformer runs here, the others need a skip marker
OTHER_PROGRAMS = {"make", "pip", "pip3", "python", "python3", "env", "torchrun", "bash", "sh", "cd", "export"}
MARKER = re.compile(r"<!--\s*examples?\b.*?-->|<!--\s*examples?\b.*$", re.I)     # any, to catch typos
SKIP = re.compile(r"<!-- example: skip \((?P<reason>.*)\) -->")
FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
METAVARIABLE = re.compile(r"[A-Z][A-Z0-9_]*")

# the model directories the docs' examples name as a reader's own, made where an example runs that names one
# name -> (module, function, keywords) writing it: a plain Hugging Face bert directory (tests/hf_dirs.py), a tiny
# random GPT-2 saved by transformers (tests/pretrained/tiny_gpt2.py)
MODEL_DIRS = {"my-bert": ("hf_dirs", "write_plain_bert", {}),
              "my-gpt2": ("tiny_gpt2", "write_gpt2", {"n_positions": 64})}

# the reduced budgets of training commands: a fresh run, a --resume of it, a study's runs
TRAIN_STEPS = 1
RESUME_STEPS = 2
SMALL_EVAL = ("--set", "eval_n=8", "--set", "final_eval_n=8")


@dataclass(frozen=True)
class Example:
    path: str                          # relative to the repository root, e.g. "README.md"
    line: int                          # 1-based: the opening fence, or the code span
    kind: str                          # "commands" or "python"
    source: str                        # the block's text (the span's, for an inline example)
    commands: tuple = ()               # kind "commands": one argv tuple per command, "npformer" first
    skip: str | None = None            # the skip marker's reason
    inline: bool = False               # a code span in prose, not a fenced block

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}" + (f":{self.source.strip()}" if self.inline else "")


# -- reading Markdown ---------------------------------------------------------------------------

def find_examples(root: Path) -> tuple[list[Example], list[str]]:
    """Every example of ``root``/README.md and ``root``/docs/**/*.md, and the problems found on the way.
    An inline example that an example before it already shows (the same command or statement) is left
    out: it would run the same."""
    files = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    examples, problems, seen = [], [], set()
    for f in files:
        found, bad = parse(f.read_text(encoding="utf-8"), f.relative_to(root).as_posix())
        problems += bad
        for ex in found:
            shown = ex.commands if ex.kind == "commands" else (ex.source,)
            if not (ex.inline and set(shown) <= seen):
                examples.append(ex)
            seen.update(shown)
    return examples, problems


def parse(text: str, path: str) -> tuple[list[Example], list[str]]:
    """The examples of one Markdown text, in order, and its problems ("PATH:LINE: what")."""
    lines = text.splitlines()
    examples, problems = [], []
    prose = list(lines)                            # the text outside fences, for the code spans
    pending = None                                 # (line, reason) of a skip marker waiting for its block
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            marker = MARKER.search(lines[i])
            if marker:
                if pending:
                    problems.append(f"{path}:{pending[0]}: skip marker not followed by a fenced block")
                pending = _marker(marker.group(0), lines[i], path, i + 1, problems)
            elif lines[i].strip() and pending:
                problems.append(f"{path}:{pending[0]}: skip marker not followed by a fenced block")
                pending = None
            i += 1
            continue
        start, fence, info = i, m.group("fence"), m.group("info").strip()
        closing = re.compile(rf" {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*")
        i += 1
        while i < len(lines) and not closing.fullmatch(lines[i]):
            i += 1
        body = lines[start + 1:i]
        for j in range(start, min(i + 1, len(lines))):
            prose[j] = ""
        i += 1
        reason = pending[1] if pending else None
        ex = _block(body, info, path, start + 1, reason, problems)
        if ex:
            examples.append(ex)
        elif pending:
            problems.append(f"{path}:{pending[0]}: skip marker before a block that is not an example")
        pending = None
    if pending:
        problems.append(f"{path}:{pending[0]}: skip marker not followed by a fenced block")
    examples += _spans("\n".join(prose), path)
    examples.sort(key=lambda e: e.line)
    return examples, problems


def _marker(comment: str, line: str, path: str, n: int, problems: list):
    m = SKIP.fullmatch(comment)
    if not m or not m.group("reason").strip():
        problems.append(f"{path}:{n}: malformed marker {comment!r}: write <!-- example: skip (reason) -->")
        return None
    if line.strip() != comment:
        problems.append(f"{path}:{n}: a skip marker stands alone on its line")
        return None
    return n, m.group("reason").strip()


def _block(body: list, info: str, path: str, line: int, skip, problems: list) -> Example | None:
    tag = info.split()[0].lower() if info else ""
    source = "\n".join(body) + "\n"
    if tag in PYTHON_TAGS:
        return Example(path, line, "python", source, skip=skip)
    if tag not in SHELL_TAGS:
        return None
    lines = [t for t in _joined(body) if t.strip()]
    programs = {t.split()[0] for t in lines}
    if not lines or not ("npformer" in programs or programs <= OTHER_PROGRAMS or tag):
        return None                                # a diagram, a layout, a format: not an example
    strangers = programs - {"npformer"} - OTHER_PROGRAMS
    if strangers:
        problems.append(f"{path}:{line}: a command block with lines starting {sorted(strangers)}, neither "
                        "npformer nor a program of doc_examples.OTHER_PROGRAMS: write commands only, or a "
                        "diagram with no line starting with npformer")
        return None
    commands = []
    for text in lines:
        try:
            commands.append(tuple(shlex.split(text)))
        except ValueError as e:
            problems.append(f"{path}:{line}: cannot read {text.strip()!r} as a command ({e})")
            return None
    others = sorted(programs - {"npformer"})
    if others and skip is None:
        problems.append(f"{path}:{line}: a command block running {others}: only npformer commands run in the "
                        "test, so mark it <!-- example: skip (reason) -->")
    return Example(path, line, "commands", source, tuple(commands), skip=skip)


def _joined(body: list) -> list:
    """The block's lines with comments dropped and backslash continuations joined (a backslash inside a
    comment continues nothing, as in a shell)."""
    out, acc = [], ""
    for raw in body:
        code = _without_comment(raw).rstrip()
        if code.endswith("\\"):
            acc += code[:-1] + " "
        else:
            out.append(acc + code)
            acc = ""
    if acc:
        out.append(acc)
    return out


def _without_comment(line: str) -> str:
    """The line up to its comment: a # outside quotes, at the start or after a blank."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def _spans(prose: str, path: str) -> list:
    """The inline examples among the code spans of the prose (fences blanked out): a concrete
    ``npformer`` command, or a Python statement that imports npformer."""
    found = []
    for m in re.finditer(r"(?<!`)(`+)(?!`)((?:(?!\n\s*\n).)+?)(?<!`)\1(?!`)", prose, re.S):
        text = " ".join(m.group(2).split())
        line = prose.count("\n", 0, m.start()) + 1
        if text.startswith(("import npformer", "from npformer")):
            found.append(Example(path, line, "python", text + "\n", inline=True))
        elif text.startswith("npformer "):
            words = tuple(shlex.split(text))
            if len(words) >= 3 and not any(_metavariable(w) for w in words):
                found.append(Example(path, line, "commands", text, (words,), inline=True))
    return found


def _metavariable(word: str) -> bool:
    """RUN, FILE, N, KEY=VALUE, --seed=S, [--port 8765]: a usage pattern's placeholder, not a value."""
    if any(c in word for c in "[]|<>"):
        return True
    if word.startswith("-"):
        word = word.partition("=")[2]
    parts = word.split("=")
    return bool(word) and all(METAVARIABLE.fullmatch(part) for part in parts)


# -- what a command does ------------------------------------------------------------------------

def _flag(argv, name):
    """The value of the last ``name VALUE`` (or ``name=VALUE``) in argv, or None."""
    value = None
    for i, w in enumerate(argv):
        if w == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif w.startswith(name + "="):
            value = w.split("=", 1)[1]
    return value


def trains(argv) -> str | None:
    """The run directory a ``npformer train`` command writes (its --out, or runs/TASK), else None."""
    if len(argv) < 3 or argv[1] != "train":
        return None
    return _flag(argv, "--out") or f"runs/{argv[2]}"


def fresh(argv) -> bool:
    """A ``npformer train`` that starts a run (not --resume)."""
    return trains(argv) is not None and "--resume" not in argv


def rewrite(argv) -> tuple:
    """The command as the test runs it: training gets a reduced budget appended (argparse keeps the last
    --steps), every argument as written stays."""
    argv = tuple(argv)
    if trains(argv):
        return argv + ("--steps", str(RESUME_STEPS if "--resume" in argv else TRAIN_STEPS)) + SMALL_EVAL
    if argv[1:2] == ("study",):
        return argv + ("--steps", "1", "--seeds", "1") + SMALL_EVAL
    return argv


def outputs(argv) -> list:
    """The files and folders a command promises to write (relative to where it runs)."""
    out = []
    run = trains(argv)
    if run:
        out += [f"{run}/{name}" for name in ("config.json", "model.safetensors", "metrics.json", "log.csv")]
    for flag in ("--out", "--output", "-o"):
        value = _flag(argv, flag)
        if value and not run:
            out.append(value)
    if argv[1:2] == ("study",) and len(argv) > 2:
        d = _flag(argv, "--out") or "runs/studies"
        out += [f"{d}/{argv[2]}.{ext}" for ext in ("csv", "png", "txt")]
    return out


RUN_PATH = re.compile(r"(?<![\w/.])runs/[\w.-]+")


def reads(example: Example) -> list:
    """The run directories (runs/NAME) an example reads without having written them itself first, in
    the order it first names them: those it names, and the one a ``--resume`` continues."""
    made, need = set(), []
    steps = [(example.source, None)] if example.kind == "python" else [(" ".join(c), c) for c in example.commands]
    for text, argv in steps:
        run = trains(argv) if argv else None
        named = RUN_PATH.findall(text) + ([run] if run and not fresh(argv) else [])
        for d in named:
            if d not in made and d not in need and not (run and fresh(argv) and d == run):
                need.append(d)
        if run:
            made.add(run)
    return need


def provide_models(example: Example, where: Path) -> None:
    """The model directories of ``MODEL_DIRS`` that ``example`` names, made in ``where``."""
    import importlib

    for name, (module, function, keywords) in MODEL_DIRS.items():
        if re.search(rf"(?<![\w/.-]){re.escape(name)}(?![\w-])", example.source):
            getattr(importlib.import_module(module), function)(where / name, **keywords)
