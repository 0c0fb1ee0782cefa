"""The inference fast twins (ops/inference.py, nn/inference.py) against the reference path they
mirror: float64, random weights (LayerNorm and biases too, so that a norm or a bias the fast path
drops shows), to 1e-12. No torch needed: the reference path itself is checked against torch in
tests/ops and tests/nn."""
import numpy as np
import pytest

import npformer.ops
from npformer.nn import Encoder, FeedForward, LayerNorm, Linear, MultiHeadAttention, padding_mask
from npformer.nn.inference import (
    encoder_packed,
    equal_length_runs,
    feedforward_packed,
    layernorm_packed,
    linear_packed,
    self_attention_packed,
    transposed_weights,
)
from npformer.ops import attention_forward, gelu_forward, layernorm_forward, softmax_forward, use_kernels
from npformer.ops.inference import attention_inference, gelu_inference_, layernorm_inference, softmax_numerator_
from random_params import randomize

TOL = 1e-12


def max_rel(a, b):
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-300))


@pytest.mark.parametrize("t_q,t_k,block", [(7, 7, 1 << 18), (37, 50, 300), (1, 9, 1), (64, 3, 64)])
def test_attention_inference_equals_forward(rng, t_q, t_k, block):
    q = rng.normal(size=(2, 3, t_q, 8))                               # (B, H, Tq, D)
    k = rng.normal(size=(2, 3, t_k, 8)) * 2                           # (B, H, Tk, D)
    v = rng.normal(size=(2, 3, t_k, 5))                               # (B, H, Tk, Dv)
    ref, _, _ = attention_forward(q, k, v)
    out = attention_inference(q, k, v, block=block)                   # small blocks: many query blocks
    assert out.shape == ref.shape and max_rel(out, ref) < TOL
    big = attention_inference(q * 40, k, v, block=block)              # scores in the hundreds: max subtracted
    assert np.isfinite(big).all() and max_rel(big, attention_forward(q * 40, k, v)[0]) < TOL


@pytest.mark.parametrize("t", [11, 40])        # 40 keys: k^T copied contiguous (KT_COPY_MIN_KEYS), 11: a view
def test_attention_inference_strided_views_and_out(rng, t):
    """Heads read straight from a (T, 3E) projection and written into a (T, E) buffer."""
    h, d = 4, 6
    qkv = rng.normal(size=(t, 3 * h * d))                             # (T, 3E)
    heads = qkv.reshape(t, 3, h, d).transpose(1, 2, 0, 3)             # (3, H, T, D) view
    buf = np.full((t, h * d), np.nan)                                 # (T, E)
    out = attention_inference(heads[0], heads[1], heads[2], out=buf.reshape(t, h, d).transpose(1, 0, 2), block=50)
    ref, _, _ = attention_forward(*(np.ascontiguousarray(a) for a in heads))
    assert out.base is not None and not np.isnan(buf).any()
    assert max_rel(buf.reshape(t, h, d).transpose(1, 0, 2), ref) < TOL


def test_layernorm_inference_of_a_transposed_view(rng):
    """x with any strides (here a 3-d transposed view) and no out: the result is made C-ordered."""
    x = rng.normal(size=(4, 3, 2)).transpose(2, 1, 0)               # (2, 3, 4), neither C nor a plain view
    w, b = rng.normal(size=4), rng.normal(size=4)
    assert max_rel(layernorm_inference(x, w, b), layernorm_forward(x, w, b)[0]) < TOL


def test_attention_inference_float32_stays_float32(rng):
    q, k, v = (rng.normal(size=(3, 10, 4)).astype(np.float32) for _ in range(3))
    out = attention_inference(q, k, v)
    assert out.dtype == np.float32
    assert max_rel(out, attention_forward(q, k, v)[0]) < 1e-5


def test_softmax_numerator_in_place(rng):
    x = rng.normal(size=(4, 9)) * 30
    buf = x.copy()
    sums = softmax_numerator_(buf)
    assert sums.shape == (4, 1)
    assert max_rel(buf / sums, softmax_forward(x.copy())[0]) < TOL


