"""Actions as tokens, as RT-2 and OpenVLA emit them.

Each move dimension d is normalised by the demonstrations' 1st and 99th percentiles, ``low[d]`` and
``high[d]``: ``u = 2 (m - low) / (high - low) - 1``, clipped to [-1, 1], then cut into ``bins`` uniform bins
with edges ``linspace(-1, 1, bins + 1)``; bin i is token i, and u = 1 falls in the last bin, so each of
the ``bins`` tokens is reached. Decoding gives the bin's centre, so a value between the percentiles comes
back within half a bin, ``(high - low) / (2 bins)``. The gripper command (open, close, done) has its own
three tokens, ``bins + 0``, ``bins + 1``, ``bins + 2``.

One step is three tokens, (dx, dy, gripper): slots 0 and 1 of a step hold bins, slot 2 a gripper token
(``allowed``).

Dimension legend: n actions.
"""
from __future__ import annotations

import math

import numpy as np

N_GRIPPER = 3
TOKENS_PER_STEP = 3


class ActionTokenizer:
    """``bins`` uniform bins per move dimension between ``low`` (2,) and ``high`` (2,), plus 3 gripper tokens."""

    def __init__(self, bins: int, low, high) -> None:
        if isinstance(bins, bool) or not isinstance(bins, (int, np.integer)) or bins < 2:
            raise ValueError(f"bins must be an integer >= 2, got {bins!r}")
        lo = np.asarray(low, dtype=np.float64).reshape(-1)
        hi = np.asarray(high, dtype=np.float64).reshape(-1)
        for name, v in (("low", lo), ("high", hi)):
            if v.shape != (2,) or not np.isfinite(v).all():
                raise ValueError(f"{name} must be 2 finite numbers, got {v.tolist()}")
        if not (hi > lo).all():
            raise ValueError(f"high must exceed low on each dimension, got low {lo.tolist()} and high {hi.tolist()}")
        self.bins = int(bins)
        self.low, self.high = lo, hi

    @classmethod
    def fit(cls, moves: np.ndarray, bins: int) -> ActionTokenizer:
        """The tokenizer of ``moves`` (n, 2): its 1st and 99th percentiles per dimension."""
        m = np.asarray(moves, dtype=np.float64)
        if m.ndim != 2 or m.shape[1] != 2 or len(m) == 0 or not np.isfinite(m).all():
            raise ValueError(f"moves must be a non-empty (n, 2) array of finite numbers, got shape {m.shape}")
        low, high = np.percentile(m, 1, axis=0), np.percentile(m, 99, axis=0)
        if not (high > low).all():
            raise ValueError(f"the moves' 1st and 99th percentiles are equal on a dimension ({low.tolist()}, "
                             f"{high.tolist()}): too few or constant demonstrations")
        return cls(bins, low, high)

    @property
    def vocab_size(self) -> int:
        return self.bins + N_GRIPPER

    @property
    def bin_width(self) -> np.ndarray:
        """(2,) one bin's width in move units."""
        return (self.high - self.low) / self.bins

    def encode_moves(self, moves: np.ndarray) -> np.ndarray:
        """Bin tokens (n, 2) int64 of ``moves`` (n, 2)."""
        m = np.asarray(moves, dtype=np.float64)
        u = np.clip(2 * (m - self.low) / (self.high - self.low) - 1, -1.0, 1.0)   # (n, 2)
        return np.minimum(np.floor((u + 1) / 2 * self.bins), self.bins - 1).astype(np.int64)  # (n, 2)

    def decode_moves(self, tokens: np.ndarray) -> np.ndarray:
        """Moves (n, 2) float32 at the centres of the bins ``tokens`` (n, 2)."""
        t = np.asarray(tokens)
        if t.size and (t.min() < 0 or t.max() >= self.bins):
            raise ValueError(f"move tokens must lie in [0, {self.bins}), got {t.min()} to {t.max()}")
        u = -1 + (t + 0.5) * 2 / self.bins                                         # (n, 2) bin centres
        return (self.low + (u + 1) / 2 * (self.high - self.low)).astype(np.float32)

    def encode(self, moves: np.ndarray, gripper: np.ndarray) -> np.ndarray:
        """Tokens (n, 3) int64: (dx, dy) bins, then ``bins + gripper``."""
        g = np.asarray(gripper).reshape(-1)
        m = np.asarray(moves).reshape(len(g), 2)
        if g.size and (g.min() < 0 or g.max() >= N_GRIPPER):
            raise ValueError(f"gripper commands must be 0, 1 or 2, got {g.min()} to {g.max()}")
        return np.concatenate([self.encode_moves(m), (self.bins + g.astype(np.int64))[:, None]], axis=1)

    def decode(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(moves (n, 2) float32, gripper (n,) int64) of tokens (n, 3)."""
        t = np.asarray(tokens, dtype=np.int64)
        if t.ndim != 2 or t.shape[1] != TOKENS_PER_STEP:
            raise ValueError(f"tokens must be (n, 3), got shape {t.shape}")
        g = t[:, 2] - self.bins
        if g.size and (g.min() < 0 or g.max() >= N_GRIPPER):
            raise ValueError(f"gripper tokens must lie in [{self.bins}, {self.vocab_size}), got {t[:, 2].tolist()}")
        return self.decode_moves(t[:, :2]), g

    def allowed(self, slot: int) -> np.ndarray:
        """The token ids slot ``slot`` of a step may hold: bins for slots 0 and 1 (mod 3), gripper tokens for 2."""
        if slot % TOKENS_PER_STEP == 2:
            return np.arange(self.bins, self.vocab_size)
        return np.arange(self.bins)

    def to_dict(self) -> dict:
        return {"bins": self.bins, "low": [float(v) for v in self.low], "high": [float(v) for v in self.high]}

    @classmethod
    def from_dict(cls, d) -> ActionTokenizer:
        """The tokenizer ``to_dict`` wrote; ValueError naming the field that is missing or wrong."""
        if not isinstance(d, dict):
            raise ValueError(f"the action tokenizer must be a JSON object, got {type(d).__name__}")
        missing = [k for k in ("bins", "low", "high") if k not in d]
        if missing:
            raise ValueError(f"the action tokenizer lacks the field {missing[0]!r}")
        extra = sorted(set(d) - {"bins", "low", "high"})
        if extra:
            raise ValueError(f"the action tokenizer has an unknown field {extra[0]!r}")
        if isinstance(d["bins"], bool) or not isinstance(d["bins"], int) or d["bins"] < 2:
            raise ValueError(f"the action tokenizer's 'bins' must be an integer >= 2, got {d['bins']!r}")
        for key in ("low", "high"):
            v = d[key]
            if (not isinstance(v, list) or len(v) != 2
                    or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
                               for x in v)):
                raise ValueError(f"the action tokenizer's {key!r} must be a list of 2 finite numbers, got {v!r}")
        if not all(h > lo for lo, h in zip(d["low"], d["high"], strict=True)):
            raise ValueError(f"the action tokenizer's 'high' must exceed 'low', got low {d['low']} and "
                             f"high {d['high']}")
        return cls(d["bins"], d["low"], d["high"])
