"""KV cache vs recomputing the prefix: greedy generation of 512 tokens with a decoder-only model.

    python benchmarks/bench_kvcache.py [--tokens 512] [--d-model 256] [--layers 4]

Without a cache, step t runs the model over all t tokens so far (O(n^2) position-forwards for n
tokens); with it, step t runs one position and one attention row over the stored keys. Both
runs decode greedily from the same one-token prompt and must produce the same tokens.
The model has random weights (speed does not depend on what it learned).

BLAS runs single-threaded unless OPENBLAS_NUM_THREADS / OMP_NUM_THREADS say otherwise: on a
shared machine OpenBLAS threads fighting for cores made the same products 10x slower and the
timings noise. (Threads would speed up the recomputing baseline's large products more than
the cached steps' one-row products, so one thread does not flatter the cache much at this size;
set OPENBLAS_NUM_THREADS to compare.)
"""
from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))

import numpy as np  # noqa: E402  (after the thread setting, which BLAS reads at load time)

from npformer.decode import greedy  # noqa: E402
from npformer.models import DecoderLM, DecoderLMConfig  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=96)
    args = ap.parse_args()

    cfg = DecoderLMConfig(vocab_size=args.vocab, d_model=args.d_model, n_heads=args.heads,
                          d_ff=4 * args.d_model, n_layers=args.layers, max_len=args.tokens + 1)
    model = DecoderLM(cfg, rng=0).eval()
    prompt = np.zeros((1, 1), dtype=np.int64)                             # (B=1, P=1)
    threads = os.environ["OPENBLAS_NUM_THREADS"]
    print(f"DecoderLM d_model={cfg.d_model} layers={cfg.n_layers} heads={cfg.n_heads} d_ff={cfg.d_ff} "
          f"max_len={cfg.max_len} ({model.num_parameters():,} parameters), float32, "
          f"{os.cpu_count()} CPUs, BLAS threads: {threads}")

    for cache in (True, False):                                           # warm up both paths
        greedy(model, prompt, 8, cache=cache)

    t0 = time.perf_counter()
    cached = greedy(model, prompt, args.tokens, cache=True)
    t_cached = time.perf_counter() - t0
    print(f"with KV cache     : {args.tokens} tokens in {t_cached:8.2f} s ({args.tokens / t_cached:8.1f} tokens/s)")

    t0 = time.perf_counter()
    plain = greedy(model, prompt, args.tokens, cache=False)
    t_plain = time.perf_counter() - t0
    print(f"without (recompute): {args.tokens} tokens in {t_plain:8.2f} s ({args.tokens / t_plain:8.1f} tokens/s)")

    same = np.array_equal(cached, plain)
    print(f"same tokens: {same}")
    print(f"speed-up: {t_plain / t_cached:.1f}x (target >= 5x)")
    if not same:
        raise SystemExit("cached and uncached generation disagree")


if __name__ == "__main__":
    main()
