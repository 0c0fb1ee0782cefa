"""``npformer attention DIR TEXT --out FIG.png``: draw every layer's and head's attention.

    npformer attention runs/dates "Sunday, 29 November 2026" --out dates_attention.png

An encoder-decoder run first translates TEXT greedily, then draws the encoder self-attention
(source x source), the decoder self-attention (output x output so far) and the cross-attention
(output x source) from one forward pass over the source and that output. A language-model run
draws its self-attention over TEXT.

How a run is drawn is chosen by its model kind: ``DRAWERS[model_kind](run, text, out_path) -> str``
draws it and the returned string is printed. A digits run (ViT) takes a test-set index as TEXT and
draws [CLS]'s attention over the digit's patches; a tabletop run (VLA) takes an instruction and
draws ``npformer act``'s figure for scene 0 (both in ``npformer.viz.vision``).
"""
from __future__ import annotations

from typing import Callable

from ..viz.vision import draw_digits_attention, draw_tabletop_attention
from . import CLIError

HELP = "draw a trained run's attention as heatmaps (PNG)"
DESCRIPTION = "Draw every layer's and head's attention for TEXT as labelled heatmaps in one PNG."


def add_arguments(p) -> None:
    p.add_argument("run", metavar="DIR", help="a run directory written by npformer train")
    p.add_argument("text", metavar="TEXT", help="the input to look at")
    p.add_argument("--out", required=True, metavar="FIG.png", help="where to write the figure")


def _special(vocab, i: int) -> str | None:
    names = {vocab.pad_id: "<pad>", vocab.bos_id: "<bos>", vocab.eos_id: "<eos>", vocab.unk_id: "<unk>"}
    return names.get(int(i))


def _labels(vocab, ids) -> list[str]:
    """One label per id: the character, or <bos>/<eos>/... for the special tokens."""
    return [_special(vocab, i) or vocab.decode([i], stop_at_eos=False) for i in ids]


def draw_seq2seq(run, text: str, out_path: str) -> str:
    """Translate greedily, then draw encoder self, decoder self and cross-attention."""
    import numpy as np

    from ..decode import greedy
    from ..viz import model_panels, save_attention_figure

    task, model = run.task, run.model
    vocab = task.tgt_vocab
    src = task.encode_source(text)[None]                                   # (1, S)
    max_new = min(task.max_target_len, model.config.max_len)
    bos = np.full((1, 1), vocab.bos_id, dtype=np.int64)
    out = greedy(model, bos, max_new, src_ids=src, eos_id=vocab.eos_id)[0]  # (N,), ends with <eos> if finished
    tgt_in = np.concatenate([[vocab.bos_id], out[:-1]])[None]             # (1, N): what the decoder read
    _, cache = model.forward(src, tgt_in)
    panels = model_panels(model.attention_weights(cache))
    src_lab, read, wrote = _labels(task.src_vocab, src[0]), _labels(vocab, tgt_in[0]), _labels(vocab, out)
    labels = {"encoder self": (src_lab, src_lab), "decoder self": (wrote, read), "cross": (wrote, src_lab)}
    result = task.decode_target(out)
    save_attention_figure(panels, labels, out_path,
                          title=f"{run.config['task']}: {text!r} -> {result!r}  (rows: the token written; "
                                f"columns: the tokens attended to)")
    return f"{text} -> {result}\nwrote {out_path}"


def draw_lm(run, text: str, out_path: str) -> str:
    """Draw the self-attention of every block over TEXT."""
    from ..viz import model_panels, save_attention_figure

    task, model = run.task, run.model
    ids = task.encode_source(text)
    if len(ids) > model.config.max_len:
        raise ValueError(f"TEXT has {len(ids)} characters, more than the model's context of {model.config.max_len}")
    _, cache = model.forward(ids[None])
    lab = _labels(task.vocab, ids)
    panels = model_panels(model.attention_weights(cache))
    save_attention_figure(panels, {"self": (lab, lab)}, out_path,
                          title=f"{run.config['task']}: causal self-attention (rows: query, columns: key)")
    return f"wrote {out_path}"


# model kind -> draw(run, text, out_path) -> message
DRAWERS: dict[str, Callable] = {"transformer": draw_seq2seq, "decoder_lm": draw_lm,
                                "vit": draw_digits_attention, "vla": draw_tabletop_attention}


def run(args) -> int:
    from pathlib import Path

    from ..train.checkpoint import load_run

    if not args.text:
        raise CLIError("empty input: give a non-empty TEXT")
    if Path(args.out).suffix.lower() != ".png":
        raise CLIError(f"--out must name a .png file, got {args.out!r}")
    r = load_run(args.run)
    if r.config["model_kind"] == "action_lm":
        raise CLIError(f"the attention view of a policy that acts over time ({r.config['task']!r} task) is not "
                       "built yet; npformer explore RUN --seed S shows each step's attention, "
                       "npformer act RUN draws an episode")
    if r.config["model_kind"] not in DRAWERS:
        raise CLIError(f"no attention drawing for the {r.config['task']!r} task "
                       f"({r.config['model_kind']} model)")
    print(DRAWERS[r.config["model_kind"]](r, args.text, args.out))
    return 0
