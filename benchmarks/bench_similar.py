"""`npformer similar` over a 10,000-line corpus: one query once the corpus embeddings are cached.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/bench_similar.py
    (options: --lines 10000 --queries 30 --seed 0; a smoke test: --lines 300 --queries 3)

Writes a generated corpus (--lines lines of 2 to 30 words over a 600-word vocabulary with varied
punctuation, blank lines and repeats) into a temporary directory, then:
1. one `npformer similar` in-process, which embeds the corpus and writes its cache (timed once);
2. --queries searches, each the command's whole body (`cli.similar.run`: read the corpus, hash
   it, check and load the cache, embed the query, score every line, print the top 5), with the
   model already loaded, as a service that keeps it; medians;
3. one `npformer similar` as a fresh process (Python start and model load included), for scale.
The target (issue 12): under 50 ms for step 2. The cache's rows are checked against embedding the
corpus afresh (max abs difference), and each query's top line against a brute-force search.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _common import check, print_setup
from npformer.cli import similar
from npformer.pretrained import SentenceEncoder

PUNCT = ["", "", "", ",", ".", "?", "!", ";", ":", " -", "'s"]


def make_corpus(n: int, seed: int) -> list[str]:
    """n lines: words drawn with a Zipf-like skew from a generated vocabulary, some blank lines,
    some exact repeats, mixed case and punctuation."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("etaoinshrdlucmfwypvbgkjqxz"))
    p_letter = 1.0 / np.arange(1, 27) ** 0.7
    p_letter /= p_letter.sum()
    vocab = ["".join(rng.choice(letters, size=int(rng.integers(2, 10)), p=p_letter)) for _ in range(600)]
    p_word = 1.0 / np.arange(1, len(vocab) + 1)
    p_word /= p_word.sum()
    lines: list[str] = []
    for _ in range(n):
        u = rng.random()
        if u < 0.02:
            lines.append("")                                            # blank: not a document
        elif u < 0.05 and lines:
            lines.append(lines[int(rng.integers(len(lines)))])          # an exact repeat
        else:
            k = int(rng.integers(2, 31))
            words = [vocab[i] + PUNCT[int(rng.integers(len(PUNCT)))] for i in rng.choice(len(vocab), k, p=p_word)]
            line = " ".join(words)
            lines.append(line.capitalize() if rng.random() < 0.7 else line.upper() if rng.random() < 0.1 else line)
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=10000, help="corpus lines (default 10,000)")
    ap.add_argument("--queries", type=int, default=30, help="timed searches (default 30)")
    ap.add_argument("--seed", type=int, default=0, help="corpus and queries seed (default 0)")
    args = ap.parse_args()
    print_setup()
    enc = SentenceEncoder.load()
    print(f"encoder: {enc.describe_threads()}")
    lines = make_corpus(args.lines, args.seed)
    queries = [" ".join(q.split()[:6]).lower() for q in make_corpus(args.queries, args.seed + 1) if q.strip()]
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.txt"
        corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
        similar.load_encoder = lambda _args: enc                           # the model stays loaded

        def search(query: str) -> str:
            ns = argparse.Namespace(corpus=str(corpus), queries=[query], top_k=5, no_cache=False,
                                    batch_size=64)
            out = io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
                similar.run(ns)
            return out.getvalue()

        t = time.perf_counter()
        search("warm up")                                                   # embeds the corpus, writes the cache
        build = time.perf_counter() - t
        cache = similar.cache_path(corpus)
        check("cache written", float(not cache.is_file()), 0.0)

        keep = [ln for ln in lines if ln.strip()]
        with np.load(cache, allow_pickle=False) as z:
            cached = next(z[k] for k in z.files if z[k].ndim == 2)         # (D, dim)
        sample = np.random.default_rng(args.seed).choice(len(keep), size=min(64, len(keep)), replace=False)
        fresh = enc.encode([keep[i] for i in sample], normalize=True)
        check("cached rows vs embedding afresh, max abs", float(np.abs(cached[sample] - fresh).max()), 1e-5)

        times, misses = [], 0
        for q in queries:
            t = time.perf_counter()
            printed = search(q)
            times.append(time.perf_counter() - t)
            best = int(np.argmax(cached @ enc.encode([q], normalize=True)[0]))   # brute force
            misses += keep[best] not in printed.splitlines()[1]
        check("queries whose top line differs from a brute-force search", float(misses), 0.0)

        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "npformer", "similar", "--corpus", str(corpus), "--top-k", "5",
                        queries[0]], check=True, capture_output=True)
        whole = time.perf_counter() - t

    print(f"corpus: {args.lines:,} lines ({len(keep):,} documents), {sum(len(x) + 1 for x in lines) / 1e6:.2f} MB")
    print(f"  first search (embeds the corpus and writes the cache): {build:.1f} s")
    print(f"  a search once cached, model loaded (median of {len(times)}): {statistics.median(times) * 1e3:.1f} ms "
          f"(min {min(times) * 1e3:.1f}, max {max(times) * 1e3:.1f}); target under 50 ms")
    print(f"  `npformer similar` as a fresh process, cached: {whole:.2f} s (Python start and model load included)")


if __name__ == "__main__":
    main()
