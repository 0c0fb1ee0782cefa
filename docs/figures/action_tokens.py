"""Draws docs/figures/action_tokens.png: how the gripper task's action tokenizer cuts a move axis into bins
(``npformer.sim.tokens.ActionTokenizer``, percentiles -1 and 1, as the expert's demonstrations give them),
shown with 8 bins so that each can be seen, and the round-trip error |decode(encode(x)) - x| of the task's
default number of bins over 20,001 evenly spaced values (a zoom on [0, 0.05]; the title gives the largest
error over all of [-1, 1]). Run from the repository's root: python docs/figures/action_tokens.py"""
from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from npformer.data.gripper import GripperTask  # noqa: E402
from npformer.sim.tokens import ActionTokenizer  # noqa: E402

OUT = Path(__file__).with_name("action_tokens.png")
DEFAULT = GripperTask.Settings().action_bins
SHOWN = 8


def round_trip(bins: int, x: np.ndarray) -> np.ndarray:
    tok = ActionTokenizer(bins, [-1, -1], [1, 1])
    moves = np.stack([x, np.zeros_like(x)], axis=1)                     # (n, 2)
    return tok.decode_moves(tok.encode_moves(moves))[:, 0]              # (n,)


x = np.linspace(-1, 1, 20001)                                           # (n,)
fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
ax = axes[0]
ax.plot(x, round_trip(SHOWN, x), lw=1.5, label="decoded: the bin's centre")
ax.plot(x, x, lw=0.8, ls="--", c="grey", label="identity")
for i, edge in enumerate(np.linspace(-1, 1, SHOWN + 1)):
    ax.axvline(edge, c="k", lw=0.4, alpha=0.4)
    if i < SHOWN:
        ax.text(edge + 1 / SHOWN, -1.15, f"{i}", ha="center", fontsize=8)
ax.set(xlabel="dx, action units (1 = 0.08 of the table); numbers: the token", ylabel="decoded dx",
       ylim=(-1.25, 1.1), title=f"{SHOWN} bins, edges linspace(-1, 1, {SHOWN + 1})")
ax.legend(fontsize=8, loc="upper left")
ax = axes[1]
err = np.abs(round_trip(DEFAULT, x) - x)
zoom = (x >= 0) & (x <= 0.05)
ax.plot(x[zoom], err[zoom], lw=0.8)
ax.axhline(1 / DEFAULT, c="C3", ls=":", lw=1.2, label=f"half a bin = 1/{DEFAULT}")
ax.set(xlabel="dx, action units (a zoom on [0, 0.05])", ylabel="|decode(encode(dx)) - dx|",
       title=f"{DEFAULT} bins: largest round-trip error over [-1, 1] {err.max():.5f}")
ax.legend(fontsize=8, loc="lower right")
fig.tight_layout()
fig.savefig(OUT, dpi=110)
print(OUT, f"max error {err.max():.6f}, half a bin {1 / DEFAULT:.6f}")