@pytest.mark.parametrize("in_place", [False, True])
def test_layernorm_inference_equals_forward(rng, in_place):
    x = rng.normal(size=(3, 2000, 16)) * 5 + 2                        # (B, T, C): 6000 rows, in blocks of 4096
    w, b = rng.normal(size=16), rng.normal(size=16)
    ref, _ = layernorm_forward(x.copy(), w, b, eps=1e-12)
    buf = x.copy()
    out = layernorm_inference(buf, w, b, eps=1e-12, out=buf if in_place else None)
    assert (out is buf) == in_place and max_rel(out, ref) < TOL
    assert in_place or np.array_equal(buf, x), "the input is left alone unless out is it"


def test_ops_reexport_the_fast_kernels():
    for name in ("attention_inference", "layernorm_inference", "softmax_numerator_"):
        assert getattr(npformer.ops, name) is getattr(npformer.ops.inference, name)


def test_feedforward_packed_in_row_blocks(rng):
    ffn = randomize(FeedForward(12, 40, activation="gelu", rng=rng).astype(np.float64).eval(), rng)
    x = rng.normal(size=(2, 13, 12))                                  # (B, T, E)
    ref, _ = ffn.forward(x)
    out, cache = feedforward_packed(ffn, x, rows=5)                   # 26 rows in blocks of 5
    assert cache is None and max_rel(out, ref) < TOL


def test_self_attention_packed_equals_padded_forward(rng):
    """Packed sequences without padding == the padded batch with a key padding mask."""
    mha = randomize(MultiHeadAttention(12, 3, rng=rng).astype(np.float64).eval(), rng)
    lengths = [5, 1, 9]
    x = rng.normal(size=(3, 9, 12))                                   # (B, T, E), padded to 9
    ids = np.array([[1] * n + [0] * (9 - n) for n in lengths])        # (B, T), 0 = padding
    ref, _ = mha.forward(x, mask=padding_mask(ids, 0))
    packed = np.concatenate([x[i, :n] for i, n in enumerate(lengths)])  # (N, E)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    out, cache = self_attention_packed(mha, packed, offsets)
    assert cache is None
    for i, n in enumerate(lengths):
        assert max_rel(out[offsets[i]:offsets[i + 1]], ref[i, :n]) < TOL
    one, _ = self_attention_packed(mha, x[2])                         # no offsets: one sequence
    assert max_rel(one, mha.forward(x[2:3])[0][0]) < TOL


def test_self_attention_packed_checks_its_input(rng):
    mha = MultiHeadAttention(12, 3, rng=rng).eval()
    x = np.zeros((6, 12), dtype=np.float32)
    with pytest.raises(ValueError, match=r"packed as \(N, 12\)"):
        self_attention_packed(mha, x[None])
    with pytest.raises(ValueError, match="offsets must run from 0 to N=6"):
        self_attention_packed(mha, x, offsets=[0, 2, 5])


@pytest.mark.parametrize("norm_first,activation", [(False, "gelu"), (True, "relu")])
def test_encoder_packed_equals_padded_forward(rng, norm_first, activation):
    enc = Encoder(2, 16, 4, 24, dropout=0.1, activation=activation, norm_first=norm_first,
                  final_norm=norm_first, eps=1e-12, rng=rng).astype(np.float64).eval()
    randomize(enc, rng)
    lengths = [7, 3, 12, 1]
    x = rng.normal(size=(4, 12, 16))                                  # (B, T, E)
    ids = np.array([[1] * n + [0] * (12 - n) for n in lengths])
    ref, _ = enc.forward(x, mask=padding_mask(ids, 0))
    packed = np.concatenate([x[i, :n] for i, n in enumerate(lengths)])  # (N, E)
    before = packed.copy()
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    out, _ = encoder_packed(enc, packed, offsets)
    assert np.array_equal(packed, before), "the packed path must not write into its input"
    for i, n in enumerate(lengths):
        assert max_rel(out[offsets[i]:offsets[i + 1]], ref[i, :n]) < TOL


