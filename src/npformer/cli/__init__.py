"""The ``npformer`` command line.

``COMMANDS`` lists the subcommands in order. Each lives in its own module in this package, named
as the command, which gives ``HELP`` (one line for ``npformer --help``), ``DESCRIPTION`` (for
``npformer COMMAND --help``), ``add_arguments(parser)`` and ``run(args) -> exit code``. A command
module that fails to import is an error naming it. Heavy imports (matplotlib, tokenizers,
training) happen inside ``run``, so ``npformer --help`` stays quick.

Errors a user can cause end with one line on stderr and exit code 2: bad arguments and inputs,
and the operating system's refusals (a missing file, a full disk, a run that another process is
training, too little memory). Ctrl-C ends with one line and exit code 130 (128 + SIGINT, as shells
report it).

The last line of defence against hostile files: every loader reads a user's file (JSON, safetensors,
TSV, caches) with limits, inside ``settings.reading(path)``, which turns whatever a malformed file can
make parsing raise (KeyError, IndexError, RecursionError, MemoryError, OverflowError,
``zipfile.BadZipFile``, ...) into a ``settings.FileFormatError`` naming the file: a ValueError, so one
line here, exit 2. Other exceptions are bugs and keep their traceback (NPFORMER_DEBUG=1 shows one for
the user errors too).
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

# the subcommands, in the order --help lists them; each is the module npformer.cli.<name>
COMMANDS = ["lesson", "learn", "info", "demo", "train", "eval", "translate", "generate", "attention", "explore",
            "embed", "similar", "act", "study"]


class CLIError(Exception):
    """A user error: printed as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse would print the usage too)
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="npformer", description="The Transformer from scratch in NumPy.")
    from .. import __version__
    parser.add_argument("--version", action="version", version=f"npformer {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        module = f"{__name__}.{name}"
        try:
            mod = importlib.import_module(module)
        except ImportError as e:
            raise ImportError(f"command {name!r}: module {module} failed to import: {e}") from e
        p = sub.add_parser(name, help=mod.HELP, description=mod.DESCRIPTION)
        mod.add_arguments(p)
        p.set_defaults(func=mod.run)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        from ..ops import kernels
        kernels.mode()                  # a bad NPFORMER_KERNELS: one line before any work
        return int(args.func(args) or 0)
    except BrokenPipeError:  # `npformer ... | head`: the reader left early, which is not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (CLIError, ValueError, TypeError, OSError, UnicodeDecodeError, MemoryError) as e:
        if os.environ.get("NPFORMER_DEBUG"):
            raise
        sys.stderr.write(f"npformer {args.command}: error: {_one_line(e)}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write(f"npformer {args.command}: interrupted\n")
        return 130


def _one_line(e: Exception) -> str:
    """The first line of an error's message; the operating system's as "FILE: why"."""
    if isinstance(e, UnicodeDecodeError):
        return f"input is not valid UTF-8 ({e.reason} at byte {e.start})"
    if isinstance(e, MemoryError):
        return "out of memory" + (f" ({e})" if str(e) else "")
    if isinstance(e, OSError) and e.strerror:                          # raised by the OS: "[Errno 28] ..."
        return f"{e.filename}: {e.strerror}" if e.filename else e.strerror
    msg = str(e).strip()
    return msg.splitlines()[0] if msg else type(e).__name__


if __name__ == "__main__":
    raise SystemExit(main())
