"""The one module that calls the ``tokenizers`` library (tests/pretrained/test_tokenizer_panics.py
checks that no other module of npformer imports it).

The library runs Rust code that panics on some legal-looking files: a regex pre-tokenizer that
backtracks past Oniguruma's retry limit panics when a text is encoded, a BPE merge whose result is
missing from the vocabulary panics when the model is built. A panic reaches Python as
``pyo3_runtime.PanicException``, which derives from BaseException, so ``except Exception`` misses it;
and Rust's panic hook writes its own lines to stderr first. Every call here therefore runs inside
``_calling(source)``: a panic, or one of the library's own exceptions, becomes a ``FileFormatError``
naming the file (one line on the command line, exit 2), and what the library wrote to stderr
during a call is kept back when the call panicked (else passed on, unchanged).

``Tokenizer`` holds the library's tokenizer with the file it came from and returns plain Python
data only (id lists, strings, offsets), never one of the library's objects.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from pathlib import Path

from ..settings import FileFormatError, parse_json, read_bounded

MAX_TOKENIZER_BYTES = 64 << 20      # MiniLM's tokenizer.json is 466 KB; a 250,000-piece vocabulary's ~20 MB
MAX_REASON_CHARS = 64               # of the library's message, quoted in ours

_STDERR_LOCK = threading.Lock()     # fd 2 is the process's: one call at a time borrows it
_stderr_file = None                 # a temporary file, made at the first call, that fd 2 points at during a call


def _is_panic(e: BaseException) -> bool:
    return type(e).__name__ == "PanicException"


def _reason(e: BaseException) -> str:
    text = (str(e).strip().splitlines() or [""])[0]
    text = text if len(text) <= MAX_REASON_CHARS else text[:MAX_REASON_CHARS - 3] + "..."
    if _is_panic(e):
        return f"it panicked: {text}" if text else "it panicked"
    return text or type(e).__name__


@contextlib.contextmanager
def _stderr_held():
    """fd 2 points at a temporary file during the block: yields a list that the block's caller sets
    to [True] to discard what was written (a panic's report), else it is copied to the real stderr."""
    global _stderr_file
    with _STDERR_LOCK:
        if _stderr_file is None:
            _stderr_file = tempfile.TemporaryFile()
        f = _stderr_file
        f.seek(0)
        f.truncate()
        discard: list[bool] = []
        try:
            saved = os.dup(2)
        except OSError:                                                  # no stderr to borrow: nothing to hold back
            yield discard
            return
        try:
            os.dup2(f.fileno(), 2)
            yield discard
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            if not discard and f.tell():
                f.seek(0)
                os.write(2, f.read())


@contextlib.contextmanager
def _calling(source):
    """Around one call into the library for the file(s) ``source``: a panic or the library's own
    exception becomes a FileFormatError naming ``source``; KeyboardInterrupt and SystemExit pass."""
    with _stderr_held() as discard:
        try:
            yield
        except FileFormatError:
            raise
        except BaseException as e:
            if not (_is_panic(e) or isinstance(e, Exception)):
                raise
            discard.append(True)
            raise FileFormatError(f"{source} is not a tokenizer the tokenizers library reads "
                                  f"({_reason(e)})") from None


class Tokenizer:
    """The library's tokenizer of the file(s) ``source``; every method returns plain data."""

    def __init__(self, tok, source) -> None:
        self._tok, self.source = tok, str(source)

    def vocab_size(self) -> int:
        with _calling(self.source):
            return int(self._tok.get_vocab_size())

    def max_vocab_id(self) -> int:
        """The largest id of the vocabulary, added tokens included (-1 when empty)."""
        with _calling(self.source):
            return max((int(i) for i in self._tok.get_vocab(with_added_tokens=True).values()), default=-1)

    def token_to_id(self, token: str) -> int | None:
        with _calling(self.source):
            i = self._tok.token_to_id(token)
        return None if i is None else int(i)

    def set_limits(self, max_length: int | None) -> None:
        """No padding (npformer pads itself); truncation at ``max_length`` pieces, or none."""
        with _calling(self.source):
            self._tok.no_padding()
            if max_length is None:
                self._tok.no_truncation()
            else:
                self._tok.enable_truncation(int(max_length))

    def encode_batch(self, texts: list[str], add_special_tokens: bool = True,
                     tokens: bool = False, offsets: bool = False) -> list[dict]:
        """One dict per text: "ids" (list of int), and "tokens" / "offsets" when asked for."""
        with _calling(self.source):
            out = []
            for e in self._tok.encode_batch(list(texts), add_special_tokens=add_special_tokens):
                d: dict = {"ids": list(e.ids)}
                if tokens:
                    d["tokens"] = list(e.tokens)
                if offsets:
                    d["offsets"] = [(int(a), int(b)) for a, b in e.offsets]
                out.append(d)
            return out

    def decode(self, ids: list[int]) -> str:
        with _calling(self.source):
            return str(self._tok.decode([int(i) for i in ids], skip_special_tokens=False))

    def decode_each(self, ids: list[int]) -> list[str]:
        """Each id decoded alone."""
        with _calling(self.source):
            return [str(self._tok.decode([int(i)], skip_special_tokens=False)) for i in ids]


def read_tokenizer_json(path: Path) -> Tokenizer:
    """The tokenizer of the tokenizer.json at ``path``: read with a size bound, checked as limited JSON
    first; a file the library refuses, or panics on, is a FileFormatError of one line naming it."""
    from tokenizers import Tokenizer as LibTokenizer

    data = read_bounded(path, MAX_TOKENIZER_BYTES)
    parse_json(data, path, top=dict)
    with _calling(path):
        return Tokenizer(LibTokenizer.from_str(data.decode("utf-8")), path)


def byte_level_bpe(vocab: dict[str, int], merges: list[tuple[str, str]], source: str) -> Tokenizer:
    """GPT-2's byte-level BPE from a vocabulary and merges already read and checked as data;
    ``source`` names their files in an error."""
    from tokenizers import Tokenizer as LibTokenizer
    from tokenizers import decoders, models, pre_tokenizers

    with _calling(source):
        tok = LibTokenizer(models.BPE(vocab=vocab, merges=merges))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        return Tokenizer(tok, source)
