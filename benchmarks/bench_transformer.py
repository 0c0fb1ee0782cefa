"""Forward + loss + backward of the paper's base encoder-decoder, npformer vs torch.nn.Transformer.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/bench_transformer.py
    (options: --steps 10 --warmup 2 --threads N; a smoke test: --steps 1 --warmup 0)

Both models: d_model 512, 8 heads, d_ff 2048, 6 + 6 layers, dropout 0.1 (training mode), a
shared 37,000-token vocabulary whose table is also the pre-softmax projection (paper 3.4),
sinusoidal positions, final LayerNorms on both stacks (torch.nn.Transformer always has them,
so npformer gets them too: the same work), float32, batch of 8 x 32 source and target tokens
with some right padding (masks in both). One step = forward, cross-entropy (pad ignored) and
backward for every parameter; no optimizer. After --warmup untimed steps of each, the two run
alternately (npformer, torch, npformer, ...) for --steps steps each; medians and their ratio are
reported. numpy's BLAS and torch run on --threads threads each (default: one per physical core).

Parity (exit status 1 on a miss): npformer's weights are copied into torch, and the two
eval-mode losses (dropout off, the same batch) must agree within 1e-4.

GFLOP/s counts the matrix products with weights only, 6 FLOPs per weight per position it touches
(2 forward, 2 for the input gradient, 2 for the weight gradient): the encoder's weights at every
source position, the decoder's at every target position, and the tied (V, E) table as the
output projection at every target position (its embedding lookups are not products). Padded
positions count: both sides compute them. The attention scores and weighted sums (about 1% here
at 32 positions), softmax, LayerNorm and dropout are left out, so both rates are a little low.
The yardstick: the same run times float32 2048 x 2048 products in numpy and in torch (best of
3, before and after the steps, on the same threads) and prints each side's achieved rate as a
share of those peaks.
A full run takes about a minute (a step of each took about 2 s on the README's machine).
"""
from __future__ import annotations

import argparse
import math

import numpy as np
import torch

from _common import (
    add_threads_arg,
    alternate,
    check,
    print_ratio,
    print_setup,
    print_times,
    set_threads,
    sgemm_peak,
)
from npformer.models import Transformer, TransformerConfig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10, help="timed steps of each (default 10)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps of each first (default 2)")
    add_threads_arg(ap)
    args = ap.parse_args()

    threads = set_threads(args.threads, torch)
    print_setup(torch)
    B, S, T, V, PAD = 8, 32, 32, 37000, 0
    cfg = TransformerConfig(src_vocab_size=V, tgt_vocab_size=V, final_norm=True)
    rng = np.random.default_rng(0)
    model = Transformer(cfg, rng=rng)                                      # float32

    def batch(n, t):
        ids = rng.integers(1, V, (n, t))                                   # (n, t)
        lengths = rng.integers(t * 3 // 4, t + 1, n)                       # (n,)
        ids[np.arange(t)[None, :] >= lengths[:, None]] = PAD
        return ids

    src, tgt_in = batch(B, S), batch(B, T)                                 # (B, S), (B, T)
    tgt_out = np.roll(tgt_in, -1, axis=1)                                  # (B, T)
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
    n_params = model.num_parameters()
    check("parameter count, torch - npformer", abs(sum(p.numel() for p in ref.parameters()) - n_params), 0)

    # -- parity: the same weights and batch give the same loss (eval mode: no dropout) -------------
    ts, tt, to = (torch.tensor(a) for a in (src, tgt_in, tgt_out))
    model.eval(), ref.eval()
    np_loss = model.loss(src, tgt_in, tgt_out)[0]
    t_loss = ref(ts, tt, to).item()        # with grad on: torch's inference fast path would differ in work
    print(f"same weights and batch, eval-mode loss: npformer {np_loss:.8g}  torch {t_loss:.8g}")
    check("eval-mode loss, |npformer - torch|", abs(np_loss - t_loss), 1e-4)
    model.train(), ref.train()

    # -- timing: training mode (dropout on), forward + loss + backward -----------------------------
    step_rng = np.random.default_rng(1)
    torch.manual_seed(1)

    def np_step():
        return model.loss(src, tgt_in, tgt_out, rng=step_rng)[0]

    def torch_step():
        for p in ref.parameters():
            p.grad = None
        loss = ref(ts, tt, to)
        loss.backward()
        return loss.item()

    peaks = [sgemm_peak()]                                                 # before and after the steps
    t_peaks = [sgemm_peak(torch=torch)]
    times, _ = alternate({"npformer": np_step, "torch": torch_step}, args.steps, warmup=args.warmup)
    peaks.append(sgemm_peak())
    t_peaks.append(sgemm_peak(torch=torch))
    peak, t_peak = max(peaks), max(t_peaks)

    # FLOPs of the products with weights, 6 per weight per position (see the docstring)
    sd = model.state_dict()
    p_enc = sum(v.size for k, v in sd.items() if k.startswith("encoder."))
    p_dec = sum(v.size for k, v in sd.items() if k.startswith("decoder."))
    flops = 6 * (p_enc * B * S + (p_dec + V * cfg.d_model) * B * T)

    print(f"base Transformer forward + loss + backward, batch {B} x {S} source / {T} target positions, "
          f"shared vocab {V}, float32, {n_params:,} parameters; {args.steps} alternating steps each after "
          f"{args.warmup} warm-up step(s); numpy's BLAS and torch on {threads} thread(s)")
    med = print_times(times)
    print(f"  work per step: {flops / 1e9:.1f} GFLOP = 6 x ({p_enc:,} encoder weights x {B * S} source positions "
          f"+ ({p_dec:,} decoder + {V * cfg.d_model:,} output-projection weights) x {B * T} target positions)")
    print(f"  sgemm peak, float32 2048 x 2048 products in this run (best of 3, before and after the steps): "
          f"numpy {peak:.0f} GFLOP/s, torch {t_peak:.0f} GFLOP/s")
    for k, t in med.items():
        print(f"  {k:<24} {flops / t / 1e9:9.1f} GFLOP/s (median step), {flops / t / 1e9 / peak:6.1%} of numpy's "
              f"sgemm peak, {flops / t / 1e9 / t_peak:6.1%} of torch's")
    print_ratio(med, "npformer", "torch")

if __name__ == "__main__":
    main()
