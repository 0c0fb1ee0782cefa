"""Rollout and relevance against references written here, and the gradient they need, d y / d weights,
from npformer's own backward against torch autograd in float64 (a decoder-only LM written out in torch)."""
import math

import numpy as np
import pytest
from explore_runs import INPUTS, explore_runs  # noqa: F401 (a fixture)

from npformer.explore import relevance as rel
from npformer.explore.payload import decode_array, open_explorer
from npformer.models import DecoderLM, DecoderLMConfig
from npformer.nn import MultiHeadAttention
from npformer.ops import attention_forward, attention_weights_grad
from npformer.train.checkpoint import load_run
from oracles import require


def _random_weights(rng, shape, causal=False):
    s = rng.standard_normal(shape) * 2
    if causal:
        s = np.where(np.tri(shape[-2], shape[-1], dtype=bool), s, -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


# -- rollout ---------------------------------------------------------------------------------------
def _rollout_reference(w):
    """Abnar & Zuidema by the entries: a_ij = (mean_h w_hij + [i == j]) / sum_j (...), r = a_l ... a_1."""
    n_layers, n_heads, t, _ = w.shape
    out, r = [], np.eye(t)
    for layer in range(n_layers):
        a = np.zeros((t, t))
        for i in range(t):
            for j in range(t):
                a[i, j] = sum(w[layer, h, i, j] for h in range(n_heads)) / n_heads + (i == j)
            a[i] /= a[i].sum()
        r = np.einsum("ij,jk->ik", a, r)
        out.append(r)
    return np.array(out)


@pytest.mark.parametrize("causal", [False, True])
def test_rollout_matches_the_reference_and_rows_sum_to_one(causal):
    w = _random_weights(np.random.default_rng(0), (3, 2, 5, 5), causal)
    r = rel.rollout(w)
    np.testing.assert_allclose(r, _rollout_reference(w), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(r.sum(-1), 1.0, atol=1e-12)
    if causal:
        assert np.all(r[np.broadcast_to(~np.tri(5, dtype=bool), r.shape)] == 0)     # no flow from the future
    with pytest.raises(ValueError, match="square"):
        rel.rollout(np.ones((1, 1, 2, 3)) / 3)


# -- relevance propagation -------------------------------------------------------------------------
def _abar(w, g):
    """mean over heads of max(g * w, 0), by the entries."""
    return np.mean([np.where(g[h] * w[h] > 0, g[h] * w[h], 0.0) for h in range(len(w))], axis=0)


def _norm_ref(r):
    """(R - I) with rows scaled to sum 1 (rows of zeros left), plus I."""
    t = len(r)
    hat = r - np.eye(t)
    for i in range(t):
        s = hat[i].sum()
        hat[i] = hat[i] / s if s > 0 else 0.0
    return hat + np.eye(t)


def test_self_relevance_matches_the_reference():
    rng = np.random.default_rng(1)
    w = _random_weights(rng, (3, 2, 4, 4), causal=True)
    g = rng.standard_normal(w.shape)
    r = np.eye(4)
    for layer in range(3):
        r = r + _abar(w[layer], g[layer]) @ r
    np.testing.assert_allclose(rel.self_relevance(w, g), r, rtol=1e-12)
    assert np.all(rel.self_relevance(w, g) >= 0)                     # positive parts only


def test_encoder_decoder_relevance_matches_the_reference():
    rng = np.random.default_rng(2)
    s, t = 5, 3
    ew, dw, cw = (_random_weights(rng, (2, 2, s, s)), _random_weights(rng, (2, 2, t, t), causal=True),
                  _random_weights(rng, (2, 2, t, s)))
    eg, dg, cg = (rng.standard_normal(x.shape) for x in (ew, dw, cw))
    r_ss = np.eye(s)
    for layer in range(2):
        r_ss = r_ss + _abar(ew[layer], eg[layer]) @ r_ss
    r_tt, r_ts = np.eye(t), np.zeros((t, s))
    for layer in range(2):
        a = _abar(dw[layer], dg[layer])
        r_tt, r_ts = r_tt + a @ r_tt, r_ts + a @ r_ts
        r_ts = r_ts + _norm_ref(r_tt).T @ _abar(cw[layer], cg[layer]) @ _norm_ref(r_ss)
    got = rel.encoder_decoder_relevance(ew, eg, dw, dg, cw, cg)
    for name, ref in (("encoder self", r_ss), ("decoder self", r_tt), ("decoder cross", r_ts)):
        np.testing.assert_allclose(got[name], ref, rtol=1e-12, err_msg=name)
    assert got["decoder cross"].shape == (t, s) and np.all(got["decoder cross"] >= 0)


# -- d y / d weights: npformer's backward against torch ---------------------------------------------
def test_attention_weights_grad_matches_torch():
    torch = require("torch")
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((2, 3, n, 4)) for n in (5, 6, 6))
    mask = rng.random((2, 1, 5, 6)) > 0.3
    mask[..., 0] = True
    dout = rng.standard_normal((2, 3, 5, 4))
    _, w, cache = attention_forward(q, k, v, mask=mask)
    tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
    scores = (tq @ tk.transpose(-1, -2)) / math.sqrt(4)
    a = torch.softmax(scores.masked_fill(~torch.tensor(mask), float("-inf")), dim=-1)
    a.retain_grad()
    ((a @ tv) * torch.tensor(dout)).sum().backward()
    np.testing.assert_allclose(attention_weights_grad(dout, cache), a.grad.numpy(), rtol=1e-10, atol=1e-12)


def _torch_lm(torch, model, ids):
    """The DecoderLM (pre-LN, learned positions, exact GELU, tied output) written out in torch float64 with
    npformer's weights; returns (logits, [attention weights per layer, grad retained])."""
    F = torch.nn.functional
    p = {k: torch.tensor(v, requires_grad=True) for k, v in model.state_dict().items()}
    c = model.config
    t, h, e = ids.shape[1], c.n_heads, c.d_model
    x = p["embed.tok.weight"][torch.tensor(ids)] * math.sqrt(e) + p["embed.pos.weight"][:t]
    causal = torch.tril(torch.ones(t, t, dtype=torch.bool))
    maps = []
    for i in range(c.n_layers):
        pre = f"blocks.layers.{i}."
        y = F.layer_norm(x, (e,), p[pre + "norm1.weight"], p[pre + "norm1.bias"], c.eps)
        qkv = y @ p[pre + "self_attn.in_proj_weight"].T + p[pre + "self_attn.in_proj_bias"]
        q, k, v = (z.reshape(1, t, h, e // h).transpose(1, 2) for z in qkv.split(e, dim=-1))
        a = torch.softmax((q @ k.transpose(-1, -2) / math.sqrt(e // h)).masked_fill(~causal, float("-inf")), -1)
        a.retain_grad()
        maps.append(a)
        o = (a @ v).transpose(1, 2).reshape(1, t, e)
        x = x + o @ p[pre + "self_attn.out_proj.weight"].T + p[pre + "self_attn.out_proj.bias"]
        y = F.layer_norm(x, (e,), p[pre + "norm2.weight"], p[pre + "norm2.bias"], c.eps)
        y = F.gelu(y @ p[pre + "ffn.linear1.weight"].T + p[pre + "ffn.linear1.bias"])
        x = x + y @ p[pre + "ffn.linear2.weight"].T + p[pre + "ffn.linear2.bias"]
    x = F.layer_norm(x, (e,), p["blocks.norm.weight"], p["blocks.norm.bias"], c.eps)
    return x @ p["embed.tok.weight"].T, maps


def test_relevance_gradients_from_npformers_backward_match_torch():
    """Chefer et al.'s d logit / d A_l for every layer, from the model's own backward (report_weights_grad),
    equals torch autograd's; the relevance built from them equals the one built from torch's."""
    torch = require("torch")
    c = DecoderLMConfig(vocab_size=13, d_model=12, n_heads=3, d_ff=20, n_layers=3, max_len=10, dropout=0.0)
    model = DecoderLM(c, rng=4).astype(np.float64).eval()
    ids = np.random.default_rng(5).integers(0, 13, (1, 7))
    logits, cache = model.forward(ids)
    target = (0, 6, int(logits[0, -1].argmax()))
    dlogits = np.zeros_like(logits)
    dlogits[target] = 1.0
    grads = rel.attention_grads(model, model.backward, dlogits, cache)
    assert sorted(grads) == [f"blocks.layers.{i}.self_attn" for i in range(3)]
    assert not any(m.report_weights_grad for _, m in model.modules()
                   if isinstance(m, MultiHeadAttention))               # switched off again
    assert not any(k.endswith("attention_weights") for k in model.backward(dlogits, cache)[1])
    t_logits, maps = _torch_lm(torch, model, ids)
    np.testing.assert_allclose(t_logits.detach().numpy(), logits, rtol=1e-10, atol=1e-12)
    t_logits[target].backward()
    npf = rel.stacked(grads, "blocks", 3)                             # (L, H, T, T)
    ref = np.stack([m.grad.numpy()[0] for m in maps])
    np.testing.assert_allclose(npf, ref, rtol=1e-8, atol=1e-12)
    w_npf = np.stack([a["self"][0] for a in model.attention_weights(cache)])
    w_ref = np.stack([m.detach().numpy()[0] for m in maps])
    np.testing.assert_allclose(rel.self_relevance(w_npf, npf), rel.self_relevance(w_ref, ref), rtol=1e-8, atol=1e-12)


# -- the payload's explanations on trained runs -----------------------------------------------------
def test_payload_relevance_and_rollout_of_a_run(explore_runs):  # noqa: F811
    """digits: the payload's rollout and relevance (float16 / 8-bit) equal the references computed here
    from the model's own weights and its backward."""
    run = load_run(explore_runs["digits"])
    model, i = run.model, INPUTS["digits"][0]["index"]
    payload = open_explorer(explore_runs["digits"]).payload(INPUTS["digits"])
    inp = payload["inputs"][0]
    (g,) = inp["groups"]
    logits, cache = model.forward(run.task.x_test[i:i + 1].astype(model.dtype))
    w = np.stack([a["self"][0] for a in model.attention_weights(cache)]).astype(np.float64)
    np.testing.assert_allclose(decode_array(g["rollout"]), _rollout_reference(w), atol=0.5 / 255 + 1e-6)
    assert [t["name"] for t in inp["targets"]][0] == f"class {int(logits[0].argmax())} (predicted)"
    for t in inp["targets"]:
        cls = int(t["name"].split()[1])
        d = np.zeros_like(logits)
        d[0, cls] = 1.0
        grads = rel.attention_grads(model, model.backward, d, cache)
        r = np.eye(w.shape[-1])
        for layer in range(len(w)):
            r = r + _abar(w[layer], grads[f"encoder.layers.{layer}.self_attn"].astype(np.float64)) @ r
        np.testing.assert_allclose(decode_array(g["relevance"][t["name"]]), r, rtol=2e-3, atol=1e-4)
        assert t["query"] == 0 and t["group"] == "self"                # read at [CLS]


def _torch_mha(torch, p, pre, xq, xkv, n_heads, causal=False):
    """torch's multi-head attention written out with npformer's weights; returns (out, weights)."""
    e = xq.shape[-1]
    w, b = p[pre + "in_proj_weight"], p[pre + "in_proj_bias"]
    q = xq @ w[:e].T + b[:e]
    k, v = (xkv @ w[e:].T + b[e:]).split(e, dim=-1)
    q, k, v = (z.reshape(1, -1, n_heads, e // n_heads).transpose(1, 2) for z in (q, k, v))
    s = q @ k.transpose(-1, -2) / math.sqrt(e // n_heads)
    if causal:
        s = s.masked_fill(~torch.tril(torch.ones(s.shape[-2:], dtype=torch.bool)), float("-inf"))
    a = torch.softmax(s, dim=-1)
    a.retain_grad()
    o = (a @ v).transpose(1, 2).reshape(1, -1, e)
    return o @ p[pre + "out_proj.weight"].T + p[pre + "out_proj.bias"], a


def test_encoder_decoder_gradients_match_torch():
    """Every group of the encoder-decoder (encoder self, decoder self, decoder cross): d y / d A from
    npformer's TransformerStack.backward with the flag equals torch autograd on the same post-LN stack."""
    torch = require("torch")
    from npformer.nn import TransformerStack
    F = torch.nn.functional
    e, h = 8, 2
    stack = TransformerStack(d_model=e, n_heads=h, n_encoder_layers=2, n_decoder_layers=2, d_ff=12, dropout=0.0,
                             rng=np.random.default_rng(6), dtype=np.float64).eval()
    rng = np.random.default_rng(7)
    src, tgt, dout = rng.standard_normal((1, 5, e)), rng.standard_normal((1, 4, e)), rng.standard_normal((1, 4, e))
    _, cache = stack.forward(src, tgt)
    grads = rel.attention_grads(stack, stack.backward, dout, cache)
    p = {k: torch.tensor(v, requires_grad=True) for k, v in stack.state_dict().items()}

    def ln(x, name):
        return F.layer_norm(x, (e,), p[name + ".weight"], p[name + ".bias"], 1e-5)

    def ffn(x, pre):
        return F.relu(x @ p[pre + "ffn.linear1.weight"].T + p[pre + "ffn.linear1.bias"]) \
            @ p[pre + "ffn.linear2.weight"].T + p[pre + "ffn.linear2.bias"]

    maps, x = {}, torch.tensor(src)
    for i in range(2):
        pre = f"encoder.layers.{i}."
        o, maps[pre + "self_attn"] = _torch_mha(torch, p, pre + "self_attn.", x, x, h)
        x = ln(x + o, pre + "norm1")
        x = ln(x + ffn(x, pre), pre + "norm2")
    memory, y = ln(x, "encoder.norm"), torch.tensor(tgt)
    for i in range(2):
        pre = f"decoder.layers.{i}."
        o, maps[pre + "self_attn"] = _torch_mha(torch, p, pre + "self_attn.", y, y, h, causal=True)
        y = ln(y + o, pre + "norm1")
        o, maps[pre + "multihead_attn"] = _torch_mha(torch, p, pre + "multihead_attn.", y, memory, h)
        y = ln(y + o, pre + "norm2")
        y = ln(y + ffn(y, pre), pre + "norm3")
    (ln(y, "decoder.norm") * torch.tensor(dout)).sum().backward()
    assert sorted(grads) == sorted(maps)
    for name, a in maps.items():
        np.testing.assert_allclose(grads[name], a.grad.numpy()[0], rtol=1e-8, atol=1e-12, err_msg=name)
