"""scikit-learn's bundled handwritten digits (1797 images, 8 x 8, grey levels 0..16; no download).

The test split is exactly
    sklearn.model_selection.train_test_split(X, y, test_size=0.25, random_state=0, stratify=y)
(1347 train, 450 test). Images are scaled to [0, 1] and shaped (N, 8, 8, 1), channels-last.
Augmentation (small random affine warps) is for the training split only.

Dimension legend: N images, H = W = 8 pixels, C = 1 channel.
"""
from __future__ import annotations

import numpy as np

IMAGE_SIZE = 8
N_CLASSES = 10


def load_digits_split(dtype=np.float32):
    """Returns (x_train (1347, 8, 8, 1), y_train (1347,), x_test (450, 8, 8, 1), y_test (450,))."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = (d.images / 16.0).astype(dtype)[..., None]               # (1797, 8, 8, 1) in [0, 1]
    y = d.target.astype(np.int64)                                 # (1797,)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)
    return x_train, y_train, x_test, y_test


def augment(images: np.ndarray, rng: np.random.Generator, max_shift: float = 1.0, max_rotate: float = 12.0,
            max_scale: float = 0.1) -> np.ndarray:
    """Small random affine warps (shift in pixels, rotation in degrees, scale), bilinear, zero outside.

    images (N, H, W, C) -> (N, H, W, C) of the same dtype. Each image gets its own warp.
    """
    n, h, w, c = images.shape
    ang = np.deg2rad(rng.uniform(-max_rotate, max_rotate, n))     # (N,)
    scale = 1.0 + rng.uniform(-max_scale, max_scale, n)           # (N,)
    shift = rng.uniform(-max_shift, max_shift, (n, 2))            # (N, 2) rows, cols
    # Inverse map: for each output pixel, where to read in the input (around the image centre).
    cy, cx = (h - 1) / 2.0, (w - 1) / 2.0
    yy, xx = np.meshgrid(np.arange(h) - cy, np.arange(w) - cx, indexing="ij")  # (H, W)
    cos, sin = np.cos(ang)[:, None, None] / scale[:, None, None], np.sin(ang)[:, None, None] / scale[:, None, None]
    src_y = cos * yy - sin * xx + cy - shift[:, 0, None, None]   # (N, H, W)
    src_x = sin * yy + cos * xx + cx - shift[:, 1, None, None]   # (N, H, W)
    y0, x0 = np.floor(src_y).astype(np.int64), np.floor(src_x).astype(np.int64)
    fy, fx = (src_y - y0)[..., None], (src_x - x0)[..., None]     # (N, H, W, 1)
    pad = np.zeros((n, h + 2, w + 2, c), dtype=np.float64)        # (N, H+2, W+2, C): a zero border
    pad[:, 1:-1, 1:-1] = images
    idx = np.arange(n)[:, None, None]

    def read(yi, xi):
        inside = (yi >= -1) & (yi <= h) & (xi >= -1) & (xi <= w)
        v = pad[idx, np.clip(yi + 1, 0, h + 1), np.clip(xi + 1, 0, w + 1)]  # (N, H, W, C)
        return v * inside[..., None]

    out = (read(y0, x0) * (1 - fy) * (1 - fx) + read(y0, x0 + 1) * (1 - fy) * fx
           + read(y0 + 1, x0) * fy * (1 - fx) + read(y0 + 1, x0 + 1) * fy * fx)  # (N, H, W, C)
    return out.astype(images.dtype)
