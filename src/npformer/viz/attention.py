"""Attention weights as labelled heatmaps: one row of panels per (kind, layer), one column per head.

    panels = {"encoder self": [w_layer1, w_layer2, ...],     each w (H, Tq, Tk), rows sum to 1
              "decoder self": [...], "cross": [...]}
    labels = {"encoder self": (query tokens, key tokens), ...}
    save_attention_figure(panels, labels, "attention.png")

The functions know nothing about models or tasks: ``model_panels`` turns a model's
``attention_weights(cache)`` into panels for one example, and the ``attention`` command picks the
tokens. Matplotlib is used through ``Figure`` (Agg canvas), never pyplot, so no global backend
or figure state is touched.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

# readable stand-ins for characters that would be invisible on an axis
_VISIBLE = {" ": "\u2423", "\n": "\u23ce", "\t": "\u21e5"}
MAX_TICKS = 64                  # more tokens than this: label every k-th one


def token_labels(tokens: Sequence[str]) -> list[str]:
    """Axis labels for tokens: a space shows as '␣', a newline as '⏎', a tab as '⇥'."""
    return [_VISIBLE.get(t, t) for t in tokens]


def model_panels(weights, index: int = 0) -> dict[str, list[np.ndarray]]:
    """Panels for batch item ``index`` from a model's ``attention_weights(cache)``:
    the encoder-decoder's {"encoder": [{self}], "decoder": [{self, cross}]} or the
    decoder-only model's [{self}] per block. Each panel is (H, Tq, Tk)."""
    if isinstance(weights, dict):
        panels = {"encoder self": [layer["self"][index] for layer in weights.get("encoder", [])],
                  "decoder self": [layer["self"][index] for layer in weights.get("decoder", [])],
                  "cross": [layer["cross"][index] for layer in weights.get("decoder", [])]}
        return {k: v for k, v in panels.items() if v}
    return {"self": [layer["self"][index] for layer in weights]}


def _check(panels: dict, labels: dict) -> int:
    """Validate shapes and labels; return the number of heads."""
    if not isinstance(panels, dict) or not panels or not all(panels.values()):
        raise ValueError("panels must be a non-empty dict: kind -> non-empty list of (H, Tq, Tk) arrays")
    heads: int | None = None
    for kind, layers in panels.items():
        if kind not in labels:
            raise ValueError(f"labels has no (query, key) tokens for panel kind {kind!r}")
        q_lab, k_lab = labels[kind]
        for i, w in enumerate(layers):
            w = np.asarray(w)
            if w.ndim != 3:
                raise ValueError(f"{kind} layer {i + 1}: expected weights (H, Tq, Tk), got shape {w.shape}")
            if w.shape[1:] != (len(q_lab), len(k_lab)):
                raise ValueError(f"{kind} layer {i + 1}: weights (H, Tq, Tk) = {w.shape} but "
                                 f"{len(q_lab)} query and {len(k_lab)} key labels")
            if heads is None:
                heads = w.shape[0]
            elif w.shape[0] != heads:
                raise ValueError(f"every panel needs the same number of heads: {kind} layer {i + 1} "
                                 f"has {w.shape[0]}, others {heads}")
    assert heads is not None                       # panels is a non-empty dict of non-empty lists
    return heads


def _ticks(ax, axis: str, labels: Sequence[str], fontsize: float) -> None:
    step = max(1, int(np.ceil(len(labels) / MAX_TICKS)))
    pos = np.arange(0, len(labels), step)
    if axis == "x":
        ax.set_xticks(pos, [labels[i] for i in pos.tolist()], fontsize=fontsize)
        for t in ax.get_xticklabels():                   # characters upright, longer tokens turned
            t.set_rotation(90 if len(t.get_text()) > 1 else 0)
    else:
        ax.set_yticks(pos, [labels[i] for i in pos.tolist()], fontsize=fontsize)
    ax.tick_params(axis=axis, length=0, pad=1)


