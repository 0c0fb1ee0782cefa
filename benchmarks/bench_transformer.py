"""Forward + loss + backward of the paper's base encoder-decoder, npformer vs torch.nn.Transformer.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/bench_transformer.py
    (options: --pairs 15 --warmup 2 --threads N; a smoke test: --pairs 1 --warmup 0)

Both models: d_model 512, 8 heads, d_ff 2048, 6 + 6 layers, dropout 0.1 (training mode), a
shared 37,000-token vocabulary whose table is also the pre-softmax projection (paper 3.4),
sinusoidal positions, final LayerNorms on both stacks (torch.nn.Transformer always has them,
so npformer gets them too: the same work), float32, batch of 8 x 32 source and target tokens
with some right padding (masks in both). One step = forward, cross-entropy (pad ignored) and
backward for every parameter; no optimizer; inside ``workspace.keep_heap()`` as the trainer runs its
steps (process-wide, so torch's side too). After --warmup untimed rounds, --pairs timed pairs:
one step of each back to back, the order swapped from one pair to the next (``_common.paired``);
each side's median, the median per-pair ratio npformer / torch with its interquartile range, the
ratio by which side ran first, and the verdict (faster only when the upper quartile is below 1).
numpy's BLAS and torch run on --threads threads each (default: one per physical core).

Parity (exit status 1 on a miss, naming the worst parameter): npformer's weights are copied into
torch (keys through npformer's own mapping, ``npformer.interop.torch._key_to_torch``, into torch's
own module tree, strictly). With dropout off (eval mode) and the same batch, one step of each:
- float32, the timed models: the losses agree within 1e-4, and every parameter's gradient within
  1e-3 relative, ||npformer - torch|| / ||torch||. Not 1e-4: torch's own float32 gradients are
  that far from exact here (1.1e-4 to 4.5e-4 from the float64 gradient in the FFNs' first layers,
  where npformer's float32 ones are within 1.6e-5; measured, --threads 1);
- float64, the same weights cast on both sides (float64 rounding is 1e-16, so only different work
  can miss): the losses within 1e-6 (measured 1.6e-9), and every parameter's gradient within 1e-4
  relative, max |npformer - torch| / max |torch| (measured 8e-9).
Every torch parameter must get an npformer gradient. So the timed step is the same work on both
sides, dropout aside.

GFLOP/s counts the matrix products with weights only, 6 FLOPs per weight per position it touches
(2 forward, 2 for the input gradient, 2 for the weight gradient): the encoder's weights at every
source position, the decoder's at every target position, and the tied (V, E) table as the
output projection at every target position (its embedding lookups are not products). Padded
positions count: both sides compute them. The attention scores and weighted sums (about 1% here
at 32 positions), softmax, LayerNorm and dropout are left out, so both rates are a little low.
The yardstick: the same run times float32 2048 x 2048 products in numpy and in torch (best of
5, before and after the steps, on the same threads) and prints each side's achieved rate as a
share of those peaks.
A full run takes about a minute (a pair took about 1.6 s on the reference machine of docs/performance.md).
"""
from __future__ import annotations

import argparse
import copy
import math

import numpy as np
import torch

from _common import (
    add_pairs_args,
    add_threads_arg,
    base_model_and_batch,
    check,
    paired,
    print_paired,
    print_setup,
    set_threads,
    sgemm_peak,
)
from npformer.interop.torch import _key_to_torch
from npformer.models import Transformer
from npformer.ops import kernels, workspace


def eval_step(model, ref, src, tgt_in, tgt_out) -> tuple[float, dict, float, dict]:
    """One forward, loss and backward of each side in eval mode (dropout off), the same batch:
    (npformer loss, its gradients, torch loss, torch's parameters by name, .grad set)."""
    model.eval(), ref.eval()
    np_loss, np_grads = model.loss(src, tgt_in, tgt_out)
    for p in ref.parameters():
        p.grad = None
    t_loss = ref(*(torch.tensor(a) for a in (src, tgt_in, tgt_out)))
    t_loss.backward()                      # with grad on: torch's inference fast path would differ in work
    return np_loss, np_grads, t_loss.item(), dict(ref.named_parameters())


