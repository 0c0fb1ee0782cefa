"""KV cache vs recomputing the prefix: greedy generation of 512 tokens with a decoder-only model.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/bench_kvcache.py
    (options: --tokens 512 --pairs 15 --d-model 256 --layers 4 --threads N;
     a smoke test: --tokens 48 --pairs 3)

Without a cache, step t runs the model over all t tokens so far (O(n^2) position-forwards for n
tokens); with it, step t runs one position and one attention row over the stored keys. Both
decode greedily from the same one-token prompt and must produce the same tokens (exit status 1
otherwise, checked on every run). The model has random weights (speed does not depend on what
it learned). After a warm-up of 8 tokens each, --pairs pairs of one run of each, back to back,
the order swapped from one pair to the next (``_common.paired``); each side's median, the median
per-pair ratio (cached / recomputing) with its interquartile range, the ratio by which side ran
first, and the cache's speed-up (the inverse of the median ratio).

Equal tokens alone prove little here: the random model repeats its prompt's token (its tied
embedding dominates the logits; the number of distinct tokens generated is printed), and would
go on doing so through many a cache bug. So first, a check of the logits (exit status 1 on a
miss): --tokens random tokens fed one at a time to the cached stepper, each step's logits
against those of one recomputing forward over the whole sequence, within 1e-4 (max abs).

numpy's BLAS runs on --threads threads (default: one per physical core, what `npformer generate`
gets on a machine without SMT). Threads speed up the recomputing baseline's large products more
than the cached steps' one-row products. On a shared machine, --threads 1 keeps OpenBLAS's
spinning worker threads from fighting other programs for the cores (they made the same products
10x slower there). A full run is --pairs runs of each after an 8-token warm-up: about
--pairs times the sum of the two times that docs/performance.md's table gives for one
run of each on its machine (no times are quoted here, so that none goes stale).
"""
from __future__ import annotations

import argparse

import numpy as np

from _common import add_threads_arg, check, paired, print_paired, print_setup, set_threads
from npformer.decode import greedy, make_stepper
from npformer.models import DecoderLM, DecoderLMConfig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=512, help="tokens to generate (default 512)")
    ap.add_argument("--pairs", type=int, default=15, help="timed pairs, the order swapped each pair (default 15)")
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=96)
    add_threads_arg(ap)
    args = ap.parse_args()

    threads = set_threads(args.threads)
    print_setup()
    cfg = DecoderLMConfig(vocab_size=args.vocab, d_model=args.d_model, n_heads=args.heads,
                          d_ff=4 * args.d_model, n_layers=args.layers, max_len=args.tokens + 1)
    model = DecoderLM(cfg, rng=0).eval()
    prompt = np.zeros((1, 1), dtype=np.int64)                             # (B=1, P=1)
    print(f"DecoderLM d_model={cfg.d_model} layers={cfg.n_layers} heads={cfg.n_heads} d_ff={cfg.d_ff} "
          f"max_len={cfg.max_len} ({model.num_parameters():,} parameters), float32, BLAS threads {threads}")

    # the cache's logits, on a sequence that is not one token repeated
    ids = np.random.default_rng(1).integers(0, args.vocab, (1, args.tokens))  # (1, N)
    stepper = make_stepper(model, batch=1, cache=True, max_len=args.tokens)
    stepped = np.concatenate([stepper.step(ids[:, i:i + 1]) for i in range(args.tokens)], axis=1)  # (1, N, V)
    whole = make_stepper(model, batch=1, cache=False).step(ids)          # (1, N, V)
    check(f"logits of {args.tokens} random tokens, cached one at a time vs recomputed at once, max abs",
          float(np.abs(stepped - whole).max()), 1e-4)

    for cache in (True, False):                                           # warm up both paths
        greedy(model, prompt, 8, cache=cache)
    sides = {"with KV cache": lambda: greedy(model, prompt, args.tokens, cache=True),
             "recompute": lambda: greedy(model, prompt, args.tokens, cache=False)}

    def same_tokens(r, got):
        """Every pair's tokens are checked, not only the last."""
        same = got["with KV cache"].shape == got["recompute"].shape == (1, args.tokens)
        n_diff = int(np.sum(got["with KV cache"] != got["recompute"])) if same else args.tokens
        check(f"pair {r + 1}: generated tokens that differ (of {args.tokens})", n_diff, 0)

    res = paired(sides, args.pairs, warmup=0, each=same_tokens)
    print(f"{args.tokens} tokens ({len(np.unique(res.out['with KV cache']))} distinct), {args.pairs} pairs, order "
          "swapped each pair, after an 8-token warm-up")
    s = print_paired(res, unit="s")
    for k, t in s["medians"].items():
        print(f"  {k:<24} {args.tokens / t:8.1f} tokens/s (median)")
    speedup = 1 / s["median"]
    judged = "met" if speedup >= 5 else "NOT MET"
    print(f"speed-up of the cache: {speedup:.1f}x (target >= 5x at 512 tokens: "
          f"{judged if args.tokens == 512 else f'not judged at {args.tokens}'})")


if __name__ == "__main__":
    main()
