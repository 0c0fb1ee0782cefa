"""Sentence-embedding throughput: npformer vs sentence-transformers, all-MiniLM-L6-v2.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/bench_minilm.py
    (options: --n 1000 --rounds 3 --batch-size 64 --threads N; a smoke test: --n 100 --rounds 2)
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/bench_minilm.py --profile
                                                    # cProfile of one npformer pass instead

Both embed the same sentences (3 to 200 words, made deterministically from a word list below)
at batch 64, in one process: after a warm-up of one batch each, they alternate npformer /
sentence-transformers for --rounds rounds, so that load from other processes hits both alike.
Both get --threads threads (default: one per physical core): torch.set_num_threads for torch,
and for npformer that many Python threads over pieces of each batch (its SentenceEncoder holds
the BLAS to one thread meanwhile, so the two don't compete for the cores). Prints each round,
the medians, and the ratio of the medians.

Parity (exit status 1 on a miss): every embedding of the warm-up batch and of every round
within 1e-5 (max abs) of sentence-transformers'. A full run takes about five minutes (3 rounds
of about 40 s each side on the README's machine).
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

from _common import add_threads_arg, check, medians, print_ratio, print_setup, set_threads

# Common English words, a few long and rare ones that WordPiece splits into several pieces,
# digits and punctuation: a mix of 1- and multi-piece words as in real text.
WORDS = """the of and to in a is that for it as was with be by on not he this are or his from at which
but have an they you were her she there one all we their has been would more will if no when who so
can said out up what about into them than some could time only other new its people may first also
after any two like over such these our made then well way even back because most good through year
just where much before those both each must same very three under state world while life between never
house still small every found great last long might little day own man old being another know home
water place school number part system group problem fact point government company question work night
market attention transformer embedding sentence network gradient probability photosynthesis
mitochondria thermodynamics electromagnetic constitutional infrastructure pharmaceutical
unbelievable reconsideration internationalization hydroelectric neuroscientists cryptocurrency
biodiversity archaeological kaleidoscope quintessential serendipity zeitgeist 1999 2024 42 3.14
, . ; : ! ? ( ) - " ' """.split()


def make_sentences(n: int, seed: int = 0) -> list[str]:
    """n sentences of 3 to 200 words, the same ones for every run with the same seed."""
    rng = np.random.default_rng(seed)
    words = np.array(WORDS)
    lengths = rng.integers(3, 201, size=n)                      # (n,) words per sentence
    return [" ".join(rng.choice(words, size=int(k))).capitalize() for k in lengths]


# (file suffix, function) -> part of the work, for the profile summary; "self" = the
# function's own time (its matrix products), "cum" = with everything it calls
PARTS = [
    ("nn/inference.py", "linear_packed", "self", "matrix products: out_proj, FFN (linear_packed)"),
    ("nn/inference.py", "self_attention_packed", "self", "matrix product: q, k, v projection (self_attention_packed)"),
    ("ops/inference.py", "attention_inference", "self", "attention: scores and weighted sums (small products)"),
    ("ops/inference.py", "softmax_numerator_", "cum", "attention: softmax (max, exp, sum)"),
    ("ops/activations.py", "gelu_forward", "cum", "GELU"),
    ("ops/inference.py", "layernorm_inference", "cum", "LayerNorm"),
    ("", "encode_batch", "cum", "tokenizer"),
]


def profile(enc, sentences, batch_size) -> None:
    """cProfile one pass on ONE core (one thread, BLAS held to one thread: cProfile sees only
    the calling thread), in CPU time, grouped into the parts of the work."""
    import cProfile
    import pstats

    from threadpoolctl import threadpool_limits

    with threadpool_limits(1, user_api="blas"):
        enc.encode(sentences[:batch_size], batch_size=batch_size, threads=1)  # warm-up
        prof = cProfile.Profile(time.process_time)
        t = time.process_time()
        prof.runcall(enc.encode, sentences, batch_size=batch_size, threads=1)
        total = time.process_time() - t
    print(f"npformer on one core (profiled): {len(sentences) / total:.1f} sentences/s, {total:.2f} s CPU")
    stats = pstats.Stats(prof)
    seen = 0.0
    print(f"{'part':64s} {'s':>7s} {'share':>6s}")
    for suffix, func, kind, label in PARTS:
        t_part = sum((tt if kind == "self" else ct) for (f, _, name), (_, _, tt, ct, _) in stats.stats.items()
                     if name == func and f.replace(os.sep, "/").endswith(suffix))
        seen += t_part
        print(f"{label:64s} {t_part:7.2f} {t_part / total:6.1%}")
    print(f"{'everything else (embeddings, pooling, Python)':64s} {total - seen:7.2f} {(total - seen) / total:6.1%}")
    stats.sort_stats("tottime").print_stats(12)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000, help="number of sentences (default 1000)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--profile", action="store_true", help="cProfile one npformer pass and print the top entries")
    add_threads_arg(ap)
    args = ap.parse_args()

    import torch
    from sentence_transformers import SentenceTransformer

    from npformer.pretrained import SentenceEncoder

    sentences = make_sentences(args.n)
    enc = SentenceEncoder.load()
    st = SentenceTransformer(str(enc.path), device="cpu")          # loads scipy's BLAS too: before the limits
    threads = set_threads(args.threads, torch)
    print_setup(torch)
    n_tokens = sum(len(s) for s in enc.tokenizer.encode(sentences))
    print(f"{len(sentences)} sentences, {n_tokens} word pieces (max length {enc.tokenizer.max_length}), "
          f"batch {args.batch_size}")

    if args.profile:
        profile(enc, sentences, args.batch_size)
        return

    print(f"npformer: {threads} Python thread(s)" + (", the BLAS held to one thread meanwhile" if threads > 1
                                                    else ", the BLAS on one thread"))

    def run_np(texts):
        return enc.encode(texts, batch_size=args.batch_size, threads=threads)

    def run_st(texts):
        with torch.inference_mode():
            return st.encode(texts, batch_size=args.batch_size, convert_to_numpy=True)

    def same(label, a, b):
        check(f"{label}: max abs difference of the embeddings", float(np.abs(a - b).max()), 1e-5)

    warm = sentences[:args.batch_size]
    same("warm-up batch", run_np(warm), run_st(warm))
    runners = {"npformer": run_np, "sentence-transformers": run_st}
    times: dict[str, list[float]] = {k: [] for k in runners}
    for r in range(args.rounds):                                   # alternating; each round's output checked
        out = {}
        for name, run in runners.items():
            t = time.perf_counter()
            out[name] = run(sentences)
            times[name].append(time.perf_counter() - t)
            print(f"round {r + 1}: {name:22s} {len(sentences) / times[name][-1]:7.1f} sentences/s "
                  f"({times[name][-1]:.1f} s, load {os.getloadavg()[0]:.2f})", flush=True)
        same(f"round {r + 1}", out["npformer"], out["sentence-transformers"])
    med = medians(times)
    for k, v in med.items():
        print(f"median {k:22s} {len(sentences) / v:7.1f} sentences/s ({v:.2f} s)")
    print_ratio(med, "npformer", "sentence-transformers")


if __name__ == "__main__":
    main()
