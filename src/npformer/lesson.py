"""The lesson's four demonstrations, run through npformer's own functions, each followed by one
step further. ``npformer lesson [--section N]`` prints them.

The lesson's printed lines are reproduced digit for digit: section 2 draws from
``default_rng(0)`` in exactly the lesson's order (q, then keys, for d = 4, 64, 1024) and takes a
softmax over one vector of scores, section 3 draws x and then the noise, section 4 draws X and
then the permutation. The "one step further" parts use their own generators, so they never
shift the lesson's numbers.
"""
from __future__ import annotations

import numpy as np

from .functional import attention
from .nn import merge_heads, split_heads
from .ops import causal_mask, layernorm_forward, sinusoidal_positions, softmax_forward

SECTIONS = {
    1: "Attention over three hand-made tokens",
    2: "Why divide by the square root of d?",
    3: "Many heads, and a block around them",
    4: "Attention does not know the order",
}


def _header(n: int, out) -> None:
    title = f"{n}. {SECTIONS[n]}"
    out(title)
    out("=" * len(title))


def _say(out, text: str) -> None:
    """Print a paragraph of prose line by line (each line of ``text`` is one printed line)."""
    for line in text.split("\n"):
        out(line)


MASK_NOTE = """\
Masked scores are set to -inf before the softmax, so exp gives exactly 0 there and the
remaining weights are renormalised: the first token can only attend to itself (weight 1)."""


def section_1(out=print) -> None:
    _header(1, out)
    tokens = ["red", "block", "box"]
    x = np.array([[1.0, 0.0, 0.0, 1.0],                               # (3, 4) hand-made token vectors
                  [1.0, 1.0, 0.0, 0.0],
                  [0.0, 0.0, 1.0, 0.0]])
    names = ", ".join(f'"{t}"' for t in tokens)
    out(f"Tokens {names} as hand-made 4-number vectors; self-attention: npformer.attention(X, X, X).")
    y, w = attention(x, x, x)                                         # (3, 4), (3, 3)
    out("attention weights (rows = who is looking, columns = who is looked at):")
    out(str(np.round(w, 2)))
    out(f"each row sums to: {np.round(w.sum(axis=1), 2).tolist()}")
    out(f"output shape: {y.shape}")
    out("")
    out("One step further: a causal mask (causal=True), as a decoder uses so that no token reads ahead.")
    _, wc = attention(x, x, x, causal=True)                           # (3, 3)
    future = ~causal_mask(3, 3)                                       # (3, 3) True above the diagonal
    out("causal attention weights:")
    out(str(np.round(wc, 2)))
    sums = wc.sum(axis=1)
    out(f"each row still sums to: {np.round(sums, 2).tolist()} (largest gap to 1: {np.abs(sums - 1).max():.1e})")
    out(f"weight on future tokens (the {int(future.sum())} entries above the diagonal): "
        f"largest {wc[future].max()}, all exactly 0: {bool(np.all(wc[future] == 0))}")
    _say(out, MASK_NOTE)


SCALING_NOTE = """\
Without scaling, the dot products grow like sqrt(d) and the softmax puts almost all the
weight on one key: the mean biggest weight climbs toward 1. With scaling the scores keep
unit variance and the mean biggest weight stays about the same at every d (5 equal keys would give 0.2)."""


def section_2(out=print) -> None:
    _header(2, out)
    out("One query against 5 random keys; the biggest softmax weight with and without the 1/sqrt(d).")
    rng = np.random.default_rng(0)
    for d in (4, 64, 1024):
        q = rng.normal(size=d)                                        # (d,)
        keys = rng.normal(size=(5, d))                                # (5, d)
        raw, _ = softmax_forward(keys @ q)                            # (5,) softmax of the raw scores
        _, scaled = attention(q[None, :], keys, keys)                 # (1, 5) softmax(q k^T / sqrt(d))
        out(f"d = {d} | biggest weight without scaling: {round(float(raw.max()), 2)} "
            f"| with scaling: {round(float(scaled.max()), 2)}")
    out("")
    out("One step further: the same experiment averaged over 1,000 random draws per d.")
    rng = np.random.default_rng(1)
    out("      d | mean biggest weight, unscaled | scaled by 1/sqrt(d)")
    for d in (4, 16, 64, 256, 1024):
        q = rng.normal(size=(1000, 1, d))                             # (draws, 1, d)
        keys = rng.normal(size=(1000, 5, d))                          # (draws, 5, d)
        raw, _ = softmax_forward((q @ np.swapaxes(keys, 1, 2))[:, 0])  # (draws, 5)
        _, scaled = attention(q, keys, keys)                          # (draws, 1, 5)
        out(f"  {d:5d} | {raw.max(axis=-1).mean():29.3f} | {scaled.max(axis=-1).mean():19.3f}")
    _say(out, SCALING_NOTE)


EPS_PLACE_NOTE = """\
Note: npformer's layer norm is the paper's and torch.nn.LayerNorm's, (x - mean) / sqrt(var + eps);
the lesson's toy puts eps outside the square root, (x - mean) / (std + eps). On this block
(std near 1) the two outputs differ by at most {gap}; the table below shows where
the difference grows.
"""
EPS_NOTE = """\
Every token comes out with mean 0 (to rounding) and variance var / (var + eps): 1 whatever
the input's scale as long as the token's variance is far above eps = 1e-5. Once the variance
nears eps, eps takes over and the output shrinks, which is its job: a nearly constant token is
not blown up into noise. That is also where eps inside or outside the square root differ."""


