"""Image patches as tokens (the Vision Transformer's first step, Dosovitskiy et al. 2021, section 3.1).

An image (H, W, C) is cut into N = (H/P) * (W/P) patches of P x P pixels; each patch is
flattened and mapped linearly to d_model:

    z_n = W flatten(patch_n) + b

which is exactly a convolution with kernel P and stride P. The weight is stored in torch
``Conv2d``'s layout (E, C, P, P) so a checkpoint maps one to one. An optional learned
[CLS] token is put in front, then position information is added: a learned table
(``pos_embed``, one row per token, [CLS] included) or fixed 2-D sinusoids (rows in half
the channels, columns in the other half; [CLS] gets none).

Dimension legend: B batch, H/W image height/width, C channels, P patch size,
N patches, T tokens (N, or N + 1 with [CLS]), E model width, K = C * P * P.
Images are channels-last (B, H, W, C), as numpy and matplotlib hold them.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from ..ops import linear_backward, linear_forward, sinusoidal_positions_2d
from .basic import Dropout
from .module import Module


def image_to_patches(x: np.ndarray, p: int) -> np.ndarray:
    """(B, H, W, C) -> (B, N, C*P*P), patches row-major over the grid, each flattened
    channel-first (c, row, col) to match a Conv2d weight (E, C, P, P)."""
    b, h, w, c = x.shape
    g = x.reshape(b, h // p, p, w // p, p, c)                     # (B, H/P, P, W/P, P, C)
    g = g.transpose(0, 1, 3, 5, 2, 4)                             # (B, H/P, W/P, C, P, P)
    return g.reshape(b, (h // p) * (w // p), c * p * p)           # (B, N, K)


def patches_to_image(patches: np.ndarray, h: int, w: int, c: int, p: int) -> np.ndarray:
    """The inverse of ``image_to_patches``: (B, N, C*P*P) -> (B, H, W, C)."""
    b = patches.shape[0]
    g = patches.reshape(b, h // p, w // p, c, p, p)               # (B, H/P, W/P, C, P, P)
    g = g.transpose(0, 1, 4, 2, 5, 3)                             # (B, H/P, P, W/P, P, C)
    return g.reshape(b, h, w, c)                                  # (B, H, W, C)


class PatchEmbedding(Module):
    """(B, H, W, C) images -> (B, T, E) tokens: patches projected, [CLS] prepended, positions added."""

    # children made by add_module in __init__, declared for readers and the type checker
    dropout: Dropout

    def __init__(self, image_size: int | tuple[int, int], patch_size: int, in_channels: int, d_model: int,
                 cls_token: bool = True, positional: str = "learned", dropout: float = 0.0,
                 rng: np.random.Generator | None = None, dtype: DTypeLike = np.float32) -> None:
        super().__init__()
        h, w = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
        if patch_size <= 0 or h % patch_size or w % patch_size:
            raise ValueError(f"image size {h}x{w} must be divisible by patch_size, got patch_size={patch_size}")
        if positional not in ("learned", "sinusoidal", "none"):
            raise ValueError(f"positional must be 'learned', 'sinusoidal' or 'none', got {positional!r}")
        if positional == "sinusoidal" and d_model % 4:
            raise ValueError(f"2-D sinusoidal positions need d_model divisible by 4, got {d_model}")
        rng = rng if rng is not None else np.random.default_rng(0)
        self.image_size, self.patch_size, self.in_channels, self.d_model = (h, w), patch_size, in_channels, d_model
        self.grid = (h // patch_size, w // patch_size)
        self.n_patches = self.grid[0] * self.grid[1]
        self.has_cls, self.positional = cls_token, positional
        k = in_channels * patch_size * patch_size
        bound = 1.0 / math.sqrt(k)                                # torch Conv2d's default init
        self.params["weight"] = rng.uniform(-bound, bound, (d_model, in_channels, patch_size, patch_size)).astype(dtype)
        self.params["bias"] = rng.uniform(-bound, bound, (d_model,)).astype(dtype)
        if cls_token:
            self.params["cls_token"] = (rng.standard_normal((1, 1, d_model)) * 0.02).astype(dtype)
        if positional == "learned":
            self.params["pos_embed"] = (rng.standard_normal((1, self.n_tokens, d_model)) * 0.02).astype(dtype)
        self.add_module("dropout", Dropout(dropout))

    @property
    def n_tokens(self) -> int:
        return self.n_patches + int(self.has_cls)

    def positions(self, dtype: DTypeLike) -> np.ndarray:
        """(1, T, E) position vectors added to the tokens."""
        if self.positional == "learned":
            return self.params["pos_embed"]
        pe = np.zeros((1, self.n_tokens, self.d_model), dtype=dtype)  # (1, T, E)
        if self.positional == "sinusoidal":
            pe[0, int(self.has_cls):] = sinusoidal_positions_2d(*self.grid, self.d_model, dtype)
        return pe

    def forward(self, images: np.ndarray, rng: np.random.Generator | None = None) -> tuple[np.ndarray, Any]:
        """images (B, H, W, C) float -> (tokens (B, T, E), cache)."""
        if images.ndim != 4 or images.shape[1:] != (*self.image_size, self.in_channels):
            raise ValueError(f"images must have shape (B, {self.image_size[0]}, {self.image_size[1]}, "
                             f"{self.in_channels}), got {images.shape}")
        if images.dtype != self.params["weight"].dtype:   # no silent float32 -> float64 upcast
            raise TypeError(f"images must have the model's dtype {self.params['weight'].dtype}, got {images.dtype}")
        e = self.d_model
        patches = image_to_patches(images, self.patch_size)       # (B, N, K)
        w = self.params["weight"].reshape(e, -1)                  # (E, K)
        z, lin_cache = linear_forward(patches, w, self.params["bias"])  # (B, N, E)
        if self.has_cls:
            cls = np.broadcast_to(self.params["cls_token"], (z.shape[0], 1, e))  # (B, 1, E)
            z = np.concatenate([cls, z], axis=1)                  # (B, T, E)
        z = z + self.positions(z.dtype)                           # (B, T, E)
        z, drop_cache = self.dropout.forward(z, rng)
        return z, (lin_cache, drop_cache)

    def backward(self, dz: np.ndarray, cache: Any) -> tuple[Any, dict[str, np.ndarray]]:
        """dz (B, T, E) -> (dimages (B, H, W, C), grads)."""
        lin_cache, drop_cache = cache
        dz, _ = self.dropout.backward(dz, drop_cache)
        grads = {}
        if self.positional == "learned":
            grads["pos_embed"] = dz.sum(axis=0, keepdims=True)    # (1, T, E)
        if self.has_cls:
            grads["cls_token"] = dz[:, :1].sum(axis=0, keepdims=True)  # (1, 1, E)
            dz = dz[:, 1:]                                        # (B, N, E)
        dpatches, dw, db = linear_backward(dz, lin_cache)         # (B, N, K), (E, K), (E,)
        grads["weight"] = dw.reshape(self.params["weight"].shape)  # (E, C, P, P)
        grads["bias"] = db
        dimages = patches_to_image(dpatches, *self.image_size, self.in_channels, self.patch_size)
        return dimages, grads
