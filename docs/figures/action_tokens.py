"""Draws docs/figures/action_tokens.png: how the gripper task's action tokenizer cuts a move axis into bins
(``npformer.sim.tokens.ActionTokenizer``, percentiles [-1, 1] as the expert's demonstrations give them), and
the round-trip error |decode(encode(x)) - x| over 20,001 evenly spaced values, for the task's default
number of bins and for 256 (RT-2's and OpenVLA's). Run from the repository's root:
python docs/figures/action_tokens.py"""
from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from npformer.data.gripper import GripperTask  # noqa: E402
from npformer.sim.tokens import ActionTokenizer  # noqa: E402

OUT = Path(__file__).with_name("action_tokens.png")
DEFAULT = GripperTask.Settings().action_bins

x = np.linspace(-1, 1, 20001)                                           # (n,)
moves = np.stack([x, np.zeros_like(x)], axis=1)                         # (n, 2)
fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
tok = ActionTokenizer(DEFAULT, [-1, -1], [1, 1])
back = tok.decode_moves(tok.encode_moves(moves))[:, 0]
ax = axes[0]
ax.plot(x, back, lw=1, label="decoded (bin centre)")
ax.plot(x, x, lw=0.6, ls="--", c="grey", label="identity")
for edge in np.linspace(-1, 1, DEFAULT + 1):
    ax.axvline(edge, c="k", lw=0.3, alpha=0.3)
ax.set(xlabel="dx (action units; x 0.08 of the table)", ylabel="decoded dx",
       title=f"{DEFAULT} bins: token = bin, decoded to its centre")
ax.legend(fontsize=8)
ax = axes[1]
for bins in sorted({DEFAULT, 256}):
    t = ActionTokenizer(bins, [-1, -1], [1, 1])
    err = np.abs(t.decode_moves(t.encode_moves(moves))[:, 0] - x)
    line, = ax.plot(x, err, lw=0.8, label=f"{bins} bins: max {err.max():.4f}")
    ax.axhline(1 / bins, c=line.get_color(), ls=":", lw=1)              # half a bin: (high - low) / (2 bins)
ax.set(xlabel="dx (action units)", ylabel="|round trip - dx|", title="round-trip error (dotted: half a bin)")
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(OUT, dpi=110)
print(OUT)
