"""Sinusoidal positional encoding (paper section 3.5):

    PE[pos, 2i]   = sin(pos / 10000^(2i / d))
    PE[pos, 2i+1] = cos(pos / 10000^(2i / d))

It has no parameters, so no backward: the gradient of x + PE with respect to x
is the identity.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import DTypeLike


def sinusoidal_positions(n_positions: int, d_model: int, dtype: DTypeLike = np.float32) -> np.ndarray:
    """Returns PE of shape (n_positions, d_model), computed in float64 then cast."""
    if n_positions < 0 or d_model <= 0:
        raise ValueError(f"n_positions must be >= 0 and d_model > 0, got {n_positions} and {d_model}")
    pos = np.arange(n_positions, dtype=np.float64)[:, None]       # (T, 1)
    two_i = np.arange(0, d_model, 2, dtype=np.float64)            # (ceil(d/2),)
    angle = pos / np.power(10000.0, two_i / d_model)              # (T, ceil(d/2))
    pe = np.empty((n_positions, d_model), dtype=np.float64)       # (T, d)
    pe[:, 0::2] = np.sin(angle)
    pe[:, 1::2] = np.cos(angle[:, : d_model // 2])
    return pe.astype(dtype)


def sinusoidal_positions_2d(h: int, w: int, d_model: int, dtype: DTypeLike = np.float32) -> np.ndarray:
    """2-D sinusoidal positions for an h x w grid: half the channels encode the row,
    half the column. Returns (h * w, d_model), row-major over the grid."""
    if d_model % 4 != 0:
        raise ValueError(f"d_model must be divisible by 4 for 2-D positions, got {d_model}")
    half = d_model // 2
    rows = sinusoidal_positions(h, half, np.float64)              # (h, d/2)
    cols = sinusoidal_positions(w, half, np.float64)              # (w, d/2)
    pe = np.concatenate([np.repeat(rows, w, axis=0), np.tile(cols, (h, 1))], axis=1)  # (h*w, d)
    return pe.astype(dtype)
