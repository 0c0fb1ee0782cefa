"""Attention laid over images: which patches a token looked at.

    digit_attention_figure(image, weights, ...)   [CLS] -> patch attention of a ViT, per layer and head
    act_figure(image, words, weights, ...)        a VLA's pick/place cells and what its action tokens read

``draw_digits_attention`` and ``draw_tabletop_attention`` are ``npformer attention``'s drawers for a
run of the digits (ViT) and tabletop (VLA) tasks.

Weights come from a model's ``attention_weights(cache)`` for one example: a list with one
(H, T, T) array per layer. A patch's weight is spread over its P x P pixels and drawn as a
translucent heat map on top of the image. Matplotlib is used through ``Figure`` (Agg canvas),
never pyplot, so no global figure state is touched.
Dimension legend: H heads, T tokens, N patches, G = sqrt(N) patches per side.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np


def patch_map(weights_over_patches: np.ndarray, grid: int, patch: int) -> np.ndarray:
    """(N,) weights of a row-major G x G patch grid -> a (G*P, G*P) image, each patch a constant block."""
    w = np.asarray(weights_over_patches).reshape(grid, grid)      # (G, G)
    return np.kron(w, np.ones((patch, patch)))                    # (G*P, G*P)


def _overlay(ax, image: np.ndarray, heat: np.ndarray, vmax: float | None = None, cmap: str = "inferno") -> None:
    """A grey image: the heat map, with the image's strokes drawn on top as contours.
    An RGB image: the image, with the heat map laid over it translucently."""
    vmax = vmax or max(float(heat.max()), 1e-9)
    if image.ndim == 2 or image.shape[-1] == 1:
        ax.imshow(heat, cmap=cmap, interpolation="nearest", vmin=0, vmax=vmax)
        ax.contour(image.reshape(image.shape[:2]), levels=[0.35], colors="cyan", linewidths=1.2)
    else:
        ax.imshow(image, interpolation="nearest", vmin=0, vmax=1)
        ax.imshow(heat, cmap=cmap, alpha=0.55, interpolation="nearest", vmin=0, vmax=vmax)
    ax.set_xticks([])
    ax.set_yticks([])


def _save(fig, path) -> Path:
    from ..files import atomic_savefig

    path = Path(path)
    if path.suffix.lower() != ".png":
        raise ValueError(f"the figure is written as PNG: give a path ending in .png, got {str(path)!r}")
    if not path.parent.is_dir():
        raise FileNotFoundError(f"directory does not exist: {path.parent}")
    atomic_savefig(fig, path, dpi=110)
    return path


# -- ViT: [CLS] -> patches -----------------------------------------------------------------------
def digit_attention_figure(image: np.ndarray, weights: list, patch: int, title: str = ""):
    """image (H, W, 1) in [0, 1]; weights: per layer (H_heads, T, T) with token 0 = [CLS].
    One row per layer: the image, then each head's [CLS] -> patch weights (bright = more, each panel
    scaled to its own maximum) with the digit's strokes as cyan contours, then the mean of the heads."""
    from matplotlib.figure import Figure

    n_layers, n_heads = len(weights), weights[0].shape[0]
    grid = image.shape[0] // patch
    fig = Figure(figsize=(1.9 * (n_heads + 2), 2.0 * n_layers + 0.6))
    axes = fig.subplots(n_layers, n_heads + 2, squeeze=False)
    for layer, w in enumerate(weights):
        cls_row = w[:, 0, :]                                      # (heads, T): [CLS] attends to ...
        ax = axes[layer, 0]
        ax.imshow(image.squeeze(-1), cmap="gray", interpolation="nearest", vmin=0, vmax=1)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_ylabel(f"layer {layer + 1}")
        for h in range(n_heads + 1):
            row = cls_row[h] if h < n_heads else cls_row.mean(axis=0)  # (T,)
            _overlay(axes[layer, h + 1], image, patch_map(row[1:], grid, patch))
            name = f"head {h + 1}" if h < n_heads else "mean of heads"
            axes[layer, h + 1].set_title(f"{name}\n[CLS]->[CLS] {row[0]:.2f}", fontsize=8)
    axes[0, 0].set_title("input", fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def save_digit_attention(image, weights, patch: int, path, title: str = "") -> Path:
    return _save(digit_attention_figure(image, weights, patch, title), path)


def draw_digits_attention(run, text: str, out_path) -> str:
    """``npformer attention DIR I --out FIG.png`` for a digits run: I is an index into the test split;
    draws which patches [CLS] attends to, per layer and head, over that digit."""
    task, model = run.task, run.model
    try:
        i = int(text)
    except ValueError:
        raise ValueError(f"for a digits run TEXT is a test-set index 0..{len(task.x_test) - 1}, "
                         f"got {text!r}") from None
    if not 0 <= i < len(task.x_test):
        raise ValueError(f"test-set index must be in 0..{len(task.x_test) - 1}, got {i}")
    if model.config.pool != "cls":
        raise ValueError("this model pools the mean of the patches; it has no [CLS] token to draw")
    x = task.x_test[i:i + 1].astype(model.dtype)                 # (1, 8, 8, 1)
    logits, cache = model.forward(x)
    pred = int(logits[0].argmax())
    weights = [w["self"][0] for w in model.attention_weights(cache)]
    p = model.config.patch_size
    save_digit_attention(task.x_test[i], weights, p, out_path,
                         title=f"digits test image {i}: label {task.y_test[i]}, predicted {pred} "
                               f"- where [CLS] looks (each head's weights over the {p}x{p} patches)")
    return f"test image {i}: label {task.y_test[i]}, predicted {pred}\nwrote {out_path}"


# -- VLA: pick, place, and what the action tokens read ---------------------------------------------
def _cell_box(ax, cell: int, grid: int, size: int, colour: str, label: str) -> None:
    from matplotlib.patches import Rectangle

    r, c = divmod(cell, grid)
    ax.add_patch(Rectangle((c * size - 0.5, r * size - 0.5), size, size, fill=False, lw=2.5, ec=colour))
    ax.text(c * size + size / 2 - 0.5, r * size - 1.0, label, color=colour, fontsize=8, ha="center",
            va="bottom", fontweight="bold")


def act_figure(image: np.ndarray, words: list[str], weights: list, layout: dict, pick: int, place: int,
               patch: int, title: str = "", probs: tuple[float, float] | None = None):
    """The scene with the predicted pick (green) and place (magenta) cells, then one row per layer:
    for the pick token and for the place token, the head-mean attention over the image patches
    (overlay) and over the instruction words (bars).

    image (H, W, 3); words: the real (unpadded) instruction words; weights: per layer (heads, T, T);
    layout: name -> slice of the token kinds ("actions", "words", "patches")."""
    from matplotlib.figure import Figure

    n_layers = len(weights)
    grid = image.shape[0] // patch
    n_words = len(words)
    wsl, psl = layout["words"], layout["patches"]
    fig = Figure(figsize=(12.5, 2.5 * n_layers + 3.4))
    gs = fig.add_gridspec(n_layers + 1, 4, width_ratios=[1, 2.2, 1, 2.2], height_ratios=[1.4] + [1] * n_layers)
    ax = fig.add_subplot(gs[0, 0])
    ax.imshow(image, interpolation="nearest")
    ax.set_xticks([])
    ax.set_yticks([])
    _cell_box(ax, pick, grid, patch, "lime", "pick")
    _cell_box(ax, place, grid, patch, "magenta", "place")
    (pr, pc), (qr, qc) = divmod(pick, grid), divmod(place, grid)
    ax.annotate("", xy=((qc + 0.5) * patch - 0.5, (qr + 0.5) * patch - 0.5),
                xytext=((pc + 0.5) * patch - 0.5, (pr + 0.5) * patch - 0.5),
                arrowprops=dict(arrowstyle="->", color="white", lw=2))
    text = "predicted: pick cell %d (row %d, col %d), place cell %d (row %d, col %d)" % (pick, pr, pc, place, qr, qc)
    if probs is not None:
        text += f"\nprobabilities {probs[0]:.3f} and {probs[1]:.3f}"
    ax_t = fig.add_subplot(gs[0, 1:])
    ax_t.axis("off")
    ax_t.text(0.0, 0.5, f"\u201c{' '.join(words)}\u201d\n\n{text}\n\nBelow: what the action tokens attend to, "
              "per layer (mean over heads).\nOverlay: weight on each image patch; bars: weight on each word.",
              fontsize=10, va="center")
    for layer, w in enumerate(weights):
        wm = w.mean(axis=0)                                       # (T, T) head mean
        for j, (name, colour) in enumerate((("pick", "tab:green"), ("place", "tab:purple"))):
            row = wm[layout["actions"].start + j]                 # (T,)
            ax_i = fig.add_subplot(gs[layer + 1, 2 * j])
            _overlay(ax_i, image, patch_map(row[psl], grid, patch), cmap="viridis")
            ax_i.set_title(f"layer {layer + 1}: {name} -> patches ({row[psl].sum():.2f})", fontsize=8)
            ax_b = fig.add_subplot(gs[layer + 1, 1 + 2 * j])
            ax_b.bar(np.arange(n_words), row[wsl][:n_words], color=colour)
            ax_b.set_xticks(np.arange(n_words))
            ax_b.set_xticklabels(words, rotation=60, fontsize=7)
            ax_b.tick_params(axis="y", labelsize=7)
            ax_b.set_title(f"{name} -> words ({row[wsl].sum():.2f})", fontsize=8)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


def save_act_figure(path, *args, **kwargs) -> Path:
    return _save(act_figure(*args, **kwargs), path)


def save_act(path, image: np.ndarray, res: dict, patch: int, title: str = "") -> Path:
    """``save_act_figure`` of what ``npformer.data.tabletop_policy.act`` returned (``res``)."""
    return save_act_figure(path, image, res["words"], res["weights"], res["layout"], res["pick"], res["place"],
                           patch, title=title, probs=(res["p_pick"], res["p_place"]))


def draw_tabletop_attention(run, text: str, out_path) -> str:
    """``npformer attention DIR "INSTRUCTION" --out FIG.png`` for a tabletop run: the ``npformer act``
    figure for scene 0 (``npformer act`` chooses the scene with --seed)."""
    from ..data.tabletop_policy import act, scene_for_seed

    scene, _ = scene_for_seed(0)
    res = act(run.model, scene, text)
    save_act(out_path, scene.image, res, run.model.config.patch_size, title=f"scene 0: {text}")
    return f"scene 0: pick cell {res['pick']}, place cell {res['place']}\nwrote {out_path}"
