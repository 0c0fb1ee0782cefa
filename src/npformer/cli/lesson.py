"""``npformer lesson [--section N]``: the lesson's four demonstrations through npformer's own
functions, each printed with the lesson's lines and then taken one step further.

The whole lesson ends by pointing to ``npformer study``, where its misconceptions are tested."""
from __future__ import annotations

import sys

from . import CLIError

HELP = "the lesson's attention demonstrations, run through the library"
DESCRIPTION = __doc__.split("\n\n")[0].replace("``", "")


def add_arguments(p) -> None:
    p.add_argument("--section", type=int, metavar="N",
                   help="run only section N: 1 attention weights, 2 square-root scaling, "
                        "3 heads and layer norm, 4 order and positions")


def run(args) -> int:
    from .. import lesson
    if args.section is not None and args.section not in lesson.RUNNERS:
        raise CLIError(f"--section must be 1, 2, 3 or 4, got {args.section}")
    lesson.run(args.section)
    sys.stdout.flush()                           # a closed pipe surfaces here; cli.main handles it
    return 0