def check_grads(label: str, np_grads: dict, t_params: dict, torch_key, tol: float, norm: bool) -> None:
    """Every parameter's gradient on both sides, relative: ||npformer - torch|| / ||torch|| (Frobenius)
    when ``norm``, else max |npformer - torch| / max |torch|. The worst parameter is named; exit 1
    above ``tol``, or when a torch parameter gets no npformer gradient."""
    missing = sorted(set(t_params) - {torch_key(k) for k in np_grads})
    if missing:
        check(f"{label}: torch parameters without an npformer gradient ({', '.join(missing[:3])} ...)",
              len(missing), 0)
    rel = {}
    for k, g in np_grads.items():
        g, tg = g.astype(np.float64), t_params[torch_key(k)].grad.numpy().astype(np.float64)
        if norm:
            rel[k] = float(np.linalg.norm(g - tg) / max(float(np.linalg.norm(tg)), 1e-300))
        else:
            rel[k] = float(np.abs(g - tg).max() / max(float(np.abs(tg).max()), 1e-300))
    worst = max(rel, key=rel.get)
    what = "||npformer - torch|| / ||torch||" if norm else "max |npformer - torch| / max |torch|"
    check(f"{label}, {len(rel)} parameters, worst {what}: {worst}", rel[worst], tol)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_pairs_args(ap, pairs=15, warmup=2)
    add_threads_arg(ap)
    ap.add_argument("--kernels-pairs", type=int, default=0, metavar="N",
                    help="then N pairs of npformer's step on its kernels against NPFORMER_KERNELS=numpy (default 0)")
    args = ap.parse_args()

    threads = set_threads(args.threads, torch)
    print_setup(torch)
    model, cfg, src, tgt_in, tgt_out, V, PAD = base_model_and_batch()
    B, S, T = *src.shape, tgt_in.shape[1]

    # -- the same model in torch ------------------------------------------------------------------
    class TorchSeq2Seq(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.ModuleDict({"tok": torch.nn.Embedding(V, cfg.d_model)})    # npformer's keys
            self.transformer = torch.nn.Transformer(cfg.d_model, cfg.n_heads, cfg.n_encoder_layers,
                                                    cfg.n_decoder_layers, cfg.d_ff, cfg.dropout,
                                                    batch_first=True)
            pe = model.embed.positions(max(S, T), 0, np.float32)           # the same sinusoids
            self.register_buffer("pe", torch.tensor(pe), persistent=False)

        def forward(self, src, tgt, tgt_out):
            scale = math.sqrt(cfg.d_model)
            # the paper's dropout on the embedding sums (torch.nn.Transformer drops inside its layers only)
            x = torch.nn.functional.dropout(self.embed.tok(src) * scale + self.pe[: src.shape[1]], cfg.dropout,
                                            self.training)                 # (B, S, E)
            y = torch.nn.functional.dropout(self.embed.tok(tgt) * scale + self.pe[: tgt.shape[1]], cfg.dropout,
                                            self.training)                 # (B, T, E)
            t = tgt.shape[1]
            future = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
            h = self.transformer(x, y, tgt_mask=future, src_key_padding_mask=src == PAD,
                                 tgt_key_padding_mask=tgt == PAD, memory_key_padding_mask=src == PAD)
            logits = h @ self.embed.tok.weight.T                           # tied projection
            return torch.nn.functional.cross_entropy(logits.reshape(-1, V), tgt_out.reshape(-1),
                                                     ignore_index=PAD)

    def torch_key(k: str) -> str:
        """npformer's key -> this torch module's: its stacks sit under ``transformer.``"""
        return k if k.startswith("embed.") else "transformer." + _key_to_torch(k)

    ref = TorchSeq2Seq()
    ref.load_state_dict({torch_key(k): torch.tensor(v) for k, v in model.state_dict().items()}, strict=True)
    n_params = model.num_parameters()
    check("parameter count, torch - npformer", abs(sum(p.numel() for p in ref.parameters()) - n_params), 0)

    # -- parity: the same weights and batch give the same loss and gradients (eval mode: no dropout)
    np_loss, np_grads, t_loss, t_params = eval_step(model, ref, src, tgt_in, tgt_out)
    print(f"same weights and batch, eval mode, float32: loss npformer {np_loss:.8g}  torch {t_loss:.8g}")
    check("float32 eval-mode loss, |npformer - torch|", abs(np_loss - t_loss), 1e-4)
    check_grads("float32 gradients", np_grads, t_params, torch_key, 1e-3, norm=True)
    del np_grads, t_params
    # the same weights in float64, where rounding is 1e-16: only different work can miss 1e-4
    model64 = Transformer(cfg, rng=0, dtype=np.float64)
    model64.load_state_dict({k: v.astype(np.float64) for k, v in model.state_dict().items()})
    ref64 = copy.deepcopy(ref).double()
    np_loss, np_grads, t_loss, t_params = eval_step(model64, ref64, src, tgt_in, tgt_out)
    check("float64 eval-mode loss, |npformer - torch|", abs(np_loss - t_loss), 1e-6)
    check_grads("float64 gradients", np_grads, t_params, torch_key, 1e-4, norm=False)
    del model64, ref64, np_grads, t_params
    for p in ref.parameters():
        p.grad = None
    ts, tt, to = (torch.tensor(a) for a in (src, tgt_in, tgt_out))
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
    with workspace.keep_heap():              # as the trainer runs its steps (process-wide: torch's side too)
        res = paired({"npformer": np_step, "torch": torch_step}, args.pairs, warmup=args.warmup, settle=args.settle)
    peaks.append(sgemm_peak())
    t_peaks.append(sgemm_peak(torch=torch))
    peak, t_peak = max(peaks), max(t_peaks)

    # FLOPs of the products with weights, 6 per weight per position (see the docstring)
    sd = model.state_dict()
    p_enc = sum(v.size for k, v in sd.items() if k.startswith("encoder."))
    p_dec = sum(v.size for k, v in sd.items() if k.startswith("decoder."))
    flops = 6 * (p_enc * B * S + (p_dec + V * cfg.d_model) * B * T)

    print(f"base Transformer forward + loss + backward, batch {B} x {S} source / {T} target positions, "
          f"shared vocab {V}, float32, {n_params:,} parameters; {args.pairs} pairs, order swapped each pair, "
          f"after {args.warmup} warm-up round(s); numpy's BLAS and torch on {threads} thread(s)")
    med = print_paired(res)["medians"]
    print(f"  work per step: {flops / 1e9:.1f} GFLOP = 6 x ({p_enc:,} encoder weights x {B * S} source positions "
          f"+ ({p_dec:,} decoder + {V * cfg.d_model:,} output-projection weights) x {B * T} target positions)")
    print(f"  sgemm peak, float32 2048 x 2048 products in this run (best of 5, before and after the steps): "
          f"numpy {peak:.0f} GFLOP/s, torch {t_peak:.0f} GFLOP/s")
    for k, t in med.items():
        print(f"  {k:<24} {flops / t / 1e9:9.1f} GFLOP/s (median step), {flops / t / 1e9 / peak:6.1%} of numpy's "
              f"sgemm peak, {flops / t / 1e9 / t_peak:6.1%} of torch's")
    if args.kernels_pairs:
        # the same step on this process's kernel setting against the NumPy references alone, paired
        print(f"\nnpformer's step on its kernels ({kernels.summary()}) against the NumPy references alone:")

        def numpy_step():  # type: ignore[no-untyped-def]
            with kernels.use_kernels("numpy"):
                return np_step()

        with workspace.keep_heap():
            res2 = paired({"kernels": np_step, "numpy references": numpy_step}, args.kernels_pairs,
                          warmup=args.warmup, settle=args.settle)
        print_paired(res2)


if __name__ == "__main__":
    main()
