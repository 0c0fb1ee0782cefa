"""A training step of the small decoder-only language models the demos train, npformer vs torch.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/bench_small.py
    (options: --steps 20 --warmup 3 --threads N --vocab 96; a smoke test: --steps 1 --warmup 0)

One step = forward, next-token cross-entropy, backward and an Adam update of every parameter:
``DecoderLM.loss`` then ``npformer.train.Adam.step`` against the same model through
``npformer.to_torch`` (torch.nn.TransformerEncoder layers, tied embedding), ``F.cross_entropy``,
``backward`` and ``torch.optim.Adam`` (its default implementation), with the same
hyper-parameters (lr 1e-3, betas (0.9, 0.98), eps 1e-9: npformer's defaults, the paper's 5.3).
Three sizes, each GPT-style as the demos' DecoderLM (pre-LN, learned positions, GELU, 4 heads,
d_ff = 4 d_model, a character vocabulary of --vocab tokens):

    d_model 64,  2 layers, batch 64 x 32 tokens
    d_model 128, 4 layers, batch 32 x 64 tokens
    d_model 256, 4 layers, batch 16 x 128 tokens

float32, dropout 0.1 in training mode on both sides. After --warmup untimed steps of each, the
two run alternately (npformer, torch, npformer, ...) for --steps steps each, per size; medians
and their ratio are reported. numpy's BLAS and torch run on --threads threads each (default:
one per physical core).

Parity, per size, before timing (exit status 1 on a miss), with dropout off (eval mode) and the
same starting weights and batch: the float32 losses agree within 1e-4, and after one Adam step
each every parameter agrees within 3e-4. That is loose on purpose: the first Adam step moves each
element by about lr = 1e-3 whatever the gradient's size, and some gradients are pure rounding (the
key bias's is zero in exact arithmetic, since softmax ignores a constant added to every key), so
their elements move by up to lr in directions the rounding picks. A wrong update (a sign, a
missing bias correction) still misses it. The same step in float64, where that rounding is 1e-16,
must agree within 1e-9 in the loss and every parameter.
A full run takes one to two minutes (2 min 15 s with 30 steps at load average 2.5).
"""
from __future__ import annotations

import argparse
from functools import partial

import numpy as np
import torch
import torch.nn.functional as F

import npformer
from _common import add_threads_arg, alternate, check, print_ratio, print_setup, print_times, set_threads
from npformer.interop.torch import _key_to_torch as torch_key  # the FFN sits under ``ffn.`` in npformer only
from npformer.models import DecoderLM, DecoderLMConfig
from npformer.train import Adam

SIZES = ((64, 2, 64, 32), (128, 4, 32, 64), (256, 4, 16, 128))       # d_model, layers, batch, tokens
LR, BETAS, EPS = 1e-3, (0.9, 0.98), 1e-9


def make_pair(d: int, layers: int, t: int, vocab: int, dtype):
    """The npformer model and its torch twin with the same weights, and an Adam for each."""
    cfg = DecoderLMConfig(vocab_size=vocab, d_model=d, n_heads=4, d_ff=4 * d, n_layers=layers, max_len=t,
                          dropout=0.1)
    model = DecoderLM(cfg, rng=0, dtype=dtype)
    ref = npformer.to_torch(model)
    if set(map(torch_key, model.state_dict())) != set(ref.state_dict()):
        raise SystemExit("MISMATCH: the torch twin's parameters are not npformer's")
    opt = Adam(model.state_dict(), lr=LR, betas=BETAS, eps=EPS)
    topt = torch.optim.Adam(ref.parameters(), lr=LR, betas=BETAS, eps=EPS)
    return model, ref, opt, topt


def np_step(model, opt, x, y, rng):
    loss, grads = model.loss(x, y, rng=rng)
    opt.step(grads)
    return loss


def torch_step(ref, topt, xt, yt, vocab):
    topt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(ref(xt).reshape(-1, vocab), yt.reshape(-1))
    loss.backward()
    topt.step()
    return loss.item()


def parity(d, layers, t, vocab, x, y, dtype, tol_loss, tol_param) -> None:
    """Same weights, same batch, dropout off: equal losses, and equal parameters after one Adam step."""
    model, ref, opt, topt = make_pair(d, layers, t, vocab, dtype)
    model.eval(), ref.eval()
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    name = np.dtype(dtype).name
    np_loss = np_step(model, opt, x, y, None)
    t_loss = torch_step(ref, topt, xt, yt, vocab)
    check(f"{name} loss, |npformer - torch|", abs(np_loss - t_loss), tol_loss)
    tsd = ref.state_dict()
    diff = max(float(np.abs(p - tsd[torch_key(k)].numpy()).max()) for k, p in model.state_dict().items())
    check(f"{name} parameters after one Adam step, max |npformer - torch|", diff, tol_param)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20, help="timed steps of each, per size (default 20)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps of each first (default 3)")
    ap.add_argument("--vocab", type=int, default=96, help="vocabulary size (default 96, characters)")
    add_threads_arg(ap)
    args = ap.parse_args()

    threads = set_threads(args.threads, torch)
    print_setup(torch)
    print(f"DecoderLM training step (forward + cross-entropy + backward + Adam), float32, dropout 0.1, "
          f"vocab {args.vocab}; {args.steps} alternating steps each after {args.warmup} warm-up step(s); "
          f"numpy's BLAS and torch on {threads} thread(s)")
    rng = np.random.default_rng(0)
    ratios = []
    for d, layers, b, t in SIZES:
        seq = rng.integers(0, args.vocab, (b, t + 1))                        # (B, T + 1)
        x, y = seq[:, :-1].copy(), seq[:, 1:].copy()                         # (B, T) each
        print(f"\nd_model {d}, {layers} layers, 4 heads, d_ff {4 * d}, batch {b} x {t} tokens")
        parity(d, layers, t, args.vocab, x, y, np.float32, 1e-4, 3e-4)
        parity(d, layers, t, args.vocab, x, y, np.float64, 1e-9, 1e-9)

        model, ref, opt, topt = make_pair(d, layers, t, args.vocab, np.float32)
        model.train(), ref.train()
        torch.manual_seed(1)
        sides = {"npformer": partial(np_step, model, opt, x, y, np.random.default_rng(1)),
                 "torch": partial(torch_step, ref, topt, torch.from_numpy(x), torch.from_numpy(y), args.vocab)}
        times, _ = alternate(sides, args.steps, warmup=args.warmup)
        print(f"  {model.num_parameters():,} parameters")
        med = print_times(times)
        ratios.append(((d, layers, b, t), print_ratio(med, "npformer", "torch")))

    print("\nsummary, npformer / torch time per step (median):")
    for (d, layers, b, t), r in ratios:
        print(f"  d_model {d:>3}, {layers} layers, {b:>2} x {t:<3} tokens: {r:.2f}x")


if __name__ == "__main__":
    main()
