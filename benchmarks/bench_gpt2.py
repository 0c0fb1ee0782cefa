"""GPT-2 124M generation: npformer's CausalLM (KV cache) vs transformers' generate, greedy, same weights.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/bench_gpt2.py
    (options: --tokens 100 --prompt 20 --pairs 15 --threads N --layers 12 --dir DIR;
     a smoke test: --layers 2 --tokens 20 --pairs 3)

The model is GPT-2 124M's shape (12 layers, width 768, 12 heads, 1,024 positions, 50,257 tokens) with
random weights: transformers builds GPT2LMHeadModel from a seed and saves it with save_pretrained into
a temporary directory (or --dir, kept and reused when it already holds one), with a byte-level BPE
trained here (the prompt is token ids, so its size does not matter). npformer loads that directory
with ``CausalLM.load``; both sides then generate --tokens new tokens greedily from the same
--prompt random token ids, in float32, on the same --threads (numpy's BLAS via threadpoolctl,
torch.set_num_threads). transformers' generate runs under torch.no_grad with its KV cache, no end of
text (min_new_tokens = max_new_tokens).

Timing: benchmarks/_common.py's paired: --warmup untimed rounds, then --pairs pairs whose order
alternates, a rest of --settle seconds before each side; printed: each side's median, the median of the
per-pair ratios npformer / transformers with its interquartile range, the ratio by which side ran
first, and the verdict (docs/performance.md).

Parity (exit status 1 on a miss): random weights make near-ties, after which two correct greedy
decoders may part; so npformer's logits over transformers' prompt + tokens (teacher-forced) must
pick transformers' token at every step where npformer's top two logits (those same logits) differ by
more than 1e-3, and the tokens the two generated must agree up to the first such near-tie.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from _common import add_pairs_args, add_threads_arg, check, paired, print_paired, print_setup, set_threads


def build(path: Path, n_layer: int) -> None:
    """A random GPT-2 124M-shaped directory, saved by transformers, with a small trained tokenizer."""
    import torch
    from tokenizers import ByteLevelBPETokenizer
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=n_layer, n_embd=768, n_head=12, n_positions=1024, vocab_size=50257,
                     bos_token_id=None, eos_token_id=None)
    GPT2LMHeadModel(cfg).eval().save_pretrained(str(path))
    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator(["the cat sat on the mat and the dog ran far"] * 20, vocab_size=300,
                            show_progress=False)
    tok.save(str(path / "tokenizer.json"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=100, help="new tokens per generation (default 100)")
    ap.add_argument("--prompt", type=int, default=20, help="prompt length in tokens (default 20)")
    ap.add_argument("--layers", type=int, default=12, help="layers (default 12: GPT-2 124M)")
    ap.add_argument("--dir", type=Path, default=None, help="keep the model here (reused when present)")
    add_threads_arg(ap)
    add_pairs_args(ap, pairs=15, warmup=1)
    args = ap.parse_args()

    import torch
    from transformers import GPT2LMHeadModel

    from npformer.pretrained import CausalLM

    threads = set_threads(args.threads, torch)
    print_setup(torch)
    tmp = None
    if args.dir is None:
        tmp = tempfile.TemporaryDirectory()
        path = Path(tmp.name)
    else:
        path = args.dir
        path.mkdir(parents=True, exist_ok=True)
    if not (path / "model.safetensors").is_file():
        t0 = time.perf_counter()
        build(path, args.layers)
        print(f"built and saved GPT-2 ({args.layers} layers) with transformers in {time.perf_counter() - t0:.1f} s")
    ref = GPT2LMHeadModel.from_pretrained(str(path)).eval()
    t0 = time.perf_counter()
    lm = CausalLM.load(path)
    print(f"CausalLM.load: {time.perf_counter() - t0:.2f} s; {lm.config.n_layer} layers, width {lm.config.n_embd}, "
          f"{lm.config.n_head} heads, {lm.n_positions} positions, vocabulary {lm.vocab_size:,}; {threads} thread(s)")
    prompt = np.random.default_rng(1).integers(0, lm.vocab_size, size=args.prompt).tolist()
    n = args.tokens

    def ours() -> list[int]:
        return list(lm.generate(prompt, n))

    def theirs() -> list[int]:
        with torch.no_grad():
            out = ref.generate(torch.tensor([prompt]), max_new_tokens=n, min_new_tokens=n, do_sample=False,
                               pad_token_id=0, attention_mask=torch.ones(1, len(prompt), dtype=torch.long))
        return out[0, len(prompt):].tolist()

    sides = {"npformer": ours, "transformers": theirs}
    print(f"greedy generation of {n} tokens from a {len(prompt)}-token prompt:")
    res = paired(sides, args.pairs, warmup=args.warmup, settle=args.settle)
    print_paired(res, unit="s", width=13)
    for name, v in res.times.items():
        print(f"  {name:<13} {n / statistics.median(v):6.1f} tokens/s (median)")
    got = res.out

    # parity, on the last run's tokens
    hf_new = np.asarray(got["transformers"])
    full = np.asarray([prompt + hf_new.tolist()])
    logits = lm.logits(full[:, :-1])[0, len(prompt) - 1:]                # (n, V): step j predicts hf_new[j]
    top2 = np.sort(logits, axis=-1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > 1e-3
    print(f"parity: {int(clear.sum())} of {n} steps have top-two gaps over 1e-3")
    check("teacher-forced argmax differing from transformers' token (gap > 1e-3)",
          int((logits.argmax(-1) != hf_new)[clear].sum()), 0)
    agree = n if clear.all() else int(np.argmin(clear))
    check(f"generated tokens differing before the first near-tie (step {agree})",
          int((np.asarray(got["npformer"][:agree]) != hf_new[:agree]).sum()), 0)
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