def test_layernorm_packed(rng):
    ln = randomize(LayerNorm(8, eps=1e-6).astype(np.float64), rng)
    x = rng.normal(size=(5, 8))
    assert max_rel(layernorm_packed(ln, x), ln.forward(x)[0]) < TOL


@pytest.mark.parametrize("bias", [True, False])
def test_linear_packed_into_out(rng, bias):
    lin = randomize(Linear(6, 4, bias=bias, rng=rng).astype(np.float64), rng)
    x = rng.normal(size=(3, 5, 6))                                    # (B, T, I)
    buf = np.full((3, 5, 4), np.nan)                                  # (B, T, O)
    out = linear_packed(lin, x, out=buf)
    assert out is buf and max_rel(out, lin.forward(x)[0]) < TOL


def test_gelu_inference_in_place_equals_gelu_forward(rng):
    """Same float32 formula step for step as the NumPy reference (not its compiled twin, which rounds
    once from float64), tail (x < -2 sqrt 2) and saturation included."""
    x = np.concatenate([rng.normal(size=70000) * 3, [-40.0, -6.0, -2.83, -2.82, 0.0, 5.0, 40.0]])
    x = x.astype(np.float32).reshape(-1, 7)                           # (N, 7): blocks of 32768 and a rest
    with use_kernels("numpy"):
        ref, _ = gelu_forward(x)
    buf = x.copy()
    out = gelu_inference_(buf)
    assert out is buf and out.dtype == np.float32
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-12)
    with pytest.raises(TypeError, match="C-contiguous float32"):
        gelu_inference_(x.astype(np.float64))


def test_equal_length_runs():
    offsets = np.cumsum([0, 4, 4, 4, 2, 2, 7, 1, 1, 4])
    assert equal_length_runs(offsets) == [(0, 12, 4), (12, 4, 2), (16, 7, 7), (23, 2, 1), (25, 4, 4)]
    assert equal_length_runs([0, 5]) == [(0, 5, 5)] and equal_length_runs([0]) == []


def test_self_attention_packed_runs_of_equal_lengths(rng):
    """Sequences sorted by length share batched products (equal_length_runs): still each
    sequence attends to its own rows only, as the padded batch with a key padding mask."""
    mha = randomize(MultiHeadAttention(12, 3, rng=rng).astype(np.float64).eval(), rng)
    lengths = [6, 6, 6, 3, 3, 1, 1, 1, 5]
    t = max(lengths)
    x = rng.normal(size=(len(lengths), t, 12))                       # (B, T, E)
    ids = np.array([[1] * n + [0] * (t - n) for n in lengths])
    ref, _ = mha.forward(x, mask=padding_mask(ids, 0))
    packed = np.concatenate([x[i, :n] for i, n in enumerate(lengths)])  # (N, E)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    for weights in (None, transposed_weights(mha)):
        out, _ = self_attention_packed(mha, packed, offsets, weights=weights)
        for i, n in enumerate(lengths):
            assert max_rel(out[offsets[i]:offsets[i + 1]], ref[i, :n]) < TOL


def test_encoder_packed_with_transposed_weights(rng):
    """W^T stored contiguous (transposed_weights): the same numbers as the modules' own weights,
    float64 and float32 (in-place GELU) alike."""
    enc = Encoder(2, 16, 4, 24, activation="gelu", norm_first=False, final_norm=False, eps=1e-12,
                  rng=rng).astype(np.float64).eval()
    randomize(enc, rng)
    weights = transposed_weights(enc)
    assert len(weights) == 2 * 4 and all(w.flags.c_contiguous for w in weights.values())
    lengths = [5, 5, 2, 9]
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    x = rng.normal(size=(offsets[-1], 16))                             # (N, E)
    ref, _ = encoder_packed(enc, x, offsets)
    out, _ = encoder_packed(enc, x, offsets, weights)
    assert max_rel(out, ref) < TOL
    enc32 = enc.astype(np.float32)
    out32, _ = encoder_packed(enc32, x.astype(np.float32), offsets, transposed_weights(enc32))
    assert out32.dtype == np.float32 and max_rel(out32, ref) < 1e-5
