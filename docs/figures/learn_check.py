"""Draws docs/figures/learn_check.png: a real `npformer learn check` of a workbook in which a learner has
written softmax and attention, and forgot attention's scaling by 1/sqrt(d); the other exercises are
still the stubs. Run from the repository's root: python docs/figures/learn_check.py"""
import contextlib
import io
import os
import sys
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from npformer.cli import main  # noqa: E402

OUT = Path(__file__).with_name("learn_check.png")
SOFTMAX = """\
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)"""
ATTENTION = """\
    scores = q @ np.swapaxes(k, -1, -2)                 # forgot: / np.sqrt(q.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    top = scores.max(axis=-1, keepdims=True)
    e = np.exp(scores - np.where(np.isfinite(top), top, 0))
    total = e.sum(axis=-1, keepdims=True)
    weights = e / np.where(total > 0, total, 1)
    return weights @ v, weights"""


def run(*argv) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(list(argv))
    return rc, out.getvalue()


with tempfile.TemporaryDirectory() as tmp:
    os.chdir(tmp)
    assert run("learn", "init", "my-transformer")[0] == 0
    book = Path("my-transformer", "transformer.py")
    source = book.read_text()
    source = source.replace('    raise NotImplementedError("softmax")', SOFTMAX)
    source = source.replace('    raise NotImplementedError("attention")', ATTENTION)
    book.write_text(source)
    rc, text = run("learn", "check", "my-transformer")
assert rc == 1, "the workbook was meant to fail one exercise"
shown = "$ npformer learn check my-transformer\n" + text.rstrip("\n") + f"\n$ echo $?\n{rc}"
lines = shown.splitlines()
width = max(map(len, lines))
fig = plt.figure(figsize=(0.085 * width + 0.3, 0.19 * len(lines) + 0.2), dpi=110)
fig.patch.set_facecolor("#1e1e1e")
fig.text(0.02, 0.98, shown, family="monospace", fontsize=10, color="#e6e6e6", va="top", ha="left",
         parse_math=False)
fig.savefig(OUT, facecolor=fig.get_facecolor())
sys.stdout.write(shown + f"\nwrote {OUT}\n")
