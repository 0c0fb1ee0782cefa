"""Torch-style calls: mask conventions, causal flags, and the errors at the boundary;
from_torch's errors for configurations npformer does not have."""
import numpy as np
import pytest

from oracles import require

torch = require("torch")

import npformer  # noqa: E402
from npformer.interop import TorchCall, torch_style  # noqa: E402
from npformer.interop.calls import TransformerCall  # noqa: E402
from npformer.interop.conventions import attention_masks  # noqa: E402
from npformer.nn import Decoder, DecoderLayer, Encoder, EncoderLayer, Linear, MultiHeadAttention  # noqa: E402
from npformer.nn.transformer import TransformerStack  # noqa: E402
from random_params import randomize  # noqa: E402

nn = torch.nn


def test_bool_and_float_masks_agree_and_follow_torchs_convention():
    rng = np.random.default_rng(0)
    layer = torch_style(randomize(EncoderLayer(8, 2, 16, dropout=0.0, rng=rng, dtype=np.float64).eval(), rng))
    x = rng.standard_normal((2, 4, 8))
    forbid = np.array([[False, True, True, False]] * 4)                 # torch: True = NOT allowed
    as_float = np.where(forbid, -np.inf, 0.0)
    y_bool, y_float = layer(x, src_mask=forbid), layer(x, src_mask=as_float)
    np.testing.assert_allclose(y_bool, y_float, atol=1e-14)
    # npformer's own convention for the same mask is the negation (True = may attend)
    y_native, _ = layer.forward(x, mask=~forbid)
    np.testing.assert_allclose(y_bool, y_native, atol=1e-14)
    assert np.abs(y_bool - layer(x)).max() > 1e-3                       # the mask does something


def test_attention_masks_shapes_and_combination():
    kpm = np.array([[False, False, True], [False, True, True]])        # (B, Tk)
    attn = np.zeros((2 * 4, 2, 3))                                      # (B*H, Tq, Tk) float
    attn[1] = -1.0                                                      # batch 0, head 1
    mask, bias = attention_masks(attn, kpm, batch=2, n_heads=4, t_q=2, t_k=3, dtype=np.float32)
    assert mask.shape == (2, 1, 1, 3) and mask.dtype == bool
    assert np.array_equal(mask[:, 0, 0], ~kpm)
    assert bias.shape == (2, 4, 2, 3) and bias.dtype == np.float32      # float64 mask cast down, not up
    assert (bias[0, 1] == -1).all() and (bias[1] == 0).all()
    mask, bias = attention_masks(None, None, batch=1, n_heads=1, t_q=2, t_k=3, dtype=np.float64, is_causal=True)
    assert np.array_equal(mask, [[True, False, False], [True, True, False]]) and bias is None


def test_is_causal_without_a_mask_applies_the_causal_mask():
    """torch needs the mask along with the hint; npformer builds it."""
    rng = np.random.default_rng(1)
    enc = torch_style(randomize(Encoder(2, 8, 2, 16, dropout=0.0, rng=rng, dtype=np.float64).eval(), rng))
    x = rng.standard_normal((2, 5, 8))
    causal = TransformerCall.generate_square_subsequent_mask(5, np.float64)
    np.testing.assert_allclose(enc(x, is_causal=True), enc(x, mask=causal), atol=1e-14)
    assert np.array_equal(causal, nn.Transformer.generate_square_subsequent_mask(5, dtype=torch.float64).numpy())


def test_unbatched_inputs_and_head_weights():
    rng = np.random.default_rng(2)
    mha = torch_style(randomize(MultiHeadAttention(8, 2, rng=rng, dtype=np.float64).eval(), rng))
    q, kv = rng.standard_normal((3, 8)), rng.standard_normal((4, 8))
    out, w = mha(q, kv, kv, key_padding_mask=np.array([False, False, False, True]), average_attn_weights=False)
    assert out.shape == (3, 8) and w.shape == (2, 3, 4)
    np.testing.assert_allclose(w[..., 3], 0.0)
    np.testing.assert_allclose(w.sum(-1), 1.0)
    out_b, w_b = mha(q[None], kv[None], kv[None], key_padding_mask=np.array([[False, False, False, True]]))
    np.testing.assert_allclose(out_b[0], out, atol=1e-14)
    np.testing.assert_allclose(w_b[0], w.mean(0), atol=1e-14)


