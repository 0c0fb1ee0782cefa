"""Sentence embeddings, all-MiniLM-L6-v2: npformer vs sentence-transformers vs ONNX Runtime.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/bench_minilm.py
    (options: --lengths short,mixed,long --generators words,syllables --pairs 15 --warmup 1
     --batches 4 --batch-size 64 --queries 20 --threads N; a smoke test: --pairs 3 --batches 1 --queries 3)
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/bench_minilm.py --profile
                                                    # cProfile of one npformer pass per corpus instead
    ... bench_minilm.py --query-products           # a query's encode time against its products alone

Three engines, one process, the same weights and the same token ids:
- npformer: ``SentenceEncoder.encode`` with its defaults (it picks its own path and threads);
- sentence-transformers: ``SentenceTransformer.encode`` (torch, ``torch.set_num_threads``);
- ONNX Runtime: the model exported by ``torch.onnx.export`` (opset 17, dynamic batch and length
  axes) to a temporary directory, run on the CPUExecutionProvider with ``intra_op_num_threads``
  equal to the others' threads; its texts sorted by length and batched as sentence-transformers
  does, each batch padded to its longest text, ids from sentence-transformers' own tokenizer.
Every engine mean-pools the last hidden states over the real tokens and L2-normalises.

Corpora, generated here: each length distribution (--lengths) from each generator (--generators),
a seed each, so that no figure rests on one text:
    short   short queries          words: 3-12 words, uniform     syllables: 2-16, geometric
    mixed   queries to passages    words: 3-200, uniform          syllables: 3-250, log-uniform
    long    passages               words: 100-180, uniform        syllables: 35-85, uniform
The "words" generator draws from a list of English words (some long and rare, split by WordPiece
into several pieces), digits and punctuation; "syllables" makes a vocabulary of invented words
from random syllables (mostly several pieces each), names and numbers.

Batch 64: a corpus of --batches batches, sorted by length and cut into batches as
sentence-transformers' encode does; each round is one batch (round r: batch r mod --batches) run
by all three engines back to back, the order rotated from one round to the next (``_common.paired``:
npformer ST ORT, ST ORT npformer, ORT npformer ST, ...), after --warmup untimed rounds. Reported
per corpus: each engine's median time per batch and sentences/s, the median per-round ratio
npformer / the faster of the two others in that round with its interquartile range, the ratio by
which engine ran first, the verdict, and the products-only floor: the same batch's matrix products
alone (the model's own weights W^T on the batch's packed rows, and the attention products of each
text, dealt into pieces on npformer's threads as encode deals them) over the faster other's time
in that round. A floor above 1 / 1.10 = 0.91 means npformer cannot be 1.10x as fast there even
with every other operation free.

Batch 1: --queries short queries from each generator, one query per round, the engines rotated;
the same table, the floor being the query's products alone on one thread (npformer runs a query
on one thread). Beside it, the bound of a query: the encoder weights' bytes over the memory
bandwidth measured here (the best of 5 numpy copies of an array 2x the L3, read + write bytes on
one core), and over the bandwidth of a copy as large as the weights (which may sit in a cache).

Parity (exit status 1 on a miss): npformer's token ids equal sentence-transformers' on every
corpus, and every embedding of every round within 1e-5 (max abs) of sentence-transformers';
ONNX Runtime's within 1e-4 (it fuses operations in another order; this checks only that it
did the same work). The default run should take about six minutes on a quiet 2-core machine
(an estimate from the per-batch times of earlier runs; a busy machine takes much longer).
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from _common import (
    MIN_PAIRS,
    add_threads_arg,
    check,
    l3_bytes,
    paired,
    physical_cores,
    print_paired,
    print_setup,
    quartiles,
    set_threads,
)

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

LENGTHS = ("short", "mixed", "long")
GENERATORS = ("words", "syllables")
# (length, generator) -> (fewest words, most words, distribution, seed)
CORPORA = {
    ("short", "words"): (3, 12, "uniform", 1),
    ("mixed", "words"): (3, 200, "uniform", 2),
    ("long", "words"): (100, 180, "uniform", 3),
    ("short", "syllables"): (2, 16, "geometric", 11),
    ("mixed", "syllables"): (3, 250, "log-uniform", 12),
    ("long", "syllables"): (35, 85, "uniform", 13),
}
ENGINES = ("npformer", "sentence-transformers", "ONNX Runtime")
HEADS = 12                              # all-MiniLM-L6-v2: 12 heads of 32


def syllable_vocabulary(n: int, seed: int) -> list[str]:
    """n invented words of 1-4 syllables, a few capitalised as names, and some numbers."""
    rng = np.random.default_rng(seed)
    onsets = "b c d f g h j k l m n p r s t v w z br cr dr fl gr kl pr st str th sh ch".split()
    vowels = "a e i o u ai ea ou io".split()
    codas = ["", "", "", "n", "r", "s", "l", "m", "x", "nd", "st"]
    words = []
    for _ in range(n):
        w = "".join(rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas) for _ in range(rng.integers(1, 5)))
        words.append(w.capitalize() if rng.random() < 0.1 else w)
    words += [str(int(x)) for x in rng.integers(0, 100_000, n // 20)] + [",", ".", "?", ";"]
    return words


def word_counts(n: int, lo: int, hi: int, dist: str, rng: np.random.Generator) -> np.ndarray:
    """n sentence lengths in words, lo to hi, drawn from ``dist``."""
    if dist == "uniform":
        k = rng.integers(lo, hi + 1, size=n)
    elif dist == "geometric":                     # many short, a tail of longer ones
        k = lo + rng.geometric(3 / (hi - lo + 1), size=n) - 1
    elif dist == "log-uniform":
        k = np.exp(rng.uniform(math.log(lo), math.log(hi + 1), size=n)).astype(np.int64)
    else:
        raise ValueError(f"dist: unknown {dist!r}")
    return np.clip(k, lo, hi)                                              # (n,)


def make_sentences(n: int, lo: int = 3, hi: int = 200, seed: int = 0, generator: str = "words",
                   dist: str = "uniform") -> list[str]:
    """n sentences of lo to hi words from ``generator``, the same ones for every run with the same seed."""
    rng = np.random.default_rng(seed)
    words = np.array(WORDS if generator == "words" else syllable_vocabulary(600, seed + 1000))
    return [" ".join(rng.choice(words, size=int(k))).capitalize() for k in word_counts(n, lo, hi, dist, rng)]


def label(length: str, generator: str) -> str:
    lo, hi, dist, seed = CORPORA[(length, generator)]
    return f"{length}/{generator} ({lo}-{hi} words, {dist}, seed {seed})"


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


# -- the products alone, and the memory bandwidth -----------------------------------------------

class Products:
    """The encoder's matrix products at a workload's real shapes, timed alone: each layer's four
    products with its own W^T arrays (the ones npformer's packed inference multiplies by) on the
    piece's packed rows, and each text's two attention products (H, t, D) @ (H, D, t) and
    (H, t, t) @ (H, t, D). Inputs and outputs are made once per thread: no allocation is timed."""

    def __init__(self, enc) -> None:
        from npformer.nn.inference import transposed_weights

        self.w_t = list(transposed_weights(enc.model.encoder).values())      # (I, O) each, layer order
        self.layers = len(self.w_t) // 4
        self.d = self.w_t[0].shape[0] // HEADS                               # head size
        self.bufs: dict = {}

    def _buffers(self, slot: int, rows: int, t_max: int):
        have = self.bufs.get(slot)
        if have is None or have[0] < rows or have[1] < t_max:
            rng = np.random.default_rng(slot)
            width = max(max(w.shape) for w in self.w_t)
            x = rng.standard_normal((rows, width), dtype=np.float32)          # (N, max I)
            out = np.empty((rows, width), dtype=np.float32)                 # (N, max O)
            q = rng.standard_normal((HEADS, t_max, self.d), dtype=np.float32)  # (H, T, D)
            s = np.empty((HEADS, t_max, t_max), dtype=np.float32)            # (H, T, T)
            o = np.empty((HEADS, t_max, self.d), dtype=np.float32)           # (H, T, D)
            have = self.bufs[slot] = (rows, t_max, x, out, q, s, o)
        return have

    def piece(self, slot: int, lengths: list[int]) -> None:
        n = sum(lengths)
        _, _, x, out, q, s, o = self._buffers(slot, n, max(lengths))
        for layer in range(self.layers):
            for w in self.w_t[4 * layer:4 * layer + 4]:
                np.matmul(x[:n, :w.shape[0]], w, out=out[:n, :w.shape[1]])   # (N, O)
            for t in lengths:
                qt = q[:, :t]                                                # (H, t, D)
                np.matmul(qt, np.swapaxes(qt, -1, -2), out=s[:, :t, :t])     # (H, t, t)
                np.matmul(s[:, :t, :t], qt, out=o[:, :t])                     # (H, t, D)

    def time(self, pieces: list[list[int]], repeats: int = 3) -> float:
        """Seconds: the best of ``repeats`` runs of the pieces, side by side on one Python thread
        each with a one-thread BLAS (as npformer's encode runs them), after one untimed run."""
        from threadpoolctl import threadpool_limits

        best = float("inf")
        with threadpool_limits(1, user_api="blas"):
            pool = ThreadPoolExecutor(len(pieces)) if len(pieces) > 1 else None
            try:
                for r in range(repeats + 1):
                    t0 = time.perf_counter()
                    if pool is None:
                        self.piece(0, pieces[0])
                    else:
                        list(pool.map(self.piece, range(len(pieces)), pieces))
                    if r:
                        best = min(best, time.perf_counter() - t0)
            finally:
                if pool is not None:
                    pool.shutdown()
        return best


def npformer_pieces(lengths: list[int], threads: int) -> list[list[int]]:
    """A batch's token counts dealt as SentenceEncoder.encode deals them: sorted longest first,
    round-robin into ``threads`` pieces; small work (SMALL_WORK_TOKENS tokens in all) in one."""
    from npformer.pretrained import encoder as encoder_module

    small = sum(lengths) <= getattr(encoder_module, "SMALL_WORK_TOKENS", 128)
    ordered = sorted(lengths, reverse=True)
    k = 1 if small else min(threads, len(ordered))
    return [ordered[i::k] for i in range(k)]


def copy_bandwidth(nbytes: int, repeats: int = 5) -> float:
    """Bytes per second of one core: the best of ``repeats`` numpy copies of ``nbytes``, counting
    the bytes read and written (2 x nbytes), after one untimed copy."""
    src = np.ones(max(nbytes // 4, 1), dtype=np.float32)                   # (n,)
    dst = np.empty_like(src)                                              # (n,)
    np.copyto(dst, src)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return 2 * src.nbytes / best


# -- runs --------------------------------------------------------------------------------------

def tol(engine: str) -> float:
    return 1e-5 if engine == "npformer" else 1e-4


def compare(what: str, items: list[list[str]], runners: dict, args, floor_of) -> dict:
    """Round r runs items[r mod len(items)] through every engine (order rotated); every round's
    embeddings checked against sentence-transformers'. floor_of(i): the products-only seconds of
    item i. Prints the paired report; returns its summary with the floors and the items' size."""
    ref = "sentence-transformers"
    cur = [0]
    worst = {k: 0.0 for k in runners if k != ref}

    def each(r, out):
        for k in worst:
            diff = float(np.abs(out[k] - out[ref]).max())
            worst[k] = max(worst[k], diff)
            if not diff <= tol(k):
                check(f"{what}, round {r + 1}, {k}", diff, tol(k))
        cur[0] = (r + 1) % len(items)

    sides = {k: (lambda run=run: run(items[cur[0]])) for k, run in runners.items()}
    res = paired(sides, args.pairs, warmup=args.warmup, each=each)
    for k, diff in worst.items():
        check(f"{what}, every round, {k}", diff, tol(k))
    floors = [floor_of(r % len(items)) / min(res.times[o][r] for o in res.others) for r in range(len(res.first))]
    s = print_paired(res)
    f1, fm, f3 = quartiles(floors)
    print(f"  products-only floor, npformer's products alone / the faster other's time, per round: median "
          f"{fm:.3f} (IQR {f1:.3f}-{f3:.3f}); 1.10x as fast needs a ratio <= {1 / 1.1:.3f}: "
          f"{'within reach' if fm <= 1 / 1.1 else 'OUT OF REACH: the products alone take longer'}", flush=True)
    s["floor"] = fm
    s["size"] = len(items[0])
    return s


def run_table(title: str, rows: dict, unit: str) -> None:
    pairs = min(s["pairs"] for s in rows.values())
    print(f"\n{title}" + ("" if pairs >= MIN_PAIRS else f" (only {pairs} pairs: a smoke test, not a claim)"))
    col = "sentences/s" if unit == "sentences/s" else "ms"
    print(f"| corpus | npformer {col} | sentence-transformers | ONNX Runtime | npformer / faster other, time per "
          "round: median (IQR) | as speed | verdict | products-only floor |")
    print("|---|---|---|---|---|---|---|---|")
    for name, s in rows.items():
        med = s["medians"]
        vals = [s["size"] / med[k] if unit == "sentences/s" else med[k] * 1e3 for k in ENGINES]
        fmt = "{:.0f}" if unit == "sentences/s" else "{:.1f}"
        print(f"| {name} | " + " | ".join(fmt.format(v) for v in vals) +
              f" | {s['median']:.2f} ({s['q1']:.2f}-{s['q3']:.2f}) | {1 / s['median']:.2f}x | {s['verdict']} "
              f"| {s['floor']:.2f} |")


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
        print(f"\n== {name}: {len(texts) / total:.1f} sentences/s (profiled; only the calling "
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
    ap.add_argument("--lengths", default=",".join(LENGTHS), help="comma-separated: " + ", ".join(LENGTHS))
    ap.add_argument("--generators", default=",".join(GENERATORS), help="comma-separated: " + ", ".join(GENERATORS))
    ap.add_argument("--pairs", type=int, default=15, help="timed rounds per corpus, order rotated (default 15)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed rounds first (default 1)")
    ap.add_argument("--batches", type=int, default=4, help="batches per corpus at batch 64 (default 4)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--queries", type=int, default=20,
                    help="batch 1: queries per generator, one per round (default 20; 0: none)")
    ap.add_argument("--profile", action="store_true", help="cProfile npformer on each corpus instead")
    ap.add_argument("--query-products", action="store_true",
                    help="only: a query's encode time against its matrix products alone, BLAS on 1 and 2 threads")
    add_threads_arg(ap)
    args = ap.parse_args()
    lengths = [x for x in args.lengths.split(",") if x]
    generators = [x for x in args.generators.split(",") if x]
    for flag, got, known in (("--lengths", lengths, LENGTHS), ("--generators", generators, GENERATORS)):
        bad = [x for x in got if x not in known]
        if bad or not got:
            ap.error(f"{flag}: expected some of {', '.join(known)}, got {got}")
    for flag, v in (("--batches", args.batches), ("--batch-size", args.batch_size)):
        if v < 1:
            ap.error(f"{flag} must be >= 1, got {v}")
    if args.queries < 0:
        ap.error(f"--queries must be >= 0, got {args.queries}")

    import onnxruntime
    import torch
    from sentence_transformers import SentenceTransformer

    from npformer.ops import kernels
    from npformer.pretrained import SentenceEncoder
    from npformer.pretrained.parallel import default_threads

    n_texts = args.batches * args.batch_size
    corpora = {}
    for g in generators:
        for length in lengths:
            lo, hi, dist, seed = CORPORA[(length, g)]
            corpora[label(length, g)] = make_sentences(n_texts, lo, hi, seed, g, dist)
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
    prod = Products(enc)
    np_threads = default_threads()
    rows = {}
    for name, texts in corpora.items():
        ours, theirs = enc.tokenizer.encode(texts), ox.ids(texts)
        n_diff = sum(not np.array_equal(a, b) for a, b in zip(ours, theirs, strict=True))
        check(f"{name}: texts whose token ids differ from sentence-transformers'", n_diff, 0)
        order = np.argsort([-len(t) for t in texts], kind="stable")      # as sentence-transformers sorts
        batches = [[texts[i] for i in order[s:s + args.batch_size]] for s in range(0, len(texts), args.batch_size)]
        floors = [prod.time(npformer_pieces([len(x) for x in enc.tokenizer.encode(b)], np_threads)) for b in batches]
        n_tok = sum(len(x) for x in ours)
        print(f"\n{name}: {len(batches)} batch(es) of {args.batch_size}, {n_tok / len(texts):.1f} word pieces a text "
              f"({min(map(len, ours))}-{max(map(len, ours))}); one batch per round, {args.pairs} rounds", flush=True)
        kernels.clear_used()
        rows[name] = compare(name, batches, runners, args, lambda i, f=floors: f[i])
        print(f"  npformer's kernels in these rounds (calls): {kernels.summary(counts=True)}")

    lat = {}
    if args.queries > 0:
        bandwidth = copy_bandwidth(min(max(2 * (l3_bytes() or 128 << 20), 256 << 20), 1 << 30))
        w_bytes = sum(w.nbytes for k, w in enc.model.state_dict().items() if k.startswith("encoder."))
        w_bandwidth = copy_bandwidth(w_bytes)
        for g in generators:
            lo, hi, dist, seed = CORPORA[("short", g)]
            queries = make_sentences(args.queries, lo, hi, seed + 100, g, dist)
            q_len = [len(x) for x in enc.tokenizer.encode(queries)]
            floors = [prod.time([[n]]) for n in q_len]
            name = f"queries/{g} ({min(q_len)}-{max(q_len)} word pieces)"
            print(f"\nbatch 1, {name}: {len(queries)} queries, one per round", flush=True)
            run_pairs = argparse.Namespace(**{**vars(args), "pairs": max(args.pairs, len(queries))})
            kernels.clear_used()
            lat[name] = compare(name, [[q] for q in queries], runners, run_pairs, lambda i, f=floors: f[i])
            print(f"  npformer's kernels in these rounds (calls): {kernels.summary(counts=True)}")
            print(f"  products alone, median over the queries: {statistics.median(floors) * 1e3:.2f} ms "
                  "(one thread)")
        print(f"\nbatch-1 bound: the encoder's weights, {w_bytes / 1e6:.1f} MB, read once per query: over the "
              f"memory bandwidth measured here ({bandwidth / 1e9:.1f} GB/s, numpy copies 2x the L3, one core) "
              f"{w_bytes / bandwidth * 1e3:.2f} ms; over a weights-sized copy's ({w_bandwidth / 1e9:.1f} GB/s: "
              f"{'in the L3 here' if l3_bytes() and w_bytes < l3_bytes() else 'from memory'}) "
              f"{w_bytes / w_bandwidth * 1e3:.2f} ms")

    run_table(f"batch {args.batch_size}: sentences/s from each engine's median time per batch; ratios per round "
              f"(npformer / the faster of the two others; below 1: npformer faster)", rows, "sentences/s")
    if lat:
        run_table("batch 1: ms per query (median); ratios per round as above", lat, "ms")
    tmp.cleanup()
    sys.stdout.flush()


if __name__ == "__main__":
    main()
