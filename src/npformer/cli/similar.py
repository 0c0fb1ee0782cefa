"""``npformer similar --corpus FILE [--top-k K] QUERY...``: semantic search over the lines of a file.

    npformer similar --corpus faq.txt --top-k 3 "how do I reset my password"

Embeds every non-empty corpus line and each query with a pretrained sentence encoder
(all-MiniLM-L6-v2 by default) and prints, per query, the K most similar lines with their
cosine similarity and line number.
"""
from __future__ import annotations

from . import CLIError
from .embed import add_model_args, load_encoder, read_lines

HELP = "find the corpus lines most similar to each query (cosine)"
DESCRIPTION = "Print, for each QUERY, the most similar lines of the corpus file with their cosine similarity."


def add_arguments(p) -> None:
    p.add_argument("queries", nargs="+", metavar="QUERY", help="one or more query texts")
    p.add_argument("--corpus", required=True, metavar="FILE", help="a UTF-8 text file, one document a line")
    p.add_argument("--top-k", "-k", type=int, default=5, metavar="K", help="lines per query (default 5)")
    add_model_args(p)


def run(args) -> int:
    import numpy as np

    if args.top_k < 1:
        raise CLIError(f"--top-k must be >= 1, got {args.top_k}")
    lines = read_lines(args.corpus, "--corpus")
    keep = [i for i, ln in enumerate(lines) if ln.strip()]            # blank lines are not documents
    if not keep:
        raise CLIError(f"--corpus {args.corpus} has only blank lines")
    queries = [q for q in args.queries]
    if not all(q.strip() for q in queries):
        raise CLIError("a QUERY is empty")
    enc = load_encoder(args)
    docs = enc.encode([lines[i] for i in keep], batch_size=args.batch_size, normalize=True,
                      progress=len(keep) >= 256)                        # (D, dim), unit rows
    qs = enc.encode(queries, batch_size=args.batch_size, normalize=True)  # (Q, dim)
    scores = qs @ docs.T                                                # (Q, D) cosine similarities
    k = min(args.top_k, len(keep))
    for qi, q in enumerate(queries):
        best = np.argsort(-scores[qi], kind="stable")[:k]               # (k,)
        print(f"query: {q}")
        for j in best:
            print(f"  {scores[qi, j]:.4f}  line {keep[j] + 1}: {lines[keep[j]]}")
        if qi + 1 < len(queries):
            print()
    return 0
