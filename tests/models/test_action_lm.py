"""ActionLM, the prefix-LM policy over words, patches and action tokens: logits, loss and every parameter
gradient against its torch twin (``to_torch``, float64, a random upstream gradient), the way back
(``from_torch``), what the mask lets each token read, and the config's checks."""
import warnings

import numpy as np
import pytest

import npformer
from npformer.interop.torch import _key_to_torch
from npformer.models import config as model_config
from npformer.models.action_lm import ActionLM, ActionLMConfig, prefix_lm_mask
from oracles import require

torch = require("torch")

RTOL = 1e-10
V_A = 7                                               # action tokens; BOS is 7


def rel_err(a, b) -> float:
    a, b = np.asarray(a), np.asarray(b)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-300))


def small(dtype=np.float64, seed=0, **kw):
    fields = dict(vocab_size=9, max_words=5, image_size=8, patch_size=4, action_vocab=V_A, action_len=3, d_model=8,
                  n_heads=2, d_ff=12, n_layers=2)
    cfg = ActionLMConfig(**{**fields, **kw})
    model = ActionLM(cfg, rng=seed, dtype=dtype).eval()
    r = np.random.default_rng(seed)
    for p in model.state_dict().values():         # non-zero biases and affines: every path exercised
        p += (0.1 * r.standard_normal(p.shape)).astype(p.dtype)
    return cfg, model


def batch(cfg, rng, dtype=np.float64, b=3):
    """Words with padding (rows 0 and 2), images in [0, 1], actions_in (BOS first) and targets."""
    if cfg.text_dim:
        words = rng.standard_normal((b, 4, cfg.text_dim)).astype(dtype)
        words[0, 2:] = 0.0                            # padding: rows of zeros
        words[2, 3:] = 0.0
    else:
        words = rng.integers(1, cfg.vocab_size, (b, cfg.max_words))
        words[0, 3:] = cfg.pad_id
        words[2, 4:] = cfg.pad_id
    images = rng.random((b, cfg.image_size, cfg.image_size, 3)).astype(dtype)
    targets = rng.integers(0, V_A, (b, cfg.action_len))
    actions_in = np.concatenate([np.full((b, 1), cfg.bos_id), targets[:, :-1]], axis=1)
    return words, images, actions_in, targets


CONFIGS = [dict(), dict(norm_first=False, positional="sinusoidal", activation="relu"),
           dict(text_dim=6, vocab_size=1, d_model=12, n_heads=3), dict(word_reads="self")]


@pytest.mark.parametrize("i", range(len(CONFIGS)))
def test_every_gradient_against_the_torch_twin(i):
    cfg, model = small(seed=i, **CONFIGS[i])
    words, images, actions_in, targets = batch(cfg, np.random.default_rng(10 + i))
    twin = npformer.to_torch(model)
    assert set(twin.state_dict()) == {_key_to_torch(k) for k in model.state_dict()}
    logits, cache = model.forward(words, images, actions_in)
    assert logits.shape == (3, 3, V_A)
    words_t = torch.tensor(words, requires_grad=bool(cfg.text_dim))
    images_t = torch.tensor(images, requires_grad=True)
    logits_t = twin(words_t, images_t, torch.tensor(actions_in))
    assert rel_err(logits, logits_t.detach()) < RTOL
    # a random upstream gradient: every parameter's gradient by key, and the inputs'
    dout = np.random.default_rng(20 + i).standard_normal(logits.shape)
    (logits_t * torch.tensor(dout)).sum().backward()
    dinputs, grads = model.backward(dout, cache)
    t_params = dict(twin.named_parameters())
    assert set(grads) == set(model.state_dict())
    for k, g in grads.items():
        tg = t_params[_key_to_torch(k)].grad.numpy()
        assert g.shape == tg.shape and g.dtype == np.float64, k
        assert rel_err(g, tg) < RTOL, (k, rel_err(g, tg))
    assert rel_err(dinputs["images"], images_t.grad) < RTOL
    if cfg.text_dim:
        assert rel_err(dinputs["words"], words_t.grad) < RTOL
    else:
        assert list(dinputs) == ["images"]
    # the twin comes back as the model it was made from
    back = npformer.from_torch(twin)
    assert type(back) is ActionLM and back.config == cfg
    assert all(np.array_equal(back.state_dict()[k], v) for k, v in model.state_dict().items())