@pytest.mark.parametrize("call, err, words", [
    (lambda m, x: m(x, src_key_padding_mask=np.zeros((2, 5), dtype=np.int64)), TypeError,
     ["src_key_padding_mask", "int64"]),
    (lambda m, x: m(x, src_mask=np.zeros((5, 4), dtype=bool)), ValueError, ["src_mask", "(5, 5)", "(5, 4)"]),
    (lambda m, x: m(x, src_mask=np.zeros((3, 5, 5), dtype=bool)), ValueError, ["src_mask", "(4, 5, 5)"]),
    (lambda m, x: m(x, src_key_padding_mask=np.zeros((5,), dtype=bool)), ValueError,
     ["src_key_padding_mask", "(2, 5)"]),
    (lambda m, x: m(x, src_mask=np.full((5, 5), np.nan)), ValueError, ["src_mask", "NaN"]),
    (lambda m, x: m(x, src_mask=torch.zeros(5, 5, dtype=torch.bool)), TypeError, ["src_mask", "numpy"]),
    (lambda m, x: m(x.astype(np.float32)), TypeError, ["src", "float32", "float64"]),
    (lambda m, x: m(x[..., :6]), ValueError, ["src", "8 features"]),
    (lambda m, x: m(x[0, 0]), ValueError, ["src", "(B, T, E)"]),
    (lambda m, x: m(x.astype(np.int64)), TypeError, ["src", "int64"]),
])
def test_bad_input_names_the_argument(call, err, words):
    layer = torch_style(EncoderLayer(8, 2, 16, dropout=0.0, dtype=np.float64)).eval()  # 2 heads: 3-D masks (B*2, S, S)
    x = np.zeros((2, 5, 8))
    with pytest.raises(err) as info:
        call(layer, x)
    for w in words:
        assert w in str(info.value), (w, str(info.value))


def test_bad_batches_and_shapes_in_cross_attention_and_stacks():
    stack = torch_style(TransformerStack(8, 2, 1, 1, 16, dropout=0.0, dtype=np.float64).eval())
    with pytest.raises(ValueError, match=r"batch sizes of src \(2\) and tgt \(3\)"):
        stack(np.zeros((2, 4, 8)), np.zeros((3, 4, 8)))
    with pytest.raises(ValueError, match="both be batched"):
        stack(np.zeros((2, 4, 8)), np.zeros((4, 8)))
    dec = torch_style(Decoder(1, 8, 2, 16, dtype=np.float64).eval())
    with pytest.raises(ValueError, match="memory_mask must have shape \\(3, 4\\)"):
        dec(np.zeros((2, 3, 8)), np.zeros((2, 4, 8)), memory_mask=np.zeros((3, 3), dtype=bool))
    mha = torch_style(MultiHeadAttention(8, 2, dtype=np.float64))
    with pytest.raises(ValueError, match="key and value must have the same shape"):
        mha(np.zeros((1, 3, 8)), np.zeros((1, 4, 8)), np.zeros((1, 5, 8)))