def section_3(out=print) -> None:
    _header(3, out)
    rng = np.random.default_rng(0)
    n_tokens, d_model, n_heads = 6, 512, 8
    x = rng.normal(size=(n_tokens, d_model))                          # (T, E)
    heads = split_heads(x[None], n_heads)[0]                          # (H, T, D)
    out(f"one slice per head: {heads.shape}")
    merged = merge_heads(heads[None])[0]                              # (T, E)
    out(f"merged back: {merged.shape} | identical to the input: {bool(np.array_equal(merged, x))}")
    v = x + 0.1 * rng.normal(size=x.shape)                            # (T, E) residual + stand-in sub-layer
    ones, zeros = np.ones(d_model), np.zeros(d_model)
    block_out, _ = layernorm_forward(v.copy(), ones, zeros, eps=1e-5)  # (T, E)
    out(f"block output shape (same as input): {block_out.shape}")
    toy = (v - v.mean(axis=-1, keepdims=True)) / (v.std(axis=-1, keepdims=True) + 1e-5)
    _say(out, EPS_PLACE_NOTE.format(gap=f"{np.abs(block_out - toy).max():.1e}"))   # ends with a blank line
    out("One step further: layer norm (eps = 1e-5) of 6 tokens of 512 numbers, scale * (N(0, 1) + 3).")
    rng = np.random.default_rng(2)
    base = rng.normal(size=(n_tokens, d_model)) + 3.0                 # (T, E) shifted away from mean 0
    out("  input scale | output mean (largest |.|) | output variance per token | lesson's toy (eps outside)")
    for scale in (1e3, 10.0, 1.0, 0.1, 0.01, 0.001):
        v = scale * base                                              # (T, E)
        y, _ = layernorm_forward(v.copy(), ones, zeros, eps=1e-5)     # (T, E)
        toy = (v - v.mean(axis=-1, keepdims=True)) / (v.std(axis=-1, keepdims=True) + 1e-5)
        var, toy_var = y.var(axis=-1), toy.var(axis=-1)               # (T,), (T,)
        out(f"  {scale:>11g} | {np.abs(y.mean(axis=-1)).max():>25.1e} | {var.min():.6f} to {var.max():.6f}      "
            f"| {toy_var.min():.6f} to {toy_var.max():.6f}")
    _say(out, EPS_NOTE)


POSITIONS_INTRO = """\
One step further: add the paper's sinusoidal positions (sin on even, cos on odd dimensions)
to the tokens before attending, then shuffle the tokens again; the positions stay in place."""
POSITIONS_NOTE = """\
A token now carries where it stands, so moving it changes what it reads and what it returns:
the order of the input finally matters."""


def section_4(out=print) -> None:
    _header(4, out)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(5, 8))                                       # (T, E)
    perm = rng.permutation(5)                                         # (T,)
    y, _ = attention(x, x, x)                                         # (T, E)
    y_perm, _ = attention(x[perm], x[perm], x[perm])                  # (T, E)
    out(f"shuffling the tokens just shuffles the outputs: {np.allclose(y_perm, y[perm])}")
    out("")
    _say(out, POSITIONS_INTRO)
    pe = sinusoidal_positions(5, 8, dtype=np.float64)                 # (T, E)
    xp = x + pe                                                       # (T, E) token + its position
    xs = x[perm] + pe                                                 # (T, E) shuffled tokens, same positions
    yp, _ = attention(xp, xp, xp)                                     # (T, E)
    ys, _ = attention(xs, xs, xs)                                     # (T, E)
    same = np.allclose(ys, yp[perm])
    out(f"with positions, shuffling the tokens just shuffles the outputs: {same} "
        f"(outputs differ by up to {np.abs(ys - yp[perm]).max():.2f})")
    _say(out, POSITIONS_NOTE)


INTRO = """\
The lesson's four demonstrations, run through npformer's own functions;
each prints the lesson's lines, then goes one step further.
"""
RUNNERS = {1: section_1, 2: section_2, 3: section_3, 4: section_4}
STUDIES_INTRO = """\
The lesson's three misconceptions are claims about trained models; each is an experiment
(a table, a figure, and a sentence computed from the numbers, in a few minutes on a CPU):"""


def studies_pointer(out=print) -> None:
    """Where the misconceptions are tested: one ``npformer study`` command each, with its claim."""
    from .studies import STUDIES, get_study

    _say(out, STUDIES_INTRO)
    for name in STUDIES:
        out(f"  npformer study {name:<14} \"{get_study(name).claim}\"")


def run(section: int | None = None, out=print) -> None:
    """Print one section (1-4) or, with None, all four and then the pointer to ``npformer study``."""
    if section is not None and section not in RUNNERS:
        raise ValueError(f"--section must be 1, 2, 3 or 4, got {section}")
    if section is None:
        _say(out, INTRO)
    for n in ([section] if section is not None else sorted(RUNNERS)):
        if n != (section or 1):
            out("")
        RUNNERS[n](out)
    if section is None:
        out("")
        studies_pointer(out)