def test_the_loss_is_torchs_cross_entropy_and_skips_ignored_targets():
    cfg, model = small(seed=3)
    words, images, actions_in, targets = batch(cfg, np.random.default_rng(3))
    targets[1, 2] = -100                                           # not scored
    loss, grads = model.loss(words, images, actions_in, targets, label_smoothing=0.1)
    twin = npformer.to_torch(model)
    logits_t = twin(torch.tensor(words), torch.tensor(images), torch.tensor(actions_in))
    loss_t = torch.nn.functional.cross_entropy(logits_t.reshape(-1, V_A), torch.tensor(targets).reshape(-1),
                                               ignore_index=-100, label_smoothing=0.1)
    loss_t.backward()
    assert abs(loss - loss_t.item()) < 1e-12
    t_params = dict(twin.named_parameters())
    for k, g in grads.items():
        assert rel_err(g, t_params[_key_to_torch(k)].grad.numpy()) < RTOL, k


@pytest.mark.parametrize("i", range(2))
def test_the_goal_head_loss_and_every_gradient_against_the_torch_twin(i):
    """With goal_head, each goal is one more scored target: the loss is torch's cross-entropy summed over
    the action tokens and the goals, divided by how many are scored; every gradient matches by key."""
    cfg, model = small(seed=5 + i, goal_head=True, **CONFIGS[i])
    words, images, actions_in, targets = batch(cfg, np.random.default_rng(5 + i))
    goals = np.array([3, -100, 0]) if i else np.array([1, 2, 3])           # a goal not scored, in the second
    targets[2, 1] = -100
    loss, grads = model.loss(words, images, actions_in, targets, goals=goals, label_smoothing=0.05 * i)
    twin = npformer.to_torch(model)
    assert set(twin.state_dict()) == {_key_to_torch(k) for k in model.state_dict()}
    assert {"goal_query.weight", "goal_query.bias", "goal_key.weight"} <= set(grads)
    logits_t, goal_t = twin(torch.tensor(words), torch.tensor(images), torch.tensor(actions_in), goal=True)
    assert goal_t.shape == (3, cfg.n_patches)
    ce = torch.nn.functional.cross_entropy
    total = (ce(logits_t.reshape(-1, V_A), torch.tensor(targets).reshape(-1), reduction="sum",
                label_smoothing=0.05 * i)
             + ce(goal_t, torch.tensor(goals), reduction="sum", label_smoothing=0.05 * i))
    loss_t = total / (int((targets != -100).sum()) + int((goals != -100).sum()))
    loss_t.backward()
    assert abs(loss - loss_t.item()) < 1e-12
    t_params = dict(twin.named_parameters())
    assert set(grads) == set(model.state_dict())
    for k, g in grads.items():
        assert rel_err(g, t_params[_key_to_torch(k)].grad.numpy()) < RTOL, k
    # acting never reads the head: the same action logits as the model without one, weights shared
    plain = ActionLM(ActionLMConfig(**{**cfg.__dict__, "goal_head": False}), dtype=np.float64).eval()
    plain.load_state_dict({k: v for k, v in model.state_dict().items() if not k.startswith("goal_")})
    np.testing.assert_array_equal(plain.forward(words, images, actions_in)[0],
                                  model.forward(words, images, actions_in)[0])
    back = npformer.from_torch(twin)
    assert back.config == cfg and all(np.array_equal(back.state_dict()[k], v) for k, v in model.state_dict().items())


