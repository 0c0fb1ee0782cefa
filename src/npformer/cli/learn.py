"""``npformer learn init|check|quiz``: write the lesson's exercises as a workbook, grade it with a diagnosis
of each mistake, and ask the lesson's knowledge check.

Exit status of ``check``: 0 when no exercise fails or errors (todo counts as neither), 1 when one does,
2 for bad usage."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from . import CLIError

HELP = "practise the lesson: write its exercises, have them graded, take its quiz"
DESCRIPTION = __doc__.split("\n\n")[0].replace("``", "")
MAX_TIMEOUT = 3_600                         # seconds: --timeout's largest value


def add_arguments(p) -> None:
    sub = p.add_subparsers(dest="learn_command", metavar="{init,check,quiz}", parser_class=type(p))
    init = sub.add_parser("init", help="write DIR/transformer.py (one stub per exercise) and DIR/README.md",
                          description="Write the workbook: DIR/transformer.py with one stub for each exercise, "
                                      "in the lesson's order, and DIR/README.md; with --notebook also "
                                      "DIR/lesson.ipynb.")
    init.add_argument("dir", metavar="DIR")
    init.add_argument("--force", action="store_true",
                      help="overwrite an existing DIR/transformer.py, README.md (and lesson.ipynb) after keeping "
                           "each as a .bak")
    init.add_argument("--notebook", action="store_true",
                      help="also write DIR/lesson.ipynb: the exercises as Jupyter cells, each followed by a check")
    check = sub.add_parser("check", help="grade the workbook's exercises, every one or those named",
                           description="Grade DIR/transformer.py (or a .py file given as DIR): one row per "
                                       "exercise, pass, fail, error or todo, and under each failure its diagnosis.")
    check.add_argument("dir", metavar="DIR")
    check.add_argument("names", nargs="*", metavar="NAME", help="exercises to grade (default: all)")
    check.add_argument("--json", action="store_true", help="print the report as JSON and nothing else")
    check.add_argument("--timeout", type=float, default=10.0, metavar="S",
                       help=f"time limit per exercise in seconds, at most {MAX_TIMEOUT:,} (default 10)")
    quiz = sub.add_parser("quiz", help="the lesson's knowledge check, and a question on sqrt(d)",
                          description="Ask the lesson's knowledge check in the terminal; each answer is followed "
                                      "by its explanation and a demonstration computed by the library.")
    quiz.add_argument("--no-input", action="store_true", help="print the questions, choices, explanations; ask nothing")


def run(args) -> int:
    if args.learn_command == "init":
        return _init(args)
    if args.learn_command == "check":
        return _check(args)
    if args.learn_command == "quiz":
        from ..learn import quiz
        return quiz.run(no_input=args.no_input)
    raise CLIError("say what to do: init DIR, check DIR [NAME ...] or quiz")


def _init(args) -> int:
    from ..learn.workbook import NOTEBOOK, README, WORKBOOK, init
    written = init(args.dir, force=args.force, notebook=args.notebook)
    for path in written:
        print(f"wrote {path}")
    readme = Path(args.dir) / README
    if readme not in written:
        print(f"kept {readme} as it was (--force replaces it after keeping a .bak)")
    print(f"next: fill in {Path(args.dir) / WORKBOOK}, then run: npformer learn check {args.dir}")
    if args.notebook:
        print(f"or open {Path(args.dir) / NOTEBOOK} in Jupyter and run its check cells")
    return 0


def _check(args) -> int:
    from ..learn.runner import check_timeout, exercise_names, grade_file
    from ..learn.workbook import WORKBOOK
    timeout = _timeout(args.timeout, check_timeout)
    path = Path(args.dir)
    if path.is_dir() or path.suffix != ".py":   # DIR, or the workbook file itself
        path = path / WORKBOOK
    if not path.is_file():
        raise CLIError(f"{path} not found: write a workbook first with npformer learn init {args.dir}")
    names = exercise_names(args.names)
    report = grade_file(path, names, timeout=timeout)
    text = json.dumps(report.to_json(), indent=1) if args.json else report.text()
    sys.stdout.write(text + "\n")
    sys.stdout.flush()                          # a closed pipe surfaces here; cli.main handles it
    return report.exit_code


def _timeout(value, check) -> float:
    """--timeout T: 0 < T <= MAX_TIMEOUT seconds (a larger T overflows the time limit's arithmetic)."""
    try:
        seconds = check(value)
    except ValueError:
        raise CLIError(f"--timeout must be a positive number of seconds, got {value}") from None
    if seconds > MAX_TIMEOUT:
        raise CLIError(f"--timeout must be at most {MAX_TIMEOUT:,} seconds, got {value:g}")
    return seconds
