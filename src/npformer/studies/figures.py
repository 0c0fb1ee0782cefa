"""The studies' figures: matplotlib ``Figure`` objects (Agg canvas, never pyplot, as in ``viz``),
written with ``files.atomic_savefig``. Each study composes its panels from these."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..files import atomic_savefig


def new_figure(n_panels: int, title: str, width: float = 4.3, height: float = 3.6):
    """(Figure, list of its axes): ``n_panels`` side by side under ``title``."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * n_panels, height))
    axes = [fig.add_subplot(1, n_panels, i + 1) for i in range(n_panels)]
    fig.suptitle(title, fontsize=10)
    return fig, axes


def save(fig, path: Path) -> Path:
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.2, top=0.82, wspace=0.3)
    atomic_savefig(fig, path, dpi=110)
    return Path(path)


def seeds_and_means(ax, labels: list[str], rows: list[dict], key: str, by: str = "setting",
                    offset: float = 0.0, colour: str = "C0", name: str | None = None) -> None:
    """One column per label: each seed's ``key`` as a dot, the mean as a wide tick with +- sd whiskers
    (no bars: the axis may then zoom in on the values)."""
    for i, label in enumerate(labels):
        vals = np.array([r[key] for r in rows if r[by] == label], dtype=np.float64)   # (seeds,)
        if not vals.size:
            continue
        x = i + offset
        sd = vals.std(ddof=1) if vals.size > 1 else 0.0
        ax.errorbar(x, vals.mean(), yerr=sd, color=colour, capsize=4, lw=1.2, marker="_", ms=16, mew=2,
                    label=name if i == 0 else None)
        ax.plot(np.full(vals.size, x), vals, "o", color=colour, ms=3.5, alpha=0.6)
    ax.set_xticks(range(len(labels)), labels, fontsize=8)
    ax.set_xlim(-0.6, len(labels) - 0.4)
    ax.grid(axis="y", alpha=0.3)
    for t in ax.get_xticklabels():
        t.set_rotation(20 if max(len(lab) for lab in labels) > 8 else 0)