def test_goals_are_checked_against_the_head():
    cfg, model = small(seed=7, goal_head=True)
    words, images, actions_in, targets = batch(cfg, np.random.default_rng(7))
    with pytest.raises(ValueError, match="goals must be given exactly when the model has a goal head"):
        model.loss(words, images, actions_in, targets)
    with pytest.raises(ValueError, match="goals"):
        model.loss(words, images, actions_in, targets, goals=np.array([0, 1, cfg.n_patches]))
    with pytest.raises(ValueError, match="goals must be one patch index per example"):
        model.loss(words, images, actions_in, targets, goals=np.array([0, 1]))
    with pytest.raises(ValueError, match="nothing to score"):
        model.loss(words, images, actions_in, np.full_like(targets, -100), goals=np.full(3, -100))
    _, plain = small(seed=7)
    with pytest.raises(ValueError, match="goal_head=False"):
        plain.loss(words, images, actions_in, targets, goals=np.array([0, 1, 2]))
    with pytest.raises(TypeError, match="goal_head"):
        ActionLMConfig(vocab_size=9, goal_head=1)


def test_float32_twin_and_torch_fast_path():
    cfg, model = small(np.float32, seed=4)
    words, images, actions_in, _ = batch(cfg, np.random.default_rng(4), np.float32)
    logits, _ = model.forward(words, images, actions_in)
    twin = npformer.to_torch(model)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = twin(torch.tensor(words), torch.tensor(images), torch.tensor(actions_in)).numpy()
    assert out.dtype == np.float32 and np.abs(out - logits).max() < 1e-5


def test_what_each_token_reads():
    """The prefix reads itself both ways and never an action token; action slot j reads the prefix and slots
    0..j; padded words are read by nobody. Checked on the outputs, and on the attention weights."""
    cfg, model = small(seed=5)
    rng = np.random.default_rng(5)
    words, images, actions_in, _ = batch(cfg, rng)
    logits, cache = model.forward(words, images, actions_in)
    later = actions_in.copy()
    later[:, 2] = (later[:, 2] + 1) % V_A                          # a different last input token
    logits2, _ = model.forward(words, images, later)
    np.testing.assert_array_equal(logits2[:, :2], logits[:, :2])   # slots 0 and 1 never read slot 2
    assert np.abs(logits2[:, 2] - logits[:, 2]).max() > 1e-6
    shorter = words[:, :4]                                         # one padded column fewer in row 0
    np.testing.assert_allclose(model.forward(shorter, images, actions_in)[0][0], logits[0], rtol=0, atol=1e-12)
    n, p = words.shape[1], words.shape[1] + cfg.n_patches
    w = model.attention_weights(cache)[0]["self"]                  # (B, H, T, T)
    assert w.shape == (3, 2, p + 3, p + 3)
    assert np.all(w[:, :, :p, p:] == 0)                            # the prefix reads no action token
    assert np.all(w[:, :, p, p + 1:] == 0) and np.all(w[:, :, p + 1, p + 2] == 0)
    assert np.all(w[0, :, :, 3:n] == 0) and np.all(w[2, :, :, 4] == 0)
    assert np.all(w[:, :, p + 2, :n][1] > 0)                       # row 1 has no padding: every word is read
    expect = np.array([[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]], dtype=bool)   # hand-written, P = 2
    np.testing.assert_array_equal(prefix_lm_mask(2, 2), expect)


def test_the_explorer_reads_its_attention():
    """The explorer's capture recomputes every layer's weights from the cached q, k and the model's mask, and
    a head knocked out changes the action logits: the model side the explorer's views need."""
    from npformer.explore import capture, knockout

    cfg, model = small(seed=7)
    words, images, actions_in, _ = batch(cfg, np.random.default_rng(7))
    logits, cache = model.forward(words, images, actions_in)
    mask = model.attention_mask(words, 3)                           # (B, 1, T, T)
    groups = capture.capture("action_lm", cache, {"self": mask[0, 0]})
    assert groups["self"].weights.shape == (2, 2) + mask.shape[-2:]
    with pytest.raises(RuntimeError, match="not the one the model used"):
        capture.capture("action_lm", cache, {"self": np.ones(mask.shape[-2:], dtype=bool)})
    name = knockout.module_name("action_lm", "self", 1)
    with knockout.heads_masked(model, {name: np.array([0.0, 1.0])}):
        knocked, _ = model.forward(words, images, actions_in)
    assert np.abs(knocked - logits).max() > 1e-6


