"""The kernels of ops/inference.py that all-MiniLM-L6-v2's speed asked for, pinned to their references:

- matmul_inference: a few rows by a weight matrix in tiles, the path a query's products take,
  against np.matmul (float64, 1e-12); end to end, queries through it against sentence-transformers
  in tests/pretrained/test_fast_paths.py;
- attention_inference over many sequences a few at a time (SCORES_BLOCK), against attention_forward;
- attention_inference without the row maxima (scores bounded by |q| |k| within EXP_SAFE) and with
  them (beyond), against attention_forward: float64 to 1e-12, float32 at the edges of the bound.
"""
import numpy as np
import pytest

import npformer.ops.inference as inference
from npformer.ops import attention_forward
from npformer.ops.inference import (
    EXP_SAFE,
    FEW_ROWS,
    SCORES_BLOCK,
    TILE_DEPTH,
    TILE_MACS,
    attention_inference,
    matmul_inference,
)

TOL = 1e-12


def max_rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


class CountingNumpy:
    """numpy, with its matmul calls counted (stands in for ops/inference.py's np)."""

    def __init__(self):
        self.matmuls = 0

    def matmul(self, *args, **kwargs):
        self.matmuls += 1
        return np.matmul(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(np, name)


# (rows, inputs, outputs): a query through the four products of all-MiniLM-L6-v2, ragged tiles
# (inputs and outputs not multiples of the tile), one row, FEW_ROWS and one more
@pytest.mark.parametrize("n,k,o", [(12, 384, 1152), (12, 384, 384), (12, 384, 1536), (12, 1536, 384),
                                   (7, 500, 333), (1, 1536, 384), (FEW_ROWS, 1000, 700), (FEW_ROWS + 1, 384, 1152)])
def test_matmul_inference_equals_matmul(rng, n, k, o):
    x, w = rng.normal(size=(n, k)), rng.normal(size=(k, o))
    ref = np.matmul(x, w)                                             # (n, O)
    out = matmul_inference(x, w)
    assert out.shape == ref.shape and max_rel(out, ref) < TOL
    buf = np.full((n, o + 3), np.nan)                                 # written through a view
    into = matmul_inference(x, w, out=buf[:, 1:o + 1])
    assert np.shares_memory(into, buf) and max_rel(buf[:, 1:o + 1], ref) < TOL
    assert np.isnan(buf[:, 0]).all() and np.isnan(buf[:, o + 1:]).all()


def test_few_rows_go_in_tiles_and_many_rows_whole(rng, monkeypatch):
    counting = CountingNumpy()
    monkeypatch.setattr(inference, "np", counting)
    x, w = rng.normal(size=(12, 1536)).astype(np.float32), rng.normal(size=(1536, 384)).astype(np.float32)
    matmul_inference(x, w)
    cols = max(16, TILE_MACS // (12 * TILE_DEPTH) // 16 * 16)
    assert counting.matmuls == -(-1536 // TILE_DEPTH) * -(-384 // cols) > 1
    counting.matmuls = 0
    matmul_inference(rng.normal(size=(FEW_ROWS + 1, 1536)).astype(np.float32), w)
    assert counting.matmuls == 1



def scores_of(q, k, scale):
    return np.einsum("...qd,...kd->...qk", q.astype(np.float64), k.astype(np.float64)) * scale


@pytest.mark.parametrize("t", [1, 12, 185])
def test_attention_inference_within_the_bound_equals_forward(rng, t):
    q, k, v = (rng.normal(size=(2, 4, t, 32)) for _ in range(3))      # (c, H, T, D): scores within +-20
    ref, _, _ = attention_forward(q, k, v)
    assert np.abs(scores_of(q, k, 32 ** -0.5)).max() < EXP_SAFE
    assert max_rel(attention_inference(q, k, v), ref) < TOL
    assert max_rel(attention_inference(q, k, v, block=t * 32 // 3), ref) < TOL   # several query blocks


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_float32_scores_at_the_edge_of_the_bound(rng, sign):
    """512 keys, every score just inside +-EXP_SAFE: exp neither overflows nor flushes to zero."""
    d, t = 32, 512
    unit = rng.normal(size=d)
    unit /= np.linalg.norm(unit)
    q = np.tile(unit * np.sqrt(EXP_SAFE - 0.5), (4, 1))               # (4, D)
    k = np.tile(sign * unit * np.sqrt(EXP_SAFE - 0.5), (t, 1))        # (T, D): q.k = +-(EXP_SAFE - 0.5)
    k += rng.normal(size=(t, d)) * 1e-3                               # not all equal
    v = rng.normal(size=(t, 8))
    out = attention_inference(*(a.astype(np.float32) for a in (q, k, v)), scale=1.0)
    ref, _, _ = attention_forward(q, k, v, scale=1.0)
    assert np.isfinite(out).all() and max_rel(out, ref) < 1e-5


def test_float32_scores_past_the_bound_subtract_the_maximum(rng):
    """Scores in the hundreds, beyond exp's float32 range: the row maxima are subtracted."""
    q, k = rng.normal(size=(2, 5, 9, 16)) * 12, rng.normal(size=(2, 5, 11, 16)) * 12   # scores ~ +-500
    v = rng.normal(size=(2, 5, 11, 7))
    assert np.abs(scores_of(q, k, 0.25)).max() > 200
    out = attention_inference(*(a.astype(np.float32) for a in (q, k, v)))
    ref, _, _ = attention_forward(q, k, v)
    assert np.isfinite(out).all() and max_rel(out, ref) < 1e-5


def test_attention_inference_over_many_sequences_goes_a_few_at_a_time(rng, monkeypatch):
    c, h, t, d = 37, 3, 40, 8                                         # 37 sequences: 27 at a time, then 10
    q, k, v = (rng.normal(size=(c, h, t, d)) for _ in range(3))       # (c, H, T, D)
    ref, _, _ = attention_forward(q, k, v)
    calls = []
    real = inference.attention_inference

    def counting(q, *args, **kwargs):
        calls.append(q.shape[0])
        return real(q, *args, **kwargs)
    monkeypatch.setattr(inference, "attention_inference", counting)
    out = inference.attention_inference(q, k, v)
    items = SCORES_BLOCK // (h * t * t)
    assert calls == [c, items, c - items] and 1 < items < c
    assert max_rel(out, ref) < TOL