@pytest.mark.parametrize("build, words", [
    (lambda: nn.MultiheadAttention(8, 2), ["batch_first=False"]),
    (lambda: nn.MultiheadAttention(8, 2, batch_first=True, kdim=4, vdim=4), ["kdim/vdim", "(4, 4)", "embed_dim (8)"]),
    (lambda: nn.MultiheadAttention(8, 2, batch_first=True, bias=False), ["bias=False"]),
    (lambda: nn.MultiheadAttention(8, 2, batch_first=True, add_bias_kv=True), ["add_bias_kv=True"]),
    (lambda: nn.MultiheadAttention(8, 2, batch_first=True, add_zero_attn=True), ["add_zero_attn=True"]),
    (lambda: nn.TransformerEncoderLayer(8, 2, 16), ["self_attn", "batch_first=False"]),
    (lambda: nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, bias=False), ["bias=False"]),
    (lambda: nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, activation=torch.tanh), ["activation", "tanh"]),
    (lambda: nn.TransformerDecoderLayer(8, 2, 16, batch_first=True, activation=nn.SiLU()),
     ["activation", "SiLU"]),
    (lambda: nn.Transformer(8, 2, 1, 1, 16), ["Transformer", "batch_first=False"]),
    (lambda: nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16), 2, enable_nested_tensor=False),
     ["TransformerEncoder.layers.0.self_attn", "batch_first=False"]),
])
def test_from_torch_rejects_unsupported_configs_by_name(build, words):
    with pytest.raises(ValueError) as info:
        npformer.from_torch(build())
    for w in words:
        assert w in str(info.value), (w, str(info.value))


def test_from_torch_rejects_other_modules_and_dtypes():
    with pytest.raises(TypeError, match="from_torch accepts .* got torch.nn.modules.linear.Linear"):
        npformer.from_torch(nn.Linear(2, 2))
    with pytest.raises(TypeError, match="float16"):
        npformer.from_torch(nn.MultiheadAttention(8, 2, batch_first=True, dtype=torch.float16))


def test_from_torch_accepts_activation_modules():
    for act, name in ((nn.ReLU(), "relu"), (nn.GELU(), "gelu"), (nn.GELU(approximate="tanh"), "gelu_tanh")):
        layer = npformer.from_torch(nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, activation=act))
        assert layer.ffn.activation == name


def test_torch_style_wraps_the_six_kinds_and_passes_the_module_through():
    rng = np.random.default_rng(3)
    layer = DecoderLayer(8, 2, 16, dropout=0.1, rng=rng, dtype=np.float64)
    call = torch_style(layer)
    assert isinstance(call, TorchCall) and call.module is layer and torch_style(call) is call
    assert call.eval() is call and not layer.training and call.training is False
    assert list(call.state_dict()) == list(layer.state_dict()) and call.params is layer.params
    assert call.dtype == np.float64
    assert call.self_attn is layer.self_attn
    call.norm_first = True                                                # attributes are the module's
    assert layer.norm_first
    x, mem = rng.standard_normal((2, 3, 8)), rng.standard_normal((2, 4, 8))
    y, _ = call.forward(x, mem, causal=False)                             # forward/backward reach the module
    np.testing.assert_array_equal(call(x, mem), y)
    for mod in (MultiHeadAttention(8, 2), EncoderLayer(8, 2, 16), layer, Encoder(1, 8, 2, 16),
                Decoder(1, 8, 2, 16), TransformerStack(8, 2, 1, 1, 16)):
        assert type(torch_style(mod)).wraps is type(mod)
    with pytest.raises(TypeError, match="torch_style wraps npformer's MultiHeadAttention, .* got .*Linear"):
        torch_style(Linear(2, 2))
    with pytest.raises(TypeError, match="EncoderLayerCall wraps an npformer EncoderLayer"):
        type(torch_style(EncoderLayer(8, 2, 16)))(layer)
    with pytest.raises(ValueError, match="Encoder has no layers to call"):
        torch_style(Encoder(0, 8, 2, 16))(np.zeros((1, 2, 8), np.float32))


def test_from_torch_returns_a_call_and_to_torch_takes_either():
    t = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, dtype=torch.float64)
    call = npformer.from_torch(t)
    assert isinstance(call, TorchCall) and isinstance(call.module, EncoderLayer)
    for given in (call, call.module):
        back = npformer.to_torch(given)
        assert type(back) is type(t)
        assert all(torch.equal(v, back.state_dict()[k]) for k, v in t.state_dict().items())
