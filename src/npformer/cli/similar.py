"""``npformer similar --corpus FILE [--top-k K] QUERY...``: semantic search over the lines of a file.

    npformer similar --corpus faq.txt --top-k 3 "how do I reset my password"

Embeds every non-empty corpus line and each query with a pretrained sentence encoder
(all-MiniLM-L6-v2 by default) and prints, per query, the K most similar lines with their
cosine similarity and line number.

The corpus embeddings are kept in a cache file next to the corpus, ``FILE.npformer-embeddings.npz``
(a plain .npz, read with allow_pickle=False), keyed by the SHA-256 of the corpus file's bytes and
by the model (its directory, its config and tokenizer files' SHA-256, its weights file's size and
modification time). A later search on the same corpus with the same model only embeds the queries;
a changed corpus or another model makes the cache stale and it is rewritten. It is written
atomically (a temporary file renamed over it): never half-written. Where it cannot be written (a
read-only directory) the search still runs, with a note on stderr. ``--no-cache`` skips it.
"""
from __future__ import annotations

import hashlib
import io
import sys
from pathlib import Path

from . import CLIError
from .embed import _lines, add_model_args, load_encoder, text_file

HELP = "find the corpus lines most similar to each query (cosine)"
DESCRIPTION = "Print, for each QUERY, the most similar lines of the corpus file with their cosine similarity."
CACHE_SUFFIX = ".npformer-embeddings.npz"
CACHE_VERSION = 1


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
    """The model's identity for the cache: its directory, the SHA-256 of its small files (config,
    tokenizer, pipeline, pooling) and the size and modification time of its weights (hashing 90 MB
    on every search would cost more than the search)."""
    d = Path(model_dir).resolve()
    h = hashlib.sha256(str(d).encode("utf-8"))
    for name in ("config.json", "tokenizer.json", "modules.json", "sentence_bert_config.json",
                 "1_Pooling/config.json"):
        f = d / name
        h.update(name.encode() + (hashlib.sha256(f.read_bytes()).digest() if f.is_file() else b"-"))
    w = (d / "model.safetensors").stat()
    h.update(f"model.safetensors {w.st_size} {w.st_mtime_ns}".encode())
    return h.hexdigest()


def read_cache(path: Path, corpus_sha: str, model: str, n_docs: int, dim: int):
    """The cached (D, dim) embeddings when the cache matches this corpus and model, else None."""
    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as z:
            if (int(z["version"]) != CACHE_VERSION or str(z["corpus_sha256"]) != corpus_sha
                    or str(z["model"]) != model):
                return None
            emb = z["embeddings"]
    except (OSError, KeyError, ValueError):                 # absent, unreadable, or not ours: recompute
        return None
    return emb if emb.shape == (n_docs, dim) and emb.dtype == np.float32 else None


def write_cache(path: Path, emb, corpus_sha: str, model: str) -> None:
    import numpy as np

    from ..files import atomic_write_bytes

    buf = io.BytesIO()
    np.savez(buf, embeddings=emb, corpus_sha256=np.array(corpus_sha), model=np.array(model),
             version=np.array(CACHE_VERSION))
    try:
        atomic_write_bytes(path, buf.getvalue())
    except OSError as e:
        sys.stderr.write(f"npformer similar: note: could not write the cache {path} ({e}); searching without it\n")


def top_k(scores, k: int):
    """Row-wise indices of the k largest scores, best first (ties: the lower index first)."""
    import numpy as np

    if k < scores.shape[1]:
        part = np.argpartition(-scores, k - 1, axis=1)[:, :k]          # (Q, k), unordered
    else:
        part = np.broadcast_to(np.arange(scores.shape[1]), scores.shape)
    out = []
    for qi in range(scores.shape[0]):
        cand = np.sort(part[qi])                                        # (k,) by index, for stable ties
        out.append(cand[np.argsort(-scores[qi, cand], kind="stable")])
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


def run(args) -> int:

    if args.top_k < 1:
        raise CLIError(f"--top-k must be >= 1, got {args.top_k}")
    corpus = text_file(args.corpus, "--corpus")
    data = corpus.read_bytes()                                          # hashed and split: the same bytes
    lines = split_lines(data, args.corpus)
    keep = [i for i, ln in enumerate(lines) if ln.strip()]            # blank lines are not documents
    if not keep:
        raise CLIError(f"--corpus {args.corpus} has " + ("only blank lines" if lines else "no lines"))
    queries = list(args.queries)
    if not all(q.strip() for q in queries):
        raise CLIError("a QUERY is empty")
    enc = load_encoder(args)
    docs = None
    if not args.no_cache:
        corpus_sha, model = hashlib.sha256(data).hexdigest(), model_key(enc.path)
        docs = read_cache(cache_path(corpus), corpus_sha, model, len(keep), enc.dim)
    if docs is None:
        docs = enc.encode([lines[i] for i in keep], batch_size=args.batch_size, normalize=True,
                          progress=len(keep) >= 256)                    # (D, dim), unit rows
        if not args.no_cache:
            write_cache(cache_path(corpus), docs, corpus_sha, model)
    qs = enc.encode(queries, batch_size=args.batch_size, normalize=True)  # (Q, dim)
    scores = qs @ docs.T                                                # (Q, D) cosine similarities
    for qi, (q, best) in enumerate(zip(queries, top_k(scores, min(args.top_k, len(keep))), strict=True)):
        print(f"query: {q}")
        for j in best:
            print(f"  {scores[qi, j]:.4f}  line {keep[j] + 1}: {lines[keep[j]]}")
        if qi + 1 < len(queries):
            print()
    return 0
