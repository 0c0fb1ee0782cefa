"""Every module's forward and every gradient against torch autograd in float64.

The torch modules are perturbed before npformer loads their weights (torch_cases.perturb): fresh
ones have LayerNorm weights 1 and biases 0 and attention biases 0, which would hide a swapped norm
or an ignored bias."""
import copy

import numpy as np
import pytest

from oracles import require

torch = require("torch")

from torch_cases import perturb  # noqa: E402

from npformer.nn import (  # noqa: E402
    Decoder,
    DecoderLayer,
    Embeddings,
    Encoder,
    EncoderLayer,
    FeedForward,
    LayerNorm,
    Linear,
    MultiHeadAttention,
    add_grads,
    padding_mask,
)
from random_params import randomize  # noqa: E402

RTOL = 1e-9


def rel_err(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def torch_key(k: str) -> str:
    return k.replace("ffn.linear1", "linear1").replace("ffn.linear2", "linear2")


def load_from(np_mod, t_mod):
    sd = {k: v.detach().numpy() for k, v in t_mod.state_dict().items()}
    np_mod.load_state_dict({k: sd[torch_key(k)] for k in np_mod.state_dict()})


def check_grads(grads, t_mod, np_mod):
    assert set(grads) == set(np_mod.state_dict()), "a gradient for every parameter, and nothing else"
    for k, g in grads.items():
        tg = dict(t_mod.named_parameters())[torch_key(k)].grad.numpy()
        assert g.shape == tg.shape, k
        assert rel_err(g, tg) < RTOL, (k, rel_err(g, tg))


def test_add_grads_sums_shared_keys():
    g = {"a.w": np.ones(2)}
    add_grads(g, {"w": np.ones(2), "b": np.zeros(1)}, "a")
    assert np.array_equal(g["a.w"], [2.0, 2.0]) and "a.b" in g


def test_linear_and_layernorm_modules():
    rng = np.random.default_rng(0)
    lin = Linear(5, 3, rng=rng).astype(np.float64)
    torch.manual_seed(0)
    t = perturb(torch.nn.Linear(5, 3).double(), 0)
    load_from(lin, t)
    x = rng.standard_normal((2, 4, 5))
    y, c = lin.forward(x)
    xt = torch.tensor(x, requires_grad=True)
    out = t(xt)
    assert rel_err(y, out.detach()) < RTOL
    dy = rng.standard_normal(y.shape)
    (out * torch.tensor(dy)).sum().backward()
    dx, g = lin.backward(dy, c)
    assert rel_err(dx, xt.grad) < RTOL
    check_grads(g, t, lin)

    ln = LayerNorm(7, eps=1e-6).astype(np.float64)
    tl = perturb(torch.nn.LayerNorm(7, eps=1e-6).double(), 0)
    load_from(ln, tl)
    x = rng.standard_normal((3, 7)) * 5 + 2
    y, c = ln.forward(x)
    xt = torch.tensor(x, requires_grad=True)
    dy = rng.standard_normal(y.shape)
    out = tl(xt)
    assert rel_err(y, out.detach()) < RTOL
    (out * torch.tensor(dy)).sum().backward()
    dx, g = ln.backward(dy, c)
    assert rel_err(dx, xt.grad) < RTOL
    check_grads(g, tl, ln)


@pytest.mark.parametrize("cross", [False, True])
def test_multihead_attention(cross):
    rng = np.random.default_rng(1)
    E, H, B, Tq, Tk = 12, 3, 2, 5, 7 if cross else 5
    mha = MultiHeadAttention(E, H, rng=rng).astype(np.float64).eval()
    torch.manual_seed(1)
    t = perturb(torch.nn.MultiheadAttention(E, H, batch_first=True).double(), 1)
    load_from(mha, t)
    xq = rng.standard_normal((B, Tq, E))
    xkv = rng.standard_normal((B, Tk, E)) if cross else None
    keep = np.ones((B, Tk), bool)
    keep[1, -2:] = False
    out, c = mha.forward(xq, xkv, mask=keep[:, None, None, :])
    w = MultiHeadAttention.attention_weights(c)
    qt = torch.tensor(xq, requires_grad=True)
    kvt = torch.tensor(xkv, requires_grad=True) if cross else qt
    ot, wt = t(qt, kvt, kvt, key_padding_mask=torch.tensor(~keep), average_attn_weights=False)
    assert rel_err(out, ot.detach()) < RTOL and rel_err(w, wt.detach()) < RTOL
    dy = rng.standard_normal(out.shape)
    (ot * torch.tensor(dy)).sum().backward()
    (dq, dkv), g = mha.backward(dy, c)
    assert rel_err(dq, qt.grad) < RTOL
    if cross:
        assert rel_err(dkv, kvt.grad) < RTOL
    else:
        assert dkv is None
    check_grads(g, t, mha)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_layer(norm_first, activation):
    rng = np.random.default_rng(2)
    E, H, F = 12, 4, 18
    layer = EncoderLayer(E, H, F, dropout=0.0, activation=activation, norm_first=norm_first, rng=rng)
    layer = layer.astype(np.float64).eval()
    torch.manual_seed(2)
    t = perturb(torch.nn.TransformerEncoderLayer(E, H, F, dropout=0.0, activation=activation, batch_first=True,
                                                 norm_first=norm_first).double(), 2)
    load_from(layer, t)
    x = rng.standard_normal((3, 6, E))
    ids = rng.integers(1, 5, (3, 6))
    ids[0, 4:] = 0
    y, c = layer.forward(x, mask=padding_mask(ids, 0))
    xt = torch.tensor(x, requires_grad=True)
    yt = t(xt, src_key_padding_mask=torch.tensor(ids == 0))
    assert rel_err(y, yt.detach()) < RTOL
    dy = rng.standard_normal(y.shape)
    (yt * torch.tensor(dy)).sum().backward()
    dx, g = layer.backward(dy, c)
    assert rel_err(dx, xt.grad) < RTOL
    check_grads(g, t, layer)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer(norm_first):
    rng = np.random.default_rng(3)
    E, H, F = 10, 2, 14
    layer = DecoderLayer(E, H, F, dropout=0.0, norm_first=norm_first, rng=rng).astype(np.float64).eval()
    torch.manual_seed(3)
    t = perturb(torch.nn.TransformerDecoderLayer(E, H, F, dropout=0.0, batch_first=True,
                                                 norm_first=norm_first).double(), 3)
    load_from(layer, t)
    x, mem = rng.standard_normal((2, 5, E)), rng.standard_normal((2, 7, E))
    src_keep = np.ones((2, 7), bool)
    src_keep[1, 5:] = False
    y, c = layer.forward(x, mem, memory_mask=src_keep[:, None, None, :])
    xt, mt = torch.tensor(x, requires_grad=True), torch.tensor(mem, requires_grad=True)
    causal = torch.nn.Transformer.generate_square_subsequent_mask(5, dtype=torch.float64)
    yt = t(xt, mt, tgt_mask=causal, memory_key_padding_mask=torch.tensor(~src_keep))
    assert rel_err(y, yt.detach()) < RTOL
    dy = rng.standard_normal(y.shape)
    (yt * torch.tensor(dy)).sum().backward()
    (dx, dm), g = layer.backward(dy, c)
    assert rel_err(dx, xt.grad) < RTOL and rel_err(dm, mt.grad) < RTOL
    check_grads(g, t, layer)


def test_stacks_with_final_norm():
    rng = np.random.default_rng(4)
    E, H, F, N = 8, 2, 16, 2
    enc = Encoder(N, E, H, F, dropout=0.0, norm_first=True, final_norm=True, rng=rng).astype(np.float64).eval()
    dec = Decoder(N, E, H, F, dropout=0.0, norm_first=True, final_norm=True, rng=rng).astype(np.float64).eval()
    torch.manual_seed(4)
    t = perturb(torch.nn.Transformer(E, H, N, N, F, dropout=0.0, batch_first=True, norm_first=True).double(), 4)
    load_from(enc, t.encoder)
    load_from(dec, t.decoder)
    src, tgt = rng.standard_normal((2, 6, E)), rng.standard_normal((2, 4, E))
    mem, ce = enc.forward(src)
    y, cd = dec.forward(tgt, mem)
    st, tt = torch.tensor(src, requires_grad=True), torch.tensor(tgt, requires_grad=True)
    yt = t(st, tt, tgt_mask=torch.nn.Transformer.generate_square_subsequent_mask(4, dtype=torch.float64))
    assert rel_err(y, yt.detach()) < RTOL
    dy = rng.standard_normal(y.shape)
    (yt * torch.tensor(dy)).sum().backward()
    (dt, dmem), gd = dec.backward(dy, cd)
    ds, ge = enc.backward(dmem, ce)
    assert rel_err(dt, tt.grad) < RTOL and rel_err(ds, st.grad) < RTOL
    check_grads(ge, t.encoder, enc)
    check_grads(gd, t.decoder, dec)
    assert len(Encoder.attention_weights(ce)) == N and Decoder.attention_weights(cd)[0]["cross"].shape == (2, H, 4, 6)


@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
def test_embeddings_backward_matches_torch(positional):
    rng = np.random.default_rng(5)
    V, E, T = 11, 6, 5
    emb = Embeddings(V, E, max_len=9, positional=positional, dropout=0.0, rng=rng).astype(np.float64)
    ids = rng.integers(0, V, (3, T))
    ids[0, :3] = 4  # repeated ids must sum their gradients
    x, c = emb.forward(ids, offset=2)
    w = torch.tensor(emb.tok.params["weight"], requires_grad=True)
    pos = (torch.tensor(emb.pos.params["weight"], requires_grad=True) if positional == "learned"
           else torch.tensor(emb.positions(9, 0, np.float64)))
    xt = w[torch.tensor(ids)] * np.sqrt(E) + pos[2:2 + T]
    assert rel_err(x, xt.detach()) < RTOL
    dy = rng.standard_normal(x.shape)
    (xt * torch.tensor(dy)).sum().backward()
    _, g = emb.backward(dy, c)
    assert rel_err(g["tok.weight"], w.grad) < RTOL
    if positional == "learned":
        assert rel_err(g["pos.weight"], pos.grad) < RTOL
    with pytest.raises(ValueError, match="max_len 9"):
        emb.forward(ids, offset=6)


def test_feedforward_finite_differences():
    rng = np.random.default_rng(6)
    ff = FeedForward(4, 7, "gelu", rng=rng).astype(np.float64).eval()
    x = rng.standard_normal((2, 3, 4))
    dy = rng.standard_normal((2, 3, 4))
    y, c = ff.forward(x)
    dx, g = ff.backward(dy, c)
    h = 1e-6
    for key in ("linear1.weight", "linear2.bias"):
        p = ff.state_dict()[key]
        idx = tuple(rng.integers(0, n) for n in p.shape)
        old = p[idx]
        p[idx] = old + h
        up = (ff.forward(x)[0] * dy).sum()
        p[idx] = old - h
        down = (ff.forward(x)[0] * dy).sum()
        p[idx] = old
        assert abs((up - down) / (2 * h) - g[key][idx]) < 1e-7
    xp = x.copy()
    xp[1, 2, 3] += h
    xm = x.copy()
    xm[1, 2, 3] -= h
    num = ((ff.forward(xp)[0] - ff.forward(xm)[0]) * dy).sum() / (2 * h)
    assert abs(num - dx[1, 2, 3]) < 1e-7


def test_dropout_needs_rng_in_training_and_is_off_in_eval():
    layer = EncoderLayer(8, 2, 16, dropout=0.1)
    x = np.random.default_rng(0).standard_normal((1, 3, 8)).astype(np.float32)
    with pytest.raises(ValueError, match="rng"):
        layer.forward(x)
    y1, _ = layer.forward(x, rng=np.random.default_rng(1))
    y2, _ = layer.forward(x, rng=np.random.default_rng(1))
    assert np.array_equal(y1, y2) and y1.dtype == np.float32
    layer.eval()
    y3, _ = layer.forward(x)
    assert not np.array_equal(y1, y3)


def test_float32_stays_float32_and_matches_float64():
    rng = np.random.default_rng(7)
    layer = randomize(DecoderLayer(8, 2, 16, dropout=0.0, rng=rng).eval(), rng)
    layer64 = copy.deepcopy(layer).astype(np.float64)                   # the same (float32) weights
    x = rng.standard_normal((2, 3, 8)).astype(np.float32)
    m = rng.standard_normal((2, 4, 8)).astype(np.float32)
    keep = np.ones((2, 1, 1, 4), bool)
    keep[1, ..., 3] = False
    dy = rng.standard_normal((2, 3, 8)).astype(np.float32)
    y, c = layer.forward(x, m, memory_mask=keep)
    (dx, dm), g = layer.backward(dy, c)
    assert y.dtype == dx.dtype == dm.dtype == np.float32
    assert all(v.dtype == np.float32 for v in g.values())
    y64, c64 = layer64.forward(x.astype(np.float64), m.astype(np.float64), memory_mask=keep)
    (dx64, dm64), g64 = layer64.backward(dy.astype(np.float64), c64)
    # float32 rounding through a few dozen operations: ~1e-6 relative, normwise
    for got, want, name in [(y, y64, "y"), (dx, dx64, "dx"), (dm, dm64, "dmemory")] + [(g[k], g64[k], k) for k in g]:
        assert rel_err(got, want) < 1e-5, (name, rel_err(got, want))


@pytest.mark.parametrize("shared", ["memory", "queries"])
def test_cross_attention_with_one_side_shared_over_the_batch(shared):
    """Cross-attention whose memory (or queries) is one sequence for the whole batch gives what the
    same sequence repeated over the batch gives, its gradient summed over the batch (the path that
    merges the heads' gradients instead of writing them in place)."""
    rng = np.random.default_rng(4)
    E, H, B, Tq, Tk = 12, 3, 3, 5, 7
    mha = MultiHeadAttention(E, H, rng=rng).astype(np.float64).eval()
    xq = rng.standard_normal((1 if shared == "queries" else B, Tq, E))
    xkv = rng.standard_normal((1 if shared == "memory" else B, Tk, E))
    out, c = mha.forward(xq, xkv)
    assert out.shape == (B, Tq, E)
    dy = rng.standard_normal(out.shape)
    (dq, dkv), g = mha.backward(dy, c)
    out_r, c_r = mha.forward(np.broadcast_to(xq, (B, Tq, E)).copy(), np.broadcast_to(xkv, (B, Tk, E)).copy())
    (dq_r, dkv_r), g_r = mha.backward(dy, c_r)
    assert rel_err(out, out_r) < RTOL
    assert dq.shape == xq.shape and dkv.shape == xkv.shape
    assert rel_err(dq, dq_r.sum(0, keepdims=True) if shared == "queries" else dq_r) < RTOL
    assert rel_err(dkv, dkv_r.sum(0, keepdims=True) if shared == "memory" else dkv_r) < RTOL
    for key in g_r:
        assert rel_err(g[key], g_r[key]) < RTOL, key
