"""VLA: action logits, loss and every parameter gradient against a torch reference (float64),
plus central finite differences on a few parameters of each kind."""
import copy

import numpy as np
import pytest
from vision_checks import RTOL, check_loss_and_grads, rel_err

from npformer.models.blocks import sequence_loss
from npformer.models.vla import VLA, VLAConfig
from oracles import require
from random_params import randomize

torch = require("torch")


def torch_vla(params: dict, c: VLAConfig, ids, images):
    """The same policy written with torch's own ops and TransformerEncoderLayer, from npformer's weights."""
    import math
    n_words = ids.shape[1]
    xw = params["word_embed.tok.weight"][ids] * math.sqrt(c.d_model) + params["word_embed.pos.weight"][:n_words]
    return torch_policy(params, c, xw, ids == c.pad_id, images)


def torch_policy(params: dict, c: VLAConfig, xw, word_pad, images):
    """The policy from its word tokens xw (B, L, E) and word_pad (B, L), True where a word is padding."""
    import math
    b, n_words, e = xw.shape
    xp = torch.nn.functional.conv2d(images.permute(0, 3, 1, 2), params["patch_embed.weight"],
                                    params["patch_embed.bias"], stride=c.patch_size).flatten(2).transpose(1, 2)
    xp = xp + params["patch_embed.pos_embed"]
    t = params["type_embed.weight"]
    x = torch.cat([params["action_queries"].expand(b, -1, -1), xw + t[0], xp + t[1]], dim=1)
    pad = torch.zeros(b, x.shape[1], dtype=torch.bool)
    pad[:, 2:2 + n_words] = word_pad
    for i in range(c.n_layers):
        layer = torch.nn.TransformerEncoderLayer(e, c.n_heads, c.d_ff, dropout=0.0, activation=c.activation,
                                                 batch_first=True, norm_first=c.norm_first).double()
        sd = {k: params[f"encoder.layers.{i}." + k.replace("linear", "ffn.linear")]
              for k, _ in layer.named_parameters()}
        # functional_call runs torch's layer on npformer's tensors, so their grads are the reference
        x = torch.func.functional_call(layer, sd, (x,), {"src_key_padding_mask": pad})
    if c.norm_first:
        x = torch.nn.functional.layer_norm(x, (e,), params["encoder.norm.weight"], params["encoder.norm.bias"])
    pick = x[:, 0] @ params["pick_head.weight"].T + params["pick_head.bias"]
    place = x[:, 1] @ params["place_head.weight"].T + params["place_head.bias"]
    out = torch.stack([pick, place], dim=1)
    if c.head == "pointer":
        keys = x[:, 2 + n_words:] @ params["cell_key.weight"].T    # (B, N, E)
        out = out @ keys.transpose(1, 2) / math.sqrt(e)
    return out


def small_model(norm_first=True, rng=0, head="pointer"):
    cfg = VLAConfig(vocab_size=9, max_words=5, image_size=8, patch_size=4, d_model=8, n_heads=2, d_ff=12,
                    n_layers=2, norm_first=norm_first, head=head)
    model = VLA(cfg, rng=rng).astype(np.float64).eval()
    r = np.random.default_rng(rng)
    for p in model.state_dict().values():     # non-zero biases, queries and affines: every path exercised
        p += 0.1 * r.standard_normal(p.shape)
    return cfg, model


def batch(cfg, rng):
    ids = rng.integers(1, cfg.vocab_size, (3, cfg.max_words))
    ids[0, 3:] = cfg.pad_id                       # padded instructions
    ids[2, 4:] = cfg.pad_id
    images = rng.random((3, cfg.image_size, cfg.image_size, 3))
    actions = rng.integers(0, cfg.n_cells, (3, 2))
    return ids, images, actions


@pytest.mark.parametrize("norm_first,head", [(True, "pointer"), (False, "linear")])
def test_vla_logits_loss_and_every_gradient(norm_first, head):
    cfg, model = small_model(norm_first, head=head)
    ids, images, actions = batch(cfg, np.random.default_rng(1))
    logits, cache = model.forward(ids, images)
    tp = {k: torch.tensor(v, requires_grad=True) for k, v in model.state_dict().items()}
    images_t = torch.tensor(images, requires_grad=True)
    logits_t = torch_vla(tp, cfg, torch.tensor(ids), images_t)
    assert rel_err(logits, logits_t.detach()) < RTOL

    grads = check_loss_and_grads(torch, model, (ids, images, actions), actions, logits_t, tp)
    # backward(dlogits, cache) -> ({"images"}, grads): the same grads, and the images' gradient
    dinputs, grads2 = model.backward(sequence_loss(logits, actions, -100, 0.1)[1], cache)
    assert list(dinputs) == ["images"] and rel_err(dinputs["images"], images_t.grad) < RTOL
    assert all(np.array_equal(grads[k], grads2[k]) for k in grads)


