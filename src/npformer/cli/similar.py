"""``npformer similar --corpus FILE [--top-k K] QUERY...``: semantic search over the lines of a file.

    npformer similar --corpus faq.txt --top-k 3 "how do I reset my password"

Embeds every non-empty corpus line and each query with a pretrained sentence encoder
(all-MiniLM-L6-v2 by default) and prints, per query, the K most similar lines with their
cosine similarity and line number; of lines with equal scores (duplicate lines), the earlier first.

The corpus embeddings are kept in a cache file next to the corpus, ``FILE.npformer-embeddings.npz``
(a plain .npz, read with allow_pickle=False), keyed by the SHA-256 of the corpus file's bytes and
by the model (its directory and every file in it: see ``model_key``). A later search on the same
corpus with the same model only embeds the queries; a changed corpus or another model makes the
cache stale and it is rewritten. It is written atomically (a temporary file renamed over it), never
half-written, and writable by its owner alone. Where it cannot be written (a read-only directory)
the search still runs, with a note on stderr. ``--no-cache`` skips it.

The cache is someone else's file until it proves otherwise. One that is corrupt, truncated, too
large for its corpus, compressed, or whose rows are not finite unit vectors is ignored and rebuilt.
One that is not a regular file (a symbolic link, say), is owned by another user or is writable by
others is not trusted: it is ignored, and the search runs without writing a cache (a note says so).
"""
from __future__ import annotations

import errno
import hashlib
import io
import os
import stat
import sys
import zipfile
from pathlib import Path

from . import CLIError
from .embed import _lines, add_model_args, load_encoder, text_file

HELP = "find the corpus lines most similar to each query (cosine)"
DESCRIPTION = "Print, for each QUERY, the most similar lines of the corpus file with their cosine similarity."
CACHE_SUFFIX = ".npformer-embeddings.npz"
CACHE_VERSION = 3                    # 2: the model key covers every file of the model directory; 3: equal
                                     # lines are embedded once (equal rows), the key's walk is bounded
CACHE_OVERHEAD = 64 << 10            # a cache's bytes besides its embeddings: keys, zip and .npy headers
UNIT_TOLERANCE = 1e-3                # |norm^2 - 1| of a cached row, which the encoder normalised in float32
KEY_HASHED_BYTES = 1 << 20           # model_key hashes a file up to this size, else takes its size and mtime
KEY_MAX_FILES = 1_000                # model_key looks at no more files and folders than this
KEY_MAX_DEPTH = 16                   # nor at folders nested deeper than this below the model directory
KEY_MAX_CONTENT = 2 << 30            # nor hashes more bytes than this in all


def add_arguments(p) -> None:
    p.add_argument("queries", nargs="+", metavar="QUERY", help="one or more query texts")
    p.add_argument("--corpus", required=True, metavar="FILE", help="a UTF-8 text file, one document a line")
    p.add_argument("--top-k", "-k", type=int, default=5, metavar="K", help="lines per query (default 5)")
    p.add_argument("--no-cache", action="store_true",
                   help=f"neither read nor write the corpus embeddings' cache (FILE{CACHE_SUFFIX})")
    add_model_args(p)


def cache_path(corpus: Path) -> Path:
    return corpus.with_name(corpus.name + CACHE_SUFFIX)


def model_key(model_dir: Path) -> str:
    """The model's identity for the cache: its directory and every file in it, subfolders included
    (hidden ones such as .git left out): the SHA-256 of each file up to KEY_HASHED_BYTES (configs,
    tokenizer, vocabulary, pooling), the size and modification time of a larger one (the weights:
    hashing 90 MB on every search would cost more than the search).

    The walk is bounded by the directory, not by what it holds: folders at most KEY_MAX_DEPTH deep,
    at most KEY_MAX_FILES files and folders, at most KEY_MAX_CONTENT bytes hashed; past a limit, a
    FileFormatError naming the directory. It is a loop over a stack, not a recursion, and follows no
    symbolic link to a folder."""
    from ..settings import FileFormatError

    d = Path(model_dir).resolve()
    h = hashlib.sha256(str(d).encode("utf-8"))
    seen, hashed = 0, 0
    stack: list[tuple[Path, int]] = [(d, 0)]                           # (folder, depth below d)
    while stack:
        folder, depth = stack.pop()
        try:
            with os.scandir(folder) as it:
                entries = sorted((e for e in it if not e.name.startswith(".")), key=lambda e: e.name)
        except OSError:                                                  # unreadable: named, not read
            h.update(f"{folder.relative_to(d).as_posix()}/\0unreadable\n".encode("utf-8", "surrogateescape"))
            continue
        seen += len(entries)
        if seen > KEY_MAX_FILES:
            raise FileFormatError(f"model directory {d} holds more than {KEY_MAX_FILES:,} files and folders, "
                                  "more than the cache's key reads (--no-cache runs without it)")
        subfolders = []
        for e in entries:
            f = Path(e.path)
            if e.is_dir(follow_symlinks=False):
                if depth + 1 > KEY_MAX_DEPTH:
                    raise FileFormatError(f"model directory {d} nests folders more than {KEY_MAX_DEPTH} deep, "
                                          "more than the cache's key reads (--no-cache runs without it)")
                subfolders.append((f, depth + 1))
                continue
            digest, n = _digest(f)
            hashed += n
            if hashed > KEY_MAX_CONTENT:
                raise FileFormatError(f"model directory {d} holds more than {KEY_MAX_CONTENT:,} bytes of small "
                                      "files, more than the cache's key reads (--no-cache runs without it)")
            h.update(f"{f.relative_to(d).as_posix()}\0{digest}\n".encode("utf-8", "surrogateescape"))
        stack.extend(reversed(subfolders))                              # depth first, in name order
    return h.hexdigest()


