"""Boolean attention masks, True = may attend, shaped to broadcast over (B, H, Tq, Tk)."""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ..ops.attention import causal_mask


def padding_mask(ids: np.ndarray, pad_id: int) -> np.ndarray:
    """ids (B, Tk) -> (B, 1, 1, Tk): every query may read the keys that are not padding."""
    return (ids != pad_id)[:, None, None, :]


def lengths_mask(lengths: ArrayLike, t_k: int) -> np.ndarray:
    """Real lengths (B,) -> (B, 1, 1, Tk)."""
    return (np.arange(t_k)[None, :] < np.asarray(lengths)[:, None])[:, None, None, :]


__all__ = ["causal_mask", "lengths_mask", "padding_mask"]