def check_finite_differences(model, words, images, actions, keys, rng, per_key=2):
    """d loss / d p by central differences at a few random entries of each parameter in ``keys``."""
    _, grads = model.loss(words, images, actions)
    h = 1e-6
    for k in keys:
        p = model.state_dict()[k]
        for idx in [tuple(rng.integers(0, n) for n in p.shape) for _ in range(per_key)]:
            old = p[idx]
            p[idx] = old + h
            up = model.loss(words, images, actions)[0]
            p[idx] = old - h
            down = model.loss(words, images, actions)[0]
            p[idx] = old
            assert abs((up - down) / (2 * h) - grads[k][idx]) < 1e-7, k


def test_vla_finite_differences_and_padding():
    cfg, model = small_model()
    rng = np.random.default_rng(2)
    ids, images, actions = batch(cfg, rng)
    check_finite_differences(model, ids, images, actions, list(model.state_dict()), rng)
    # padded words are never attended to
    _, cache = model.forward(ids, images)
    w = model.attention_weights(cache)[0]["self"]          # (B, H, T, T)
    assert np.all(w[0, :, :, 2 + 3:2 + 5] == 0) and np.all(w[2, :, :, 2 + 4] == 0)


def test_vla_shapes_and_config():
    cfg = VLAConfig(vocab_size=30)
    rng = np.random.default_rng(3)
    model = randomize(VLA(cfg), rng).eval()
    assert model.layout(16) == {"actions": slice(0, 2), "words": slice(2, 18), "patches": slice(18, 34)}
    ids = np.zeros((2, 16), np.int64)
    ids[:, :3] = [5, 6, 7]
    ids[1, 3] = 9
    images = rng.random((2, 32, 32, 3)).astype(np.float32)
    logits, _ = model.forward(ids, images)
    assert logits.shape == (2, 2, 16) and logits.dtype == np.float32
    logits64, _ = copy.deepcopy(model).astype(np.float64).forward(ids, images.astype(np.float64))
    assert rel_err(logits, logits64) < 1e-5                             # float32 to its rounding
    act = model.act(ids, images)
    assert act.shape == (2, 2)
    np.testing.assert_array_equal(act, logits.argmax(-1))               # (pick, place): the best cells
    with pytest.raises(ValueError, match="divisible by n_heads"):
        VLAConfig(vocab_size=30, d_model=10)
    with pytest.raises(ValueError, match="head"):
        VLAConfig(vocab_size=30, head="mlp")
    with pytest.raises(ValueError, match="pad_id"):
        VLAConfig(vocab_size=3, pad_id=3)
    with pytest.raises(ValueError, match="eps"):             # the shared BlockConfig checks
        VLAConfig(vocab_size=30, eps=-1.0)
    with pytest.raises(ValueError, match="activation"):
        VLAConfig(vocab_size=30, activation="tanh")


# -- text_dim > 0: the words are a frozen language model's states, projected (the MiniLM policy) -----

def text_model(rng=0, dropout=0.0, text_dropout=0.0):
    cfg = VLAConfig(vocab_size=1, max_words=6, image_size=8, patch_size=4, d_model=8, n_heads=2, d_ff=12,
                    n_layers=2, text_dim=7, dropout=dropout, text_dropout=text_dropout)
    model = VLA(cfg, rng=rng).astype(np.float64).eval()
    r = np.random.default_rng(rng)
    for p in model.state_dict().values():
        p += 0.1 * r.standard_normal(p.shape)
    return cfg, model


def text_batch(cfg, rng):
    states = rng.standard_normal((3, 5, cfg.text_dim))          # (B, L, S): L < max_words
    states[0, 3:] = 0.0                                           # padding: rows of zeros
    states[2, 4:] = 0.0
    images = rng.random((3, cfg.image_size, cfg.image_size, 3))
    actions = rng.integers(0, cfg.n_cells, (3, 2))
    return states, images, actions


def torch_text_vla(params: dict, c: VLAConfig, states, images):
    """torch_vla with the word tokens W_t s + b_t (no word positions): the projection is the only change."""
    xw = states @ params["text_proj.weight"].T + params["text_proj.bias"]
    return torch_policy(params, c, xw, (states == 0).all(-1), images)


def test_text_states_vla_every_gradient_and_the_states_gradient():
    cfg, model = text_model()
    assert "text_proj.weight" in model.state_dict() and not any(k.startswith("word_embed") for k in model.state_dict())
    states, images, actions = text_batch(cfg, np.random.default_rng(4))
    tp = {k: torch.tensor(v, requires_grad=True) for k, v in model.state_dict().items()}
    states_t = torch.tensor(states, requires_grad=True)
    logits_t = torch_text_vla(tp, cfg, states_t, torch.tensor(images))
    logits, cache = model.forward(states, images)
    assert rel_err(logits, logits_t.detach()) < RTOL
    check_loss_and_grads(torch, model, (states, images, actions), actions, logits_t, tp)  # text_proj too
    dinputs, _ = model.backward(sequence_loss(logits, actions, -100, 0.1)[1], cache)
    assert sorted(dinputs) == ["images", "words"] and rel_err(dinputs["words"], states_t.grad) < RTOL
    # padded rows are never attended to, and their gradient is zero
    w = model.attention_weights(cache)[0]["self"]                 # (B, H, T, T)
    assert np.all(w[0, :, :, 2 + 3:2 + 5] == 0) and np.all(dinputs["words"][0, 3:] == 0)