def test_config_checks_and_parameter_count():
    with pytest.raises(ValueError, match="action_len must be >= 1"):
        ActionLMConfig(vocab_size=9, action_len=0)
    with pytest.raises(TypeError, match="action_vocab must be an int"):
        ActionLMConfig(vocab_size=9, action_vocab=2.5)
    with pytest.raises(ValueError, match="multiple of patch_size"):
        ActionLMConfig(vocab_size=9, image_size=50)
    with pytest.raises(ValueError, match="text_dropout"):
        ActionLMConfig(vocab_size=9, text_dropout=0.3)
    with pytest.raises(ValueError, match="positional"):
        ActionLMConfig(vocab_size=9, positional="rotary")
    with pytest.raises(ValueError, match="sinusoidal word-position table"):
        ActionLMConfig(vocab_size=9, positional="sinusoidal", max_words=2 ** 30)
    cfg = ActionLMConfig(vocab_size=30)                            # the defaults: 48 px, 36 patches, 259 tokens
    e, a = 64, 259
    layer = 4 * e * e + 4 * e + 2 * e * 128 + 128 + e + 4 * e
    by_hand = (30 * e + 16 * e + (e * 3 * 64 + e + 36 * e) + ((a + 1) * e + 3 * e) + 3 * e + 3 * layer + 2 * e
               + (e * a + a))
    assert model_config.param_count(cfg) == by_hand == ActionLM(cfg).num_parameters()
    goal = ActionLMConfig(vocab_size=30, goal_head=True)           # query (E x E + E) and key (E x E)
    assert model_config.param_count(goal) == by_hand + 2 * e * e + e == ActionLM(goal).num_parameters()


def test_inputs_are_checked():
    cfg, model = small(seed=6)
    words, images, actions_in, targets = batch(cfg, np.random.default_rng(6))
    with pytest.raises(ValueError, match="actions_in holds ids outside"):
        model.forward(words, images, actions_in + V_A)
    with pytest.raises(ValueError, match="actions_in has 4 positions"):
        model.forward(words, images, np.concatenate([actions_in, actions_in[:, :1]], axis=1))
    with pytest.raises(ValueError, match="one row per instruction"):
        model.forward(words, images, actions_in[:2])
    with pytest.raises(TypeError, match="images must have the model's dtype"):
        model.forward(words, images.astype(np.float32), actions_in)
    with pytest.raises(ValueError, match="targets holds ids outside"):
        model.loss(words, images, actions_in, targets + V_A)
    with pytest.raises(ValueError, match="shape of actions_in"):
        model.loss(words, images, actions_in, targets[:, :2])


def test_words_that_read_only_themselves():
    """word_reads="self": each word's row of the mask is itself alone (a padded word too, so no row is empty);
    the patches and the action tokens read the real words as before; and the words' states no longer depend
    on one another, so the same weights give other logits."""
    cfg, model = small(seed=3)
    alone = ActionLM(ActionLMConfig(**{**cfg.__dict__, "word_reads": "self"}), rng=0, dtype=np.float64)
    alone.load_state_dict(model.state_dict())
    words, images, actions_in, _ = batch(cfg, np.random.default_rng(4))
    n = words.shape[1]
    m_self, m_prefix = alone.attention_mask(words, 3), model.attention_mask(words, 3)
    np.testing.assert_array_equal(m_self[:, 0, :n], np.broadcast_to(np.eye(n, m_self.shape[-1], dtype=bool),
                                                                     (len(words), n, m_self.shape[-1])))
    np.testing.assert_array_equal(m_self[:, :, n:], m_prefix[:, :, n:])
    assert not np.allclose(alone.forward(words, images, actions_in)[0], model.forward(words, images, actions_in)[0])
    with pytest.raises(ValueError, match="word_reads must be one of prefix, self"):
        ActionLMConfig(**{**cfg.__dict__, "word_reads": "none"})