def attention_figure(panels: dict[str, list[np.ndarray]], labels: dict[str, tuple[Sequence[str], Sequence[str]]],
                     title: str | None = None, cmap: str = "viridis"):
    """A matplotlib ``Figure`` with one heatmap per (kind, layer, head).

    panels: kind -> list over layers of weights (H, Tq, Tk), drawn in the dict's order.
    labels: kind -> (Tq query tokens, Tk key tokens); queries down the side, keys along the bottom
    of each kind's block. One colour scale, 0..1, for every panel, so heads can be compared.
    The layout is computed in inches (no constrained layout: with hundreds of tick labels it
    is slow), one block of rows per kind with room for its key labels below."""
    n_heads = _check(panels, labels)
    fig, grid, fontsize = _layout(panels, labels, n_heads, title)
    image = _draw_panels(fig, grid, panels, labels, n_heads, fontsize, cmap)
    width, height = fig.get_size_inches()
    cax = fig.add_axes((1 - 0.75 / width, 0.3, 0.15 / width, 0.4))
    fig.colorbar(image, cax=cax, label="attention weight")
    if title:
        fig.suptitle(title, y=1 - 0.12 / height, fontsize=11)
    return fig


def _layout(panels: dict, labels: dict, n_heads: int, title: str | None):
    """(an empty Figure sized in inches, its GridSpec, the tick font size). The grid has one column per
    head and, per kind, rows [gap above, panel] per layer, then a row of room for the key labels."""
    from matplotlib.figure import Figure

    max_k = max(len(labels[kind][1]) for kind in panels)
    cell = 0.14 if max_k <= 40 else 0.09                  # inches per token
    fontsize = 7 if max_k <= 40 else 5
    longest = max(len(t) for q, k in labels.values() for t in (*token_labels(q), *token_labels(k)))
    label_room = 0.15 + 0.06 * longest * fontsize / 7      # inches for one axis' tick labels
    panel_w = 0.5 + cell * max_k
    gap_w, head_room, layer_gap = 0.15, 0.3, 0.12
    heights = []
    for kind, layers in panels.items():
        for i in range(len(layers)):
            heights.append(head_room if i == 0 else layer_gap)
            heights.append(0.3 + cell * len(labels[kind][0]))
        heights.append(label_room)
    left, right, top = 0.45 + label_room, 1.1, 0.45 if title else 0.05
    width = left + n_heads * panel_w + (n_heads - 1) * gap_w + right
    height = top + sum(heights) + 0.1
    fig = Figure(figsize=(width, height))
    grid = fig.add_gridspec(len(heights), n_heads, height_ratios=heights, hspace=0.0,
                            wspace=gap_w / panel_w, left=left / width, right=1 - right / width,
                            top=1 - top / height, bottom=0.1 / height)
    return fig, grid, fontsize


def _draw_panels(fig, grid, panels: dict, labels: dict, n_heads: int, fontsize: float, cmap: str):
    """Draw every heatmap into ``grid`` (laid out by ``_layout``); returns the last image, for the colour bar."""
    image, row = None, 0
    for kind, layers in panels.items():
        q_lab, k_lab = (token_labels(t) for t in labels[kind])
        for i, w in enumerate(layers):
            row += 1                                      # the gap above the panel
            for h in range(n_heads):
                ax = fig.add_subplot(grid[row, h], label="attention")
                image = ax.imshow(np.asarray(w)[h], vmin=0.0, vmax=1.0, cmap=cmap, aspect="auto",
                                  interpolation="nearest")
                if i == 0:
                    ax.set_title(f"{kind}: head {h + 1}", fontsize=fontsize + 2)
                if h == 0:
                    _ticks(ax, "y", q_lab, fontsize)
                    ax.set_ylabel(f"{kind}\nlayer {i + 1}", fontsize=fontsize + 1)
                else:
                    ax.set_yticks([])
                if i == len(layers) - 1:
                    _ticks(ax, "x", k_lab, fontsize)
                else:
                    ax.set_xticks([])
            row += 1
        row += 1                                          # the key labels' room
    return image


def save_attention_figure(panels, labels, path, title: str | None = None, dpi: int = 110) -> Path:
    """Draw ``attention_figure`` and write it as one PNG (atomically). Returns the path."""
    from ..files import atomic_savefig

    path = Path(path)
    if path.suffix.lower() != ".png":
        raise ValueError(f"the figure is written as PNG: give a path ending in .png, got {str(path)!r}")
    if not path.parent.is_dir():
        raise FileNotFoundError(f"directory does not exist: {path.parent}")
    fig = attention_figure(panels, labels, title)
    atomic_savefig(fig, path, dpi=dpi)
    return path
