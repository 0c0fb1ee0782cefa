"""Sinusoidal positions, exactly the paper's (section 3.5):
PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(pos / 10000^(2i/d)).

They have no parameters, hence no backward of their own: adding them to x passes the gradient
through unchanged, which the model tests cover."""
import math

import numpy as np
import pytest

from npformer.ops import sinusoidal_positions, sinusoidal_positions_2d
from oracles import require


@pytest.mark.parametrize("n, d", [(7, 9), (50, 8), (3, 1), (1, 2)])
def test_exact_formula_element_by_element(n, d):
    pe = sinusoidal_positions(n, d, dtype=np.float64)
    assert pe.shape == (n, d) and pe.dtype == np.float64
    for pos in range(n):
        for j in range(d):
            i2 = j - (j % 2)                                           # the 2i shared by the pair
            angle = pos / 10000.0 ** (i2 / d)
            want = math.sin(angle) if j % 2 == 0 else math.cos(angle)
            assert abs(pe[pos, j] - want) <= 1e-13, (pos, j)


def test_against_torch_float64():
    torch = require("torch")
    n, d = 33, 16
    pos = torch.arange(n, dtype=torch.float64)[:, None]
    inv_freq = torch.pow(torch.tensor(10000.0, dtype=torch.float64), -torch.arange(0, d, 2, dtype=torch.float64) / d)
    ref = torch.zeros(n, d, dtype=torch.float64)
    ref[:, 0::2] = torch.sin(pos * inv_freq)
    ref[:, 1::2] = torch.cos(pos * inv_freq)
    np.testing.assert_allclose(sinusoidal_positions(n, d, np.float64), ref.numpy(), rtol=0, atol=1e-12)


def test_float32_is_the_rounded_float64_and_first_rows():
    pe32 = sinusoidal_positions(20, 10)
    assert pe32.dtype == np.float32
    np.testing.assert_array_equal(pe32, sinusoidal_positions(20, 10, np.float64).astype(np.float32))
    np.testing.assert_array_equal(pe32[0], np.tile([0.0, 1.0], 5))       # sin 0, cos 0
    np.testing.assert_allclose(pe32[1, :2], [math.sin(1.0), math.cos(1.0)], rtol=1e-7)


def test_fixed_offset_is_a_rotation_of_each_pair():
    # the paper's reason for sinusoids: PE[pos + k] is a linear function of PE[pos]
    d, k = 12, 5
    pe = sinusoidal_positions(40, d, np.float64)
    for i in range(d // 2):
        w = 10000.0 ** (-2 * i / d)
        rot = np.array([[math.cos(k * w), -math.sin(k * w)], [math.sin(k * w), math.cos(k * w)]])
        pair = pe[:, 2 * i: 2 * i + 2]                                 # (T, 2) = (sin a, cos a)
        np.testing.assert_allclose(pair[:-k] @ rot, pair[k:], atol=1e-12)


def test_two_d_positions_and_bad_sizes():
    pe = sinusoidal_positions_2d(3, 4, 8, np.float64)
    assert pe.shape == (12, 8)
    rows, cols = sinusoidal_positions(3, 4, np.float64), sinusoidal_positions(4, 4, np.float64)
    np.testing.assert_array_equal(pe[1 * 4 + 2], np.concatenate([rows[1], cols[2]]))
    assert sinusoidal_positions(0, 4).shape == (0, 4)
    with pytest.raises(ValueError, match="d_model"):
        sinusoidal_positions(3, 0)
    with pytest.raises(ValueError, match="divisible by 4"):
        sinusoidal_positions_2d(2, 2, 6)