def test_text_states_finite_differences_on_the_projection():
    cfg, model = text_model(rng=5)
    rng = np.random.default_rng(6)
    states, images, actions = text_batch(cfg, rng)
    check_finite_differences(model, states, images, actions, ("text_proj.weight", "text_proj.bias",
                                                              "type_embed.weight"), rng, per_key=3)


def test_text_states_inputs_are_checked():
    cfg, model = text_model()
    states, images, _ = text_batch(cfg, np.random.default_rng(7))
    with pytest.raises(ValueError, match=r"text states of shape \(B, L <= 6, 7\)"):
        model.forward(np.zeros((3, 5), np.int64), images)          # word ids given to a text-state model
    with pytest.raises(ValueError, match="text states of shape"):
        model.forward(states[..., :4], images)
    with pytest.raises(ValueError, match="text states of shape"):
        model.forward(np.zeros((3, 7, 7)), images)                 # longer than max_words
    with pytest.raises(TypeError, match="model's dtype"):
        model.forward(states.astype(np.float32), images)
    bad = states.copy()
    bad[1, 0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        model.forward(bad, images)
    np.testing.assert_array_equal(model.word_mask(states), (states != 0).any(-1))
    with pytest.raises(ValueError, match="text_dim must be >= 0"):
        VLAConfig(vocab_size=1, text_dim=-1)
    # dropout on the projected words: training mode asks for an rng; eval mode is deterministic
    _, drop = text_model(dropout=0.5)
    with pytest.raises(ValueError, match="pass rng"):
        drop.train().forward(states, images)
    a, _ = drop.forward(states, images, rng=np.random.default_rng(0))
    b, _ = drop.forward(states, images, rng=np.random.default_rng(1))
    assert not np.allclose(a, b)
    drop.eval()
    np.testing.assert_array_equal(drop.forward(states, images)[0], drop.forward(states, images)[0])


@pytest.mark.parametrize("dropout,text_dropout", [(0.0, 0.5), (0.2, 0.5)])
def test_text_dropout_drops_projected_features_and_its_gradient_is_torchs(dropout, text_dropout):
    """text_dropout: one mask on the projected text features, a feature kept with (1 - dropout)(1 -
    text_dropout); the forward and every gradient are torch's with that mask applied; eval mode drops nothing."""
    cfg, model = text_model(rng=8, dropout=dropout, text_dropout=text_dropout)
    states, images, _ = text_batch(cfg, np.random.default_rng(9))
    model.train()
    with pytest.raises(ValueError, match="pass rng"):
        model.forward(states, images)
    big = np.random.default_rng(10).standard_normal((64, 6, cfg.text_dim))
    _, c = model.forward(big, np.zeros((64, 8, 8, 3)), rng=np.random.default_rng(11))
    keep = (c[0][1] != 0).mean()                                    # the share of features kept
    assert abs(keep - (1 - dropout) * (1 - text_dropout)) < 0.03, keep
    if dropout:                                                    # the rest of the model drops too: no torch twin
        return
    logits, cache = model.forward(states, images, rng=np.random.default_rng(12))  # (B, 2, N)
    mask = cache[0][1]                                             # (B, L, E) 0 or 1 / (1 - p)
    assert set(np.unique(mask)) == {0.0, 1.0 / (1.0 - text_dropout)}
    tp = {k: torch.tensor(v, requires_grad=True) for k, v in model.state_dict().items()}
    states_t = torch.tensor(states, requires_grad=True)
    xw = (states_t @ tp["text_proj.weight"].T + tp["text_proj.bias"]) * torch.tensor(mask)
    logits_t = torch_policy(tp, cfg, xw, torch.tensor((states == 0).all(-1)), torch.tensor(images))
    assert rel_err(logits, logits_t.detach()) < RTOL
    g = np.random.default_rng(13).standard_normal(logits.shape)    # d loss / d logits of loss = sum(g * logits)
    (logits_t * torch.tensor(g)).sum().backward()
    dinputs, grads = model.backward(g, cache)
    assert rel_err(dinputs["words"], states_t.grad) < RTOL
    for k in ("text_proj.weight", "text_proj.bias", "type_embed.weight"):
        assert rel_err(grads[k], tp[k].grad) < RTOL, k
    model.eval()
    np.testing.assert_array_equal(model.forward(states, images)[0], model.forward(states, images)[0])
    with pytest.raises(ValueError, match="text_dropout .* needs text_dim > 0"):
        VLAConfig(vocab_size=3, text_dropout=0.1)
    with pytest.raises(ValueError, match="text_dropout"):
        VLAConfig(vocab_size=3, text_dim=4, text_dropout=1.0)