def _digest(path: Path) -> tuple[str, int]:
    """(a file's part of the model key, the bytes read for it): its SHA-256 up to KEY_HASHED_BYTES, else
    its size and mtime. Opened without blocking and checked on the open file: a FIFO or a device is
    named, not read."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:                                                     # a broken link, no permission
        return "unreadable", 0
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return "not a regular file", 0
        if st.st_size > KEY_HASHED_BYTES:
            return f"{st.st_size} {st.st_mtime_ns}", 0
        data = f.read(KEY_HASHED_BYTES + 1)
        return hashlib.sha256(data).hexdigest(), len(data)


def _distrust(st: os.stat_result) -> str | None:
    """Why a cache file (its fstat) is not to be trusted, or None."""
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return "is owned by another user"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "is writable by other users"
    return None


def _open_cache(path: Path, limit: int):
    """(the open cache file, or None when it is absent, unreadable or over ``limit`` bytes; why it is
    not trusted, or None). Opened without following a symbolic link, then checked on the open file
    itself, so that it cannot be swapped between the check and the read."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        return None, ("is a symbolic link" if e.errno == errno.ELOOP else None)
    f = os.fdopen(fd, "rb")
    st = os.fstat(fd)
    why = _distrust(st)
    if why or st.st_size > limit:
        f.close()
        return None, why
    return f, None


# what a corrupt .npz can make zipfile and np.load raise: the cache is then ignored and rebuilt
_CORRUPT = (OSError, ValueError, TypeError, KeyError, IndexError, EOFError, OverflowError, RuntimeError,
            NotImplementedError, zipfile.BadZipFile, MemoryError)


def read_cache(path: Path, corpus_sha: str, model: str, n_docs: int, dim: int):
    """(embeddings, distrust): the cached (n_docs, dim) float32 unit rows when the cache matches this
    corpus and model (else None), and why the cache file is not trusted (else None: then it may be
    written)."""
    import numpy as np

    limit = n_docs * dim * 4 + CACHE_OVERHEAD
    f, why = _open_cache(path, limit)
    if f is None:
        return None, why
    try:
        with f:
            with zipfile.ZipFile(f) as zf:                           # stored members alone: no zip bomb
                if any(i.compress_type != zipfile.ZIP_STORED or i.file_size > limit or i.flag_bits & 1
                       for i in zf.infolist()):
                    return None, None
            f.seek(0)
            with np.load(f, allow_pickle=False) as z:
                if (int(z["version"]) != CACHE_VERSION or str(z["corpus_sha256"]) != corpus_sha
                        or str(z["model"]) != model):
                    return None, None
                emb = z["embeddings"]
    except _CORRUPT:
        return None, None
    if emb.shape != (n_docs, dim) or emb.dtype != np.float32 or not np.isfinite(emb).all():
        return None, None
    norms = np.einsum("de,de->d", emb, emb)                            # (D,) squared lengths
    return (emb if np.all(np.abs(norms - 1.0) <= UNIT_TOLERANCE) else None), None


