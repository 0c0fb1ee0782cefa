"""Forward + loss + backward of the paper's base encoder-decoder, npformer vs torch.nn.Transformer.

Both models: d_model 512, 8 heads, d_ff 2048, 6 + 6 layers, dropout 0.1 (training mode), a
shared 37,000-token vocabulary whose table is also the pre-softmax projection (paper 3.4),
sinusoidal positions, final LayerNorms on both stacks (torch.nn.Transformer always has them,
so npformer gets them too: the same work), float32, batch of 8 x 32 source and target tokens
with some right padding (masks in both). One step = forward, cross-entropy (pad ignored) and
backward for every parameter; no optimizer. The two are timed alternately in one run after
warm-ups, and the medians are compared. npformer's weights are copied into torch and the two
eval-mode losses printed as a check that the work is the same.

    python benchmarks/bench_transformer.py [--steps 10] [--warmup 2] [--threads N]
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=10, help="timed steps of each (default 10)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps of each first (default 2)")
    ap.add_argument("--threads", type=int, default=None,
                    help="set OMP/OpenBLAS/MKL threads and torch threads (default: library defaults)")
    args = ap.parse_args()
    if args.threads:
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(args.threads)

    import numpy as np
    import torch

    from npformer.models import Transformer, TransformerConfig

    if args.threads:
        torch.set_num_threads(args.threads)
    B, S, T, V, PAD = 8, 32, 32, 37000, 0
    cfg = TransformerConfig(src_vocab_size=V, tgt_vocab_size=V, final_norm=True)
    rng = np.random.default_rng(0)
    model = Transformer(cfg, rng=rng)                                      # float32

    def batch(n, t):
        ids = rng.integers(1, V, (n, t))
        lengths = rng.integers(t * 3 // 4, t + 1, n)
        ids[np.arange(t)[None, :] >= lengths[:, None]] = PAD
        return ids

    src, tgt_in = batch(B, S), batch(B, T)
    tgt_out = np.roll(tgt_in, -1, axis=1)
    tgt_out[:, -1] = PAD

    # -- the same model in torch ------------------------------------------------------------------
    class TorchSeq2Seq(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(V, cfg.d_model)
            self.transformer = torch.nn.Transformer(cfg.d_model, cfg.n_heads, cfg.n_encoder_layers,
                                                    cfg.n_decoder_layers, cfg.d_ff, cfg.dropout,
                                                    batch_first=True)
            pe = model.embed.positions(max(S, T), 0, np.float32)           # the same sinusoids
            self.register_buffer("pe", torch.tensor(pe), persistent=False)

        def forward(self, src, tgt, tgt_out):
            scale = math.sqrt(cfg.d_model)
            # the paper's dropout on the embedding sums (torch.nn.Transformer drops inside its layers only)
            x = torch.nn.functional.dropout(self.embed(src) * scale + self.pe[: src.shape[1]], cfg.dropout,
                                            self.training)                 # (B, S, E)
            y = torch.nn.functional.dropout(self.embed(tgt) * scale + self.pe[: tgt.shape[1]], cfg.dropout,
                                            self.training)                 # (B, T, E)
            t = tgt.shape[1]
            future = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
            h = self.transformer(x, y, tgt_mask=future, src_key_padding_mask=src == PAD,
                                 tgt_key_padding_mask=tgt == PAD, memory_key_padding_mask=src == PAD)
            logits = h @ self.embed.weight.T                               # tied projection
            return torch.nn.functional.cross_entropy(logits.reshape(-1, V), tgt_out.reshape(-1),
                                                     ignore_index=PAD)

    ref = TorchSeq2Seq()
    state = {}
    for k, v in model.state_dict().items():
        if k == "embed.tok.weight":
            state["embed.weight"] = torch.tensor(v)
        else:
            state["transformer." + k.replace(".ffn.linear", ".linear")] = torch.tensor(v)
    ref.load_state_dict(state, strict=True)
    assert sum(p.numel() for p in ref.parameters()) == model.num_parameters()

    ts, tt, to = (torch.tensor(a) for a in (src, tgt_in, tgt_out))
    model.eval(), ref.eval()
    np_loss = model.loss(src, tgt_in, tgt_out)[0]
    t_loss = ref(ts, tt, to).item()        # with grad on: torch's inference fast path would differ in work
    model.train(), ref.train()

    step_rng = np.random.default_rng(1)
    torch.manual_seed(1)

    def np_step():
        model.loss(src, tgt_in, tgt_out, rng=step_rng)

    def torch_step():
        for p in ref.parameters():
            p.grad = None
        ref(ts, tt, to).backward()

    times = {"npformer": [], "torch": []}
    for i in range(args.warmup + args.steps):
        for name, fn in (("npformer", np_step), ("torch", torch_step)):
            t0 = time.perf_counter()
            fn()
            dt = time.perf_counter() - t0
            if i >= args.warmup:
                times[name].append(dt)

    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"base Transformer forward+backward, batch {B} x {S} source / {T} target tokens, shared vocab {V}, "
          f"float32, {model.num_parameters():,} parameters")
    print(f"numpy {np.__version__}, torch {torch.__version__} (threads: {torch.get_num_threads()}), "
          f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, {args.steps} steps after {args.warmup} warm-ups")
    print(f"same weights, eval-mode loss: npformer {np_loss:.6f}  torch {t_loss:.6f}")
    for k in ("npformer", "torch"):
        print(f"{k:>9}: median {med[k] * 1000:8.1f} ms/step  (min {min(times[k]) * 1000:.1f}, "
              f"max {max(times[k]) * 1000:.1f})")
    print(f"ratio npformer / torch: {med['npformer'] / med['torch']:.2f}x")


if __name__ == "__main__":
    main()
