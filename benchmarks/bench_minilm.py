"""Sentence embeddings, all-MiniLM-L6-v2: npformer vs sentence-transformers vs ONNX Runtime.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/bench_minilm.py
    (options: --regimes short,mixed,passages --rounds 3 --batch-size 64 --threads N --queries 100
     --scale 1.0 (corpus sizes x scale); a smoke test: --scale 0.1 --rounds 1 --queries 10)
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/bench_minilm.py --profile
                                                    # cProfile of one npformer pass per regime instead

Three engines, one process, the same weights and the same token ids:
- npformer: ``SentenceEncoder.encode`` with its defaults (it picks its own path and threads);
- sentence-transformers: ``SentenceTransformer.encode`` (torch, ``torch.set_num_threads``);
- ONNX Runtime: the model exported by ``torch.onnx.export`` (opset 17, dynamic batch and length
  axes) to a temporary directory, run on the CPUExecutionProvider with ``intra_op_num_threads``
  equal to the others' threads; its texts sorted by length and batched as sentence-transformers
  does, each batch padded to its longest text, ids from sentence-transformers' own tokenizer.
Every engine mean-pools the last hidden states over the real tokens and L2-normalises.

Corpora, generated here (three regimes, a fixed seed each), batch 64:
    short     short queries, 3 to 12 words
    mixed     3 to 200 words
    passages  passages of 100 to 180 words
After a warm-up pass of one batch each, the engines alternate (npformer, sentence-transformers,
ONNX Runtime) for --rounds rounds over the whole corpus; medians in sentences/s. Latency: --queries
short queries one at a time (batch 1), in 5 blocks, the engines alternating per block (each
block after one untimed query: torch's and ONNX Runtime's threads spin a while after a call and
would slow the next engine); the median ms.

Parity (exit status 1 on a miss): npformer's token ids equal sentence-transformers' on every
corpus, and every embedding of every round within 1e-5 (max abs) of sentence-transformers';
ONNX Runtime's within 1e-4 (it fuses operations in another order; this checks only that it
did the same work). The default run takes about four minutes on 2 cores.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _common import add_threads_arg, check, physical_cores, print_setup, set_threads

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

# regime -> (fewest words, most words, sentences at --scale 1, seed)
REGIMES = {
    "short": (3, 12, 2560, 1),
    "mixed": (3, 200, 640, 2),
    "passages": (100, 180, 320, 3),
}
LABELS = {"short": "short queries, 3-12 words", "mixed": "mixed, 3-200 words",
          "passages": "passages, 100-180 words"}
ENGINES = ("npformer", "sentence-transformers", "ONNX Runtime")


def make_sentences(n: int, lo: int = 3, hi: int = 200, seed: int = 0) -> list[str]:
    """n sentences of lo to hi words, the same ones for every run with the same seed."""
    rng = np.random.default_rng(seed)
    words = np.array(WORDS)
    lengths = rng.integers(lo, hi + 1, size=n)                 # (n,) words per sentence
    return [" ".join(rng.choice(words, size=int(k))).capitalize() for k in lengths]


# -- ONNX Runtime ------------------------------------------------------------------------------

def export_onnx(model_dir: Path, out_dir: Path) -> Path:
    """transformers' BertModel -> out_dir/model.onnx (last hidden states), opset 17, batch and
    length dynamic. The TorchScript exporter (dynamo=False): it needs no onnxscript."""
    import torch
    from transformers import AutoModel

    bert = AutoModel.from_pretrained(str(model_dir), attn_implementation="eager").eval()

    class Hidden(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    path = out_dir / "model.onnx"
    ids = torch.ones(2, 8, dtype=torch.long)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Hidden(bert), (ids, ids.clone()), str(path), opset_version=17, dynamo=False,
                          input_names=["input_ids", "attention_mask"], output_names=["last_hidden_state"],
                          dynamic_axes={"input_ids": {0: "batch", 1: "length"},
                                        "attention_mask": {0: "batch", 1: "length"},
                                        "last_hidden_state": {0: "batch", 1: "length"}})
    return path


class OnnxEncoder:
    """sentence-transformers' encode loop around an ONNX Runtime session: sort by length, batch,
    pad each batch to its longest, run, mean-pool over the mask, L2-normalise, input order."""

    def __init__(self, path: Path, st, threads: int) -> None:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        self.threads = threads
        self.st = st
        self.ort = ort

    def ids(self, texts: list[str]) -> list[np.ndarray]:
        feats = self.st.tokenize(texts)
        ids, mask = feats["input_ids"].numpy(), feats["attention_mask"].numpy().astype(bool)
        return [ids[i][mask[i]] for i in range(len(texts))]

    def encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        order = np.argsort([-len(t) for t in texts], kind="stable")   # as sentence-transformers sorts
        out = np.empty((len(texts), 384), dtype=np.float32)
        for s in range(0, len(texts), batch_size):
            idx = order[s:s + batch_size]
            feats = self.st.tokenize([texts[i] for i in idx])
            ids = feats["input_ids"].numpy().astype(np.int64)
            mask = feats["attention_mask"].numpy().astype(np.int64)
            (h,) = self.session.run(None, {"input_ids": ids, "attention_mask": mask})  # (b, T, E)
            m = mask[:, :, None].astype(np.float32)
            emb = (h * m).sum(1) / np.maximum(m.sum(1), 1e-9)         # (b, E) mean over real tokens
            emb /= np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
            out[idx] = emb
        return out


# -- runs --------------------------------------------------------------------------------------

def throughput(runners: dict, texts: list[str], rounds: int, batch: int) -> dict:
    """Warm-up on one batch, then alternating rounds over all texts; returns medians (s) per engine."""
    ref = "sentence-transformers"
    warm = {k: run(texts[:batch]) for k, run in runners.items()}
    for k in runners:
        if k != ref:
            check(f"warm-up batch, {k}", float(np.abs(warm[k] - warm[ref]).max()), tol(k))
    times = {k: [] for k in runners}
    for r in range(rounds):
        out = {}
        for k, run in runners.items():
            t = time.perf_counter()
            out[k] = run(texts)
            times[k].append(time.perf_counter() - t)
            print(f"  round {r + 1}: {k:22s} {len(texts) / times[k][-1]:8.1f} sentences/s "
                  f"({times[k][-1]:.2f} s, load {os.getloadavg()[0]:.2f})", flush=True)
        for k in runners:
            if k != ref:
                check(f"round {r + 1}, {k}", float(np.abs(out[k] - out[ref]).max()), tol(k))
    return {k: statistics.median(v) for k, v in times.items()}


def tol(engine: str) -> float:
    return 1e-5 if engine == "npformer" else 1e-4


def latency(runners: dict, queries: list[str], blocks: int = 5) -> dict:
    """Each query alone (batch 1); the queries in ``blocks`` blocks, the engines alternating per
    block, each block preceded by one untimed query. Medians (s).

    Why blocks, not alternating per query: torch's OpenMP threads and ONNX Runtime's pool spin on
    the cores for a while after each call, and would slow whichever engine runs next; a block
    measures each engine on queries that follow its own, as a service answering queries runs."""
    times = {k: [] for k in runners}
    ref = "sentence-transformers"
    out = {k: [] for k in runners}
    chunks = [queries[i::blocks] for i in range(blocks)]
    for chunk in chunks:
        for k, run in runners.items():
            run(chunk[:1])                                        # untimed: the others' threads settle
            for q in chunk:
                t = time.perf_counter()
                out[k].append(run([q]))
                times[k].append(time.perf_counter() - t)
    for k in runners:
        if k != ref:
            diff = max(float(np.abs(a - b).max()) for a, b in zip(out[k], out[ref], strict=True))
            check(f"batch 1, {k}", diff, tol(k))
    return {k: statistics.median(v) for k, v in times.items()}


def profile(enc, corpora: dict, batch_size: int) -> None:
    """cProfile one npformer pass per regime (its defaults), top entries by own time."""
    import cProfile
    import pstats

    for name, texts in corpora.items():
        enc.encode(texts[:batch_size], batch_size=batch_size)
        prof = cProfile.Profile()
        t = time.perf_counter()
        prof.runcall(enc.encode, texts, batch_size=batch_size)
        total = time.perf_counter() - t
        print(f"\n== {LABELS[name]}: {len(texts) / total:.1f} sentences/s (profiled; only the calling "
              "thread is seen)")
        pstats.Stats(prof).sort_stats("tottime").print_stats(14)


def query_products(enc, queries: list[str]) -> None:
    """Where a query's time goes: the whole encode([q]) against its 24 matrix products alone (the
    model's own W^T arrays, in the order a layer runs them, on rows of the query's length), with
    the BLAS on 1 and on 2 threads; medians over the queries."""
    from threadpoolctl import threadpool_limits

    from npformer.nn.inference import transposed_weights

    enc.encode(queries[:1])
    w_t = list(transposed_weights(enc.model.encoder).values())            # (I, O) each, layer order
    rows = [len(s) for s in enc.tokenizer.encode(queries)]                 # tokens per query
    rng = np.random.default_rng(0)
    xs = {i: rng.standard_normal((max(rows), i), dtype=np.float32) for i in {w.shape[0] for w in w_t}}

    def products(n):
        for w in w_t:
            np.matmul(xs[w.shape[0]][:n], w)                             # (n, O)

    def median_ms(fn, args):
        for a in args[:5]:
            fn(a)
        times = []
        for a in args:
            t = time.perf_counter()
            fn(a)
            times.append(time.perf_counter() - t)
        return statistics.median(times) * 1e3

    print(f"\none query at a time: {len(queries)} queries of {min(rows)}-{max(rows)} tokens "
          f"(median {statistics.median(rows):.0f}), {len(w_t)} products with weights per query; medians")
    print(f"  npformer encode([q]), its defaults: {median_ms(lambda q: enc.encode([q]), queries):.2f} ms")
    for n in (1, 2):
        with threadpool_limits(n, user_api="blas"):
            print(f"  its {len(w_t)} products alone, BLAS on {n} thread(s): {median_ms(products, rows):.2f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--regimes", default="short,mixed,passages", help="comma-separated: short, mixed, passages")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds per regime (default 3)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--queries", type=int, default=100, help="batch-1 queries for the latency (default 100; 0: none)")
    ap.add_argument("--scale", type=float, default=1.0, help="corpus sizes times this (default 1)")
    ap.add_argument("--profile", action="store_true", help="cProfile npformer on each regime instead")
    ap.add_argument("--query-products", action="store_true",
                    help="only: a query's encode time against its matrix products alone, BLAS on 1 and 2 threads")
    add_threads_arg(ap)
    args = ap.parse_args()
    regimes = [r for r in args.regimes.split(",") if r]
    bad = [r for r in regimes if r not in REGIMES]
    if bad:
        raise SystemExit(f"--regimes: unknown {bad}, expected some of {list(REGIMES)}")

    import onnxruntime
    import torch
    from sentence_transformers import SentenceTransformer

    from npformer.pretrained import SentenceEncoder

    corpora = {r: make_sentences(max(args.batch_size, int(REGIMES[r][2] * args.scale)), *REGIMES[r][:2],
                                 seed=REGIMES[r][3]) for r in regimes}
    enc = SentenceEncoder.load()
    st = SentenceTransformer(str(enc.path), device="cpu")          # loads scipy's BLAS too: before the limits
    threads = set_threads(args.threads, torch)
    if args.profile:
        print_setup(torch)
        profile(enc, corpora, args.batch_size)
        return
    if args.query_products:
        print_setup(torch)
        query_products(enc, make_sentences(max(args.queries, 10), 3, 12, seed=4))
        return
    tmp = tempfile.TemporaryDirectory(prefix="bench_minilm_")
    onnx_path = export_onnx(enc.path, Path(tmp.name))
    ox = OnnxEncoder(onnx_path, st, threads)
    print_setup(torch)
    print(f"npformer: SentenceEncoder.encode defaults, {enc.describe_threads()}")
    print(f"ONNX Runtime {onnxruntime.__version__}: CPUExecutionProvider, intra_op_num_threads {threads}, "
          f"inter_op_num_threads 1, graph optimisation all (its own MLAS kernels); {physical_cores()} "
          "physical cores")

    def run_np(texts):
        return enc.encode(texts, batch_size=args.batch_size)

    def run_st(texts):
        with torch.inference_mode():
            return st.encode(texts, batch_size=args.batch_size, convert_to_numpy=True)

    def run_ox(texts):
        return ox.encode(texts, args.batch_size)

    runners = {"npformer": run_np, "sentence-transformers": run_st, "ONNX Runtime": run_ox}
    rows = {}
    for r, texts in corpora.items():
        ours, theirs = enc.tokenizer.encode(texts), ox.ids(texts)
        same_ids = sum(not np.array_equal(a, b) for a, b in zip(ours, theirs, strict=True))
        check(f"{r}: texts whose token ids differ from sentence-transformers'", same_ids, 0)
        n_tok = sum(len(s) for s in ours)
        print(f"\n{LABELS[r]}: {len(texts)} sentences, {n_tok} word pieces ({n_tok / len(texts):.1f} a text), "
              f"batch {args.batch_size}", flush=True)
        med = throughput(runners, texts, args.rounds, args.batch_size)
        rows[r] = {k: len(texts) / v for k, v in med.items()}
    lat = None
    if args.queries > 0:
        queries = make_sentences(args.queries, 3, 12, seed=7)
        print(f"\nbatch 1: {len(queries)} short queries, one at a time", flush=True)
        lat = latency(runners, queries)

    print(f"\nthroughput at batch {args.batch_size}, sentences/s (median of {args.rounds}; load "
          f"{os.getloadavg()[0]:.2f}):")
    print("| corpus | npformer | sentence-transformers | ONNX Runtime | npformer / faster of the two |")
    print("|---|---|---|---|---|")
    for r, v in rows.items():
        best = max(v["sentence-transformers"], v["ONNX Runtime"])
        print(f"| {LABELS[r]} | {v['npformer']:.0f} | {v['sentence-transformers']:.0f} | {v['ONNX Runtime']:.0f} "
              f"| {v['npformer'] / best:.2f}x |")
    if lat is not None:
        print(f"\nlatency at batch 1, ms per query (median of {args.queries}):")
        print("| | npformer | sentence-transformers | ONNX Runtime |\n|---|---|---|---|")
        print("| ms per query | " + " | ".join(f"{lat[k] * 1e3:.1f}" for k in ENGINES) + " |")
    tmp.cleanup()
    sys.stdout.flush()


if __name__ == "__main__":
    main()