def write_cache(path: Path, emb, corpus_sha: str, model: str) -> None:
    """Write the cache atomically, readable by all and writable by its owner alone (whatever the umask
    allows the group: a group-writable cache would not be trusted next time)."""
    import numpy as np

    from ..files import atomic_writer, writing

    buf = io.BytesIO()
    np.savez(buf, embeddings=emb, corpus_sha256=np.array(corpus_sha), model=np.array(model),
             version=np.array(CACHE_VERSION))
    try:
        with atomic_writer(path) as f, writing(path):
            if hasattr(os, "fchmod"):
                os.fchmod(f.fileno(), os.fstat(f.fileno()).st_mode & 0o755)
            f.write(buf.getvalue())
    except OSError as e:
        sys.stderr.write(f"npformer similar: note: could not write the cache {path} ({e}); searching without it\n")


def top_k(scores, k: int):
    """Row-wise indices of the k largest scores, best first; equal scores, at the cut-off too, in
    index order (the lower index first)."""
    import numpy as np

    n = scores.shape[1]
    # the k-th largest score of each row: every index scoring at least that is a candidate, so the
    # choice among ties at the cut-off is the sort's (stable), not argpartition's (arbitrary)
    kth = -np.partition(-scores, k - 1, axis=1)[:, k - 1] if k < n else None    # (Q,)
    out = []
    for qi in range(scores.shape[0]):
        row = scores[qi]                                                # (D,)
        cand = np.flatnonzero(row >= kth[qi]) if kth is not None else np.arange(n)  # (>= k,) in index order
        out.append(cand[np.argsort(-row[cand], kind="stable")][:k])
    return out


def split_lines(data: bytes, name: str) -> list[str]:
    """``embed._lines``' lines of a whole file's bytes, at C speed (10,000 lines in about 1 ms);
    on bad UTF-8 its error, which names the byte offset."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return list(_lines(io.BytesIO(data), name, "--corpus"))
    text = text[1:] if text.startswith("\ufeff") else text                # a byte-order mark is not text
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()                                                     # a final newline adds no line
    return [ln[:-1] if ln.endswith("\r") else ln for ln in lines]


def cosine_scores(qs, docs):
    """Unit rows qs (Q, E) and docs (D, E) -> their cosine similarities (Q, D), clipped to [-1, 1]:
    float32 rounding can put a unit row's cosine with itself at 1.0000001."""
    import numpy as np

    return np.clip(qs @ docs.T, -1.0, 1.0)                              # (Q, D)


def run(args) -> int:
    import numpy as np

    from ..pretrained.encoder import unique_texts

    if args.top_k < 1:
        raise CLIError(f"--top-k must be >= 1, got {args.top_k}")
    corpus = text_file(args.corpus, "--corpus")
    data = corpus.read_bytes()                                          # hashed and split: the same bytes
    lines = split_lines(data, args.corpus)
    keep = [i for i, ln in enumerate(lines) if ln.strip()]            # blank lines are not documents
    if not keep:
        raise CLIError(f"--corpus {args.corpus} has " + ("only blank lines" if lines else "no lines"))
    texts = [lines[i] for i in keep]
    queries = list(args.queries)
    if not all(q.strip() for q in queries):
        raise CLIError("a QUERY is empty")
    enc = load_encoder(args, normalize=True)                             # cosine: unit rows
    docs, distrust = None, None
    if not args.no_cache:
        cache = cache_path(corpus)
        corpus_sha, model = hashlib.sha256(data).hexdigest(), model_key(enc.path)
        docs, distrust = read_cache(cache, corpus_sha, model, len(keep), enc.dim)
        if distrust:
            sys.stderr.write(f"npformer similar: note: the cache {cache} {distrust}: not trusted; "
                             "searching without it, and not writing one\n")
    if docs is None:
        docs = enc.encode(texts, batch_size=args.batch_size, normalize=True,
                          progress=len(keep) >= 256)                    # (D, dim), unit rows
        if not args.no_cache and not distrust:
            write_cache(cache, docs, corpus_sha, model)
    qs = enc.encode(queries, batch_size=args.batch_size, normalize=True)  # (Q, dim)
    # each distinct line scored once: a matrix product may round a row's dot product by where the row
    # stands, and equal lines must have equal scores to rank by line number
    _, inverse = unique_texts(texts)
    if inverse is None:
        scores = cosine_scores(qs, docs)                                # (Q, D)
    else:
        first = np.unique(inverse, return_index=True)[1]                # (U,) each distinct line's first row
        scores = cosine_scores(qs, docs[first])[:, inverse]             # (Q, D)
    for qi, (q, best) in enumerate(zip(queries, top_k(scores, min(args.top_k, len(keep))), strict=True)):
        print(f"query: {q}")
        for j in best:
            print(f"  {scores[qi, j]:.4f}  line {keep[j] + 1}: {lines[keep[j]]}")
        if qi + 1 < len(queries):
            print()
    return 0
