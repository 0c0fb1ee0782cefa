"""A training step of the small decoder-only language models the demos train, npformer vs torch.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/bench_small.py
    (options: --pairs 15 --warmup 3 --threads N --vocab 96; a smoke test: --pairs 1 --warmup 0)

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

float32, dropout 0.1 in training mode on both sides, inside ``workspace.keep_heap()`` as the
trainer runs its steps (glibc's malloc keeps the freed memory; process-wide, so torch's side runs
with it too). Per size, after --warmup untimed rounds,
--pairs timed pairs: one step of each back to back, the order swapped from one pair to the next
(``_common.paired``); each side's median, the median per-pair ratio npformer / torch with its
interquartile range, the ratio by which side ran first, and the verdict (faster only when the
upper quartile is below 1). numpy's BLAS and torch run on --threads threads each (default: one
per physical core).

Parity, per size, before timing (exit status 1 on a miss), with dropout off (eval mode) and the
same starting weights and batch:
- the parameter keys: npformer's, through its own mapping to torch's names
  (``npformer.interop.torch._key_to_torch``), must be exactly the keys of the twin's structure as
  torch itself names them (torch.nn.TransformerEncoderLayer and LayerNorm, built here, not by
  npformer), and so must the twin's;
- float32: the losses agree within 1e-4, and after one Adam step each the parameters agree within
  1e-6 on every element whose two gradients exceed 1000 x eps = 1e-6 and have the same sign. The
  first Adam step moves such an element by lr x g / (|g| + eps) = lr (1 +- 1e-3) on both sides,
  so only float32 rounding of the parameter (measured 1.5e-8) separates them, and a wrong update
  misses by far: without Adam's bias correction such an element moves by lr (1 - 0.9) /
  sqrt(1 - 0.98) = 0.71 lr, 2.9e-4 off; with a sign error, 2e-3 off. The elements left out have
  gradients that are pure rounding (the key bias's is zero in exact arithmetic, since softmax
  ignores a constant added to every key) and move by up to lr in directions the rounding picks;
  they must be at most 1% of the elements (measured 0.2%: the key biases and a few more), so that
  a wrong gradient cannot empty the comparison;
- float64, where that rounding is 1e-16: the losses and every element of every parameter after
  the Adam step within 1e-9.
Where the target is out of reach, the bound: per size, the products-only floor. Every matrix product
of one npformer step (each ``np.matmul`` call: the products with the weights and the attention's
batched ones, their operands' shapes, dtypes and layouts, transposed and strided views included,
recorded in a step after the timing) is timed alone, in order, best of 3 on the same threads; the
floor is that time over torch's median step. npformer's step cannot go below its products, so a floor
above 0.85 puts 0.85x out of reach at that size whatever the rest costs; the floor over npformer's own
median step is printed too (the share of its step that is products).
A full run takes one to two minutes.
"""
from __future__ import annotations

import argparse
import sys
from functools import partial

import numpy as np
import torch
import torch.nn.functional as F

import npformer
from _common import (
    MIN_PAIRS,
    SMALL_ADAM,
    SMALL_SIZES,
    add_pairs_args,
    add_threads_arg,
    check,
    matmul_signature,
    paired,
    print_paired,
    print_setup,
    products_alone,
    set_threads,
    small_lm,
    small_step,
)
from npformer.interop.torch import _key_to_torch as torch_key  # the FFN sits under ``ffn.`` in npformer only
from npformer.ops import workspace
from npformer.train import Adam


def torch_names(d: int, layers: int) -> set[str]:
    """The twin's state-dict keys as torch names them: its embeddings (``embed.tok``, ``embed.pos``)
    and a pre-LN torch.nn.TransformerEncoder with a final LayerNorm under ``blocks.``, built here
    from torch's own classes (on the meta device: names and shapes, no memory)."""
    with torch.device("meta"):
        layer = torch.nn.TransformerEncoderLayer(d, 4, 4 * d, batch_first=True, norm_first=True)
        stack = torch.nn.TransformerEncoder(layer, layers, norm=torch.nn.LayerNorm(d), enable_nested_tensor=False)
    return {"embed.tok.weight", "embed.pos.weight"} | {f"blocks.{k}" for k in stack.state_dict()}


def check_keys(label: str, got: set[str], want: set[str]) -> None:
    """Exit 1, naming a few keys, when ``got`` is not exactly ``want``."""
    missing, extra = sorted(want - got), sorted(got - want)
    if missing or extra:
        print(f"{label}: missing {missing[:4]}, not among torch's names {extra[:4]}", file=sys.stderr)
    check(label, len(missing) + len(extra), 0)


def make_pair(d: int, layers: int, t: int, vocab: int, dtype, keys: bool = False):
    """The npformer model and its torch twin with the same weights, and an Adam for each; with
    ``keys``, check both models' keys against torch's own names first."""
    model = small_lm(d, layers, t, vocab, dtype)
    if keys:
        want = torch_names(d, layers)
        check_keys("npformer's keys through _key_to_torch vs torch's names, keys that differ",
                   set(map(torch_key, model.state_dict())), want)
    ref = npformer.to_torch(model)
    if keys:
        check_keys("the torch twin's keys vs torch's names, keys that differ", set(ref.state_dict()), want)
    opt = Adam(model.state_dict(), **SMALL_ADAM)
    topt = torch.optim.Adam(ref.parameters(), **SMALL_ADAM)
    return model, ref, opt, topt


def torch_step(ref, topt, xt, yt, vocab):
    topt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(ref(xt).reshape(-1, vocab), yt.reshape(-1))
    loss.backward()
    topt.step()
    return loss.item()


