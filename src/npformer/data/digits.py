"""scikit-learn's bundled handwritten digits (1797 images, 8 x 8, grey levels 0..16; no download).

The test split is exactly
    sklearn.model_selection.train_test_split(X, y, test_size=0.25, random_state=0, stratify=y)
(1347 train, 450 test). Images are scaled to [0, 1] and shaped (N, 8, 8, 1), channels-last.
Augmentation (small random affine warps) is for the training split only.

Dimension legend: N images, H = W = 8 pixels, C = 1 channel.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ops import log_softmax
from .tasks import Batch, Task

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
    n: int                                                        # so numpy's stubs pick the array overloads
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


# -- the task: npformer train digits ------------------------------------------------------------

class DigitsTask(Task):
    name = "digits"
    model_kind = "vit"
    primary_metric = "accuracy"
    higher_is_better = True
    description = "classify scikit-learn's 8x8 handwritten digits with a Vision Transformer"

    @dataclass
    class Settings:
        augment: bool = True            # random affine warps of the training images
        augment_prob: float = 0.5       # share of each batch that is warped (the rest stays sharp, as the test set)
        max_shift: float = 1.0          # pixels, each direction
        max_rotate: float = 12.0        # degrees, each direction
        max_scale: float = 0.1          # relative size change, each direction

        def __post_init__(self) -> None:
            if not 0.0 <= self.augment_prob <= 1.0:
                raise ValueError(f"augment_prob must be in [0, 1], got {self.augment_prob}")
            if self.max_shift < 0 or self.max_rotate < 0 or not 0 <= self.max_scale < 1:
                raise ValueError(f"need max_shift >= 0, max_rotate >= 0 and 0 <= max_scale < 1, got "
                                 f"{self.max_shift}, {self.max_rotate}, {self.max_scale}")

    settings: Settings

    def __init__(self, settings=None) -> None:
        super().__init__(settings)
        self.x_train, self.y_train, self.x_test, self.y_test = load_digits_split()

    def default_model_config(self) -> dict:
        return {"image_size": IMAGE_SIZE, "in_channels": 1, "n_classes": N_CLASSES, "patch_size": 2,
                "d_model": 64, "n_heads": 4, "d_ff": 128, "n_layers": 3, "dropout": 0.1}

    def default_train_config(self) -> dict:
        return {"steps": 3000, "batch_size": 64, "schedule": "cosine", "lr": 2e-3, "warmup": 150,
                "optimizer": "adamw", "weight_decay": 0.05, "label_smoothing": 0.1, "eval_every": 500}

    def train_batch(self, rng: np.random.Generator, batch_size: int) -> Batch:
        idx = rng.integers(0, len(self.x_train), batch_size)          # (B,)
        x = self.x_train[idx]                                         # (B, 8, 8, 1)
        if self.settings.augment:
            s = self.settings
            warped = augment(x, rng, s.max_shift, s.max_rotate, s.max_scale)  # (B, 8, 8, 1)
            keep = rng.random(batch_size) >= s.augment_prob               # (B,) these stay as they are
            x = np.where(keep[:, None, None, None], x, warped)
        n_tokens = (IMAGE_SIZE // 2) ** 2 + 1                         # patches + [CLS], default patch size 2
        return Batch((x, self.y_train[idx]), n_tokens=batch_size * n_tokens)

    def evaluate(self, model, n: int | None = None, seed: int = 0, batch_size: int = 450) -> dict:
        """accuracy and mean cross-entropy on the test split (its first ``n`` images if n is given;
        the split is fixed, so ``seed`` changes nothing)."""
        n = len(self.x_test) if n is None else min(int(n), len(self.x_test))
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        x = self.x_test[:n].astype(model.dtype)
        y = self.y_test[:n]
        right, nll = 0, 0.0
        for i in range(0, n, batch_size):
            logits, _ = model.forward(x[i:i + batch_size])            # (B, 10)
            logp = log_softmax(logits.astype(np.float64))             # (B, 10)
            nll -= float(logp[np.arange(len(logp)), y[i:i + batch_size]].sum())
            right += int((logits.argmax(-1) == y[i:i + batch_size]).sum())
        return {"accuracy": right / n, "errors": n - right, "loss": nll / n, "n": n}
