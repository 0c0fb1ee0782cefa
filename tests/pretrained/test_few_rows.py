"""matmul_inference (ops/inference.py): a few rows by a weight matrix in tiles, the path a query's
products take, pinned to np.matmul (float64, 1e-12). End to end, queries through it against
sentence-transformers: tests/pretrained/test_fast_paths.py."""
import numpy as np
import pytest

import npformer.ops.inference as inference
from npformer.ops.inference import FEW_ROWS, TILE_DEPTH, TILE_MACS, matmul_inference

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