def parity(d, layers, t, vocab, x, y, dtype, tol_loss, tol_param) -> None:
    """Same weights, same batch, dropout off: equal losses, and equal parameters after one Adam step
    (float32: where the gradients are above rounding; see the docstring)."""
    model, ref, opt, topt = make_pair(d, layers, t, vocab, dtype, keys=dtype == np.float32)
    model.eval(), ref.eval()
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    name = np.dtype(dtype).name
    np_loss, grads = model.loss(x, y)
    grads = {k: g.copy() for k, g in grads.items()}                      # kept past the step's scratch arrays
    opt.step(grads)
    t_loss = torch_step(ref, topt, xt, yt, vocab)
    check(f"{name} loss, |npformer - torch|", abs(np_loss - t_loss), tol_loss)
    tsd, tgrads = ref.state_dict(), {k: p.grad.numpy() for k, p in ref.named_parameters()}
    if dtype != np.float32:
        diff = max(float(np.abs(p - tsd[torch_key(k)].numpy()).max()) for k, p in model.state_dict().items())
        check(f"{name} parameters after one Adam step, max |npformer - torch|", diff, tol_param)
        return
    floor, diff, compared, total = 1000 * SMALL_ADAM["eps"], 0.0, 0, 0
    for k, p in model.state_dict().items():
        g, tg = grads[k], tgrads[torch_key(k)]
        above = (np.sign(g) == np.sign(tg)) & (np.minimum(np.abs(g), np.abs(tg)) > floor)
        compared, total = compared + int(above.sum()), total + above.size
        if above.any():
            diff = max(diff, float(np.abs(p - tsd[torch_key(k)].numpy())[above].max()))
    check(f"{name}: share of elements left out, whose gradients differ in sign or are under {floor:.0e}",
          1 - compared / total, 0.01)
    check(f"{name} parameters after one Adam step, on the other {compared:,} elements, max |npformer - torch|",
          diff, tol_param)


def products_floor(step, repeats: int = 3) -> tuple[float, int]:
    """(seconds, count): every np.matmul of one call of ``step``, recorded (``matmul_signature``), then
    timed alone in order (``products_alone``), best of ``repeats``."""
    sigs: list = []
    matmul = np.matmul

    def recording(a, b, *args, **kwargs):  # type: ignore[no-untyped-def]
        sigs.append(matmul_signature(a, b))
        return matmul(a, b, *args, **kwargs)

    np.matmul = recording
    try:
        with workspace.keep_heap():
            step()
    finally:
        np.matmul = matmul
    return products_alone(sigs, repeats), len(sigs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_pairs_args(ap, pairs=15, warmup=3)
    ap.add_argument("--vocab", type=int, default=96, help="vocabulary size (default 96, characters)")
    add_threads_arg(ap)
    args = ap.parse_args()

    threads = set_threads(args.threads, torch)
    print_setup(torch)
    print(f"DecoderLM training step (forward + cross-entropy + backward + Adam), float32, dropout 0.1, "
          f"vocab {args.vocab}; per size {args.pairs} pairs, order swapped each pair, after {args.warmup} warm-up "
          "round(s); "
          f"numpy's BLAS and torch on {threads} thread(s)")
    rng = np.random.default_rng(0)
    ratios = []
    for d, layers, b, t in SMALL_SIZES:
        seq = rng.integers(0, args.vocab, (b, t + 1))                        # (B, T + 1)
        x, y = seq[:, :-1].copy(), seq[:, 1:].copy()                         # (B, T) each
        print(f"\nd_model {d}, {layers} layers, 4 heads, d_ff {4 * d}, batch {b} x {t} tokens")
        parity(d, layers, t, args.vocab, x, y, np.float32, 1e-4, 1e-6)
        parity(d, layers, t, args.vocab, x, y, np.float64, 1e-9, 1e-9)

        model, ref, opt, topt = make_pair(d, layers, t, args.vocab, np.float32)
        model.train(), ref.train()
        torch.manual_seed(1)
        sides = {"npformer": partial(small_step, model, opt, x, y, np.random.default_rng(1)),
                 "torch": partial(torch_step, ref, topt, torch.from_numpy(x), torch.from_numpy(y), args.vocab)}
        with workspace.keep_heap():          # as the trainer runs its steps (process-wide: torch's side too)
            res = paired(sides, args.pairs, warmup=args.warmup, settle=args.settle)
        print(f"  {model.num_parameters():,} parameters")
        summary = print_paired(res)
        floor = products_floor(sides["npformer"])
        med = summary["medians"]
        print(f"  products-only floor: the step's {floor[1]} products alone {floor[0] * 1e3:.2f} ms (best of 3): "
              f"{floor[0] / med['torch']:.2f} of torch's median step, {floor[0] / med['npformer']:.2f} of npformer's")
        ratios.append(((d, layers, b, t), summary | {"floor": floor[0] / med["torch"]}))

    print("\nsummary, npformer / torch time per step, median of the per-pair ratios (IQR), verdict"
          + (":" if args.pairs >= MIN_PAIRS else f" (only {args.pairs} pairs: a smoke test, not a claim):"))
    for (d, layers, b, t), s in ratios:
        first = ", ".join(f"{k} first {m:.2f}" for k, (m, _) in s["by_first"].items())
        print(f"  d_model {d:>3}, {layers} layers, {b:>2} x {t:<3} tokens: {s['median']:.2f}x "
              f"({s['q1']:.2f}-{s['q3']:.2f}), {s['verdict']}; {first}; products-only floor {s['floor']:.2f}")


if __name__ == "__main__":
    main()
