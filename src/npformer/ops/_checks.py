"""Input checks shared by the public entry points.

Checks run once at a public boundary (``npformer.attention``, a model's
``__call__``), never inside the hot loops of a forward or backward pass.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

FLOAT_DTYPES = (np.float32, np.float64)


def check_float(x: object, name: str, *, finite: bool = True) -> np.ndarray:
    """Return ``x`` as a float32/float64 ndarray or raise naming ``name``."""
    if not isinstance(x, np.ndarray):
        if isinstance(x, (list, tuple, float, int)):
            x = np.asarray(x)
        else:
            raise TypeError(f"{name} must be a numpy array of float32 or float64, got {type(x).__name__}")
    if x.dtype.type not in FLOAT_DTYPES:
        raise TypeError(f"{name} must be float32 or float64, got dtype {x.dtype} with shape {x.shape}")
    if finite and not np.isfinite(x).all():
        raise ValueError(f"{name} contains NaN or inf (shape {x.shape})")
    return x


def check_rank(x: np.ndarray, name: str, min_rank: int, max_rank: int | None = None) -> None:
    if x.ndim < min_rank or (max_rank is not None and x.ndim > max_rank):
        want = f"at least {min_rank}" if max_rank is None else (
            f"{min_rank}" if min_rank == max_rank else f"{min_rank} to {max_rank}")
        raise ValueError(f"{name} must have {want} dimensions, got shape {x.shape}")


def check_int(x: object, name: str) -> np.ndarray:
    """Return ``x`` as an integer ndarray of token ids, or raise naming ``name``."""
    x = np.asarray(x)
    if x.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integer ids, got dtype {x.dtype} with shape {x.shape}")
    return x


def check_ids_in_range(ids: np.ndarray, name: str, n: int) -> None:
    if ids.size and (ids.min() < 0 or ids.max() >= n):
        raise ValueError(
            f"{name} holds ids outside the vocabulary [0, {n}): min {ids.min()}, max {ids.max()}")


def broadcast_shape(shape_a: Sequence[int], shape_b: Sequence[int], name_a: str, name_b: str) -> tuple:
    try:
        return np.broadcast_shapes(tuple(shape_a), tuple(shape_b))
    except ValueError:
        raise ValueError(f"{name_a} of shape {tuple(shape_a)} does not broadcast to "
                         f"{name_b} {tuple(shape_b)}") from None
