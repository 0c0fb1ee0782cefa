"""Head knock-outs (issue 25) against references computed here.

A head is knocked out in the reference by zeroing the columns of the output projection W_o that read its
slice of the merged heads (x @ W_o^T with x's slice zeroed equals x @ W_o^T with those columns zeroed), then
running the model's ordinary forward: neither ``MultiHeadAttention.head_mask`` nor explore.knockout is
used. The page's numbers (logit, probability, decision, effect, MiniLM's cosine) must equal it to 1e-5;
the attention scores must equal the model's own weights on the stored keys, those keys must be the most
relevant ones, and the rankings and correlations must equal scipy's."""
import numpy as np
import pytest
from explore_runs import INPUTS, explore_runs  # noqa: F401 (a fixture)
from scipy import special, stats

from npformer.decode import greedy
from npformer.explore import knockout as ko
from npformer.explore.payload import decode_array, open_explorer
from npformer.nn import MultiHeadAttention
from npformer.train.checkpoint import load_run
from oracles import minilm_dir, require

# each group's attention module of layer {}, by model kind (written out, not read from explore.knockout)
MODULES = {"dates": {"encoder self": "encoder.layers.{}.self_attn", "decoder self": "decoder.layers.{}.self_attn",
                     "decoder cross": "decoder.layers.{}.multihead_attn"},
           "text": {"self": "blocks.layers.{}.self_attn"}, "digits": {"self": "encoder.layers.{}.self_attn"},
           "tabletop": {"self": "encoder.layers.{}.self_attn"}}


def zeroed(model, name: str, head: int, forward):
    """``forward()`` with W_o's columns of head ``head`` of module ``name`` set to zero, then restored."""
    mha = dict(model.modules())[name]
    d = mha.d_model // mha.n_heads
    w = mha.out_proj.params["weight"]                                   # (E_out, E_in): y = x @ w.T
    saved = w.copy()
    w[:, head * d:(head + 1) * d] = 0
    try:
        return forward()
    finally:
        w[...] = saved


def log_odds(logits, slots, ids) -> np.ndarray:
    """log(p / (1 - p)) of each target: its logit minus the logsumexp of the others at its position."""
    return np.array([logits[s, c] - special.logsumexp(np.delete(logits[s], c))
                     for s, c in zip(slots, ids, strict=True)])


def forward_of(kind, run):
    """The explained forward of INPUTS[kind] -> () -> logits (P, V) at the output positions."""
    model, task, inp = run.model, run.task, INPUTS[kind][0]
    if kind == "dates":
        src = task.encode_source(inp["text"])[None]
        bos = np.full((1, 1), task.vocab.bos_id, dtype=np.int64)
        out = greedy(model, bos, min(task.max_target_len, model.config.max_len), src_ids=src, eos_id=task.vocab.eos_id)
        tgt_in = np.concatenate([[task.vocab.bos_id], out[0, :-1]])[None]
        return lambda: model.forward(src, tgt_in)[0][0]
    if kind == "text":
        ids = task.encode_source(inp["text"])[None]
        return lambda: model.forward(ids)[0][0]
    if kind == "digits":
        x = task.x_test[inp["index"]:inp["index"] + 1].astype(model.dtype)
        return lambda: model.forward(x)[0]
    from npformer.data.tabletop import model_words, reader_for
    from npformer.data.tabletop_policy import scene_for_seed
    scene, instruction = scene_for_seed(inp["seed"])
    words = model_words(reader_for(model), model, [instruction])
    return lambda: model.forward(words, scene.image[None].astype(model.dtype))[0][0]


@pytest.mark.parametrize("chunks", ["one batch", "a batch per head"])
@pytest.mark.parametrize("kind", ["dates", "text", "digits", "tabletop"])
def test_the_pages_knockouts_equal_a_forward_with_that_heads_slice_zeroed(explore_runs, kind, chunks,  # noqa: F811
                                                                          monkeypatch):
    """Also with the batches forced down to one copy (ko.CHUNK_SCORES = 1), so that every head but the
    first is knocked out in a later batch than the first: a mask built wrong past the first batch fails."""
    if chunks == "a batch per head":
        monkeypatch.setattr(ko, "CHUNK_SCORES", 1)
    run = load_run(explore_runs[kind])
    inp = open_explorer(explore_runs[kind]).payload(INPUTS[kind])["inputs"][0]
    kn, targets = inp["knockout"], inp["targets"]
    assert kn["measure"] == "log-probability" and set(kn["groups"]) == set(MODULES[kind])
    slots = [0 if kind == "digits" else t["query"] for t in targets]
    ids = [t["id"] for t in targets]
    assert [t["rank"] for t in targets if t["position"] == targets[0]["position"]][:5] == [0, 1, 2, 3, 4]
    forward = forward_of(kind, run)
    full = forward().astype(np.float64)                                # (P, V)
    logp_full = special.log_softmax(full, axis=-1)
    odds_full = log_odds(full, slots, ids)
    np.testing.assert_allclose(kn["full"]["logit"], full[slots, ids], rtol=0, atol=1e-5)
    np.testing.assert_allclose(kn["full"]["prob"], np.exp(logp_full[slots, ids]), rtol=0, atol=1e-5)
    assert kn["full"]["decision"] == full[slots].argmax(-1).tolist()
    for group, kg in kn["groups"].items():
        logit, prob, effect = (decode_array(kg[n]) for n in ("logit", "prob", "effect"))
        decision = decode_array(kg["decision"])
        n_layers, n_heads, n_targets = logit.shape
        assert n_targets == len(targets)
        for layer in range(n_layers):
            for head in range(n_heads):
                out = zeroed(run.model, MODULES[kind][group].format(layer), head, forward).astype(np.float64)
                logp = special.log_softmax(out, axis=-1)
                np.testing.assert_allclose(logit[layer, head], out[slots, ids], rtol=0, atol=1e-5)
                np.testing.assert_allclose(prob[layer, head], np.exp(logp[slots, ids]), rtol=0, atol=1e-5)
                np.testing.assert_allclose(effect[layer, head], odds_full - log_odds(out, slots, ids),
                                           rtol=0, atol=1e-5)
                assert decision[layer, head].tolist() == out[slots].argmax(-1).tolist()


@pytest.mark.parametrize("kind", ["dates", "tabletop"])
@pytest.mark.filterwarnings("ignore::scipy.stats.ConstantInputWarning")      # a constant score list: rho undefined
def test_attention_scores_keys_and_correlations(explore_runs, kind):  # noqa: F811
    """The attention score is the head's weight (the model's own, attention_weights) on the stored keys, which
    are the most relevant ones of the target's row; rho is scipy's Spearman of the two stored scores."""
    run = load_run(explore_runs[kind])
    inp = open_explorer(explore_runs[kind]).payload(INPUTS[kind])["inputs"][0]
    kn = inp["knockout"]
    caches = _weights(kind, run)
    for g in inp["groups"]:
        kg = kn["groups"][g["name"]]
        attention, effect = decode_array(kg["attention"]), decode_array(kg["effect"])
        w = caches[g["name"]]                                          # (L, H, Tq, Tk)
        for k, t in enumerate(inp["targets"]):
            query = kg["queries"][k]
            if g["name"] == t["group"]:
                assert query == t["query"]
            r = decode_array(g["relevance"][t["name"]]).astype(np.float64)
            row = r.mean(0) if query is None else r[query]
            keys = kg["keys"][k]
            assert len(set(keys)) == kn["top_keys"] == 3
            others = np.delete(row, keys)
            assert row[keys].min() >= others.max(initial=-np.inf) - 2e-3 * max(1.0, abs(row).max())  # float16 storage
            wrow = w.mean(2) if query is None else w[:, :, query]
            np.testing.assert_allclose(attention[..., k], wrow[..., keys].sum(-1), rtol=0, atol=1e-5)
            a, e = attention[..., k].ravel(), effect[..., k].ravel()
            rho = stats.spearmanr(a, e).statistic
            if np.isnan(rho):
                assert kg["spearman"][k] is None and (np.ptp(a) == 0 or np.ptp(e) == 0)
            else:
                assert kg["spearman"][k] == pytest.approx(rho, abs=1e-9)


def _weights(kind, run) -> dict:
    """{group: (L, H, Tq, Tk) float64} from the model's own attention_weights of the explained forward."""
    model = run.model
    inp = INPUTS[kind][0]
    if kind == "dates":
        task = run.task
        src = task.encode_source(inp["text"])[None]
        bos = np.full((1, 1), task.vocab.bos_id, dtype=np.int64)
        out = greedy(model, bos, min(task.max_target_len, model.config.max_len), src_ids=src, eos_id=task.vocab.eos_id)
        _, cache = model.forward(src, np.concatenate([[task.vocab.bos_id], out[0, :-1]])[None])
        maps = model.attention_weights(cache)
        return {"encoder self": np.stack([m["self"][0] for m in maps["encoder"]]).astype(np.float64),
                "decoder self": np.stack([m["self"][0] for m in maps["decoder"]]).astype(np.float64),
                "decoder cross": np.stack([m["cross"][0] for m in maps["decoder"]]).astype(np.float64)}
    from npformer.data.tabletop import model_words, reader_for
    from npformer.data.tabletop_policy import scene_for_seed
    scene, instruction = scene_for_seed(inp["seed"])
    words = model_words(reader_for(model), model, [instruction])
    _, cache = model.forward(words, scene.image[None].astype(model.dtype))
    return {"self": np.stack([m["self"][0] for m in model.attention_weights(cache)]).astype(np.float64)}


def test_minilm_knockouts_are_cosines_with_the_full_embedding():
    minilm_dir()
    ex = open_explorer("minilm")
    inp = ex.payload([{"text": "A man is playing a guitar."}])["inputs"][0]
    kn = inp["knockout"]
    assert kn["measure"] == "cosine" and [t["name"] for t in inp["targets"]] == ["[CLS]", "mean pooled"]
    model = ex.encoder.model
    ids = ex.encoder.tokenizer.encode(["A man is playing a guitar."])

    def vectors():
        h = model.forward(ids)[0][0].astype(np.float64)                  # (T, E)
        return np.stack([h[0], h.mean(0)])                               # (2, E): [CLS], mean pooled
    full = vectors()
    np.testing.assert_allclose(kn["full"]["value"], np.linalg.norm(full, axis=-1), rtol=1e-6)
    kg = kn["groups"]["self"]
    value, cosine, effect = (decode_array(kg[n]) for n in ("value", "cosine", "effect"))
    assert value.shape == (6, 12, 2)
    for layer, head in ((0, 0), (3, 7), (5, 11)):
        v = zeroed(model, f"encoder.layers.{layer}.self_attn", head, vectors)
        cos = (v * full).sum(-1) / (np.linalg.norm(v, axis=-1) * np.linalg.norm(full, axis=-1))
        np.testing.assert_allclose(value[layer, head], np.linalg.norm(v, axis=-1), rtol=1e-5)
        np.testing.assert_allclose(cosine[layer, head], cos, rtol=0, atol=1e-5)
        np.testing.assert_allclose(effect[layer, head], 1 - cos, rtol=0, atol=1e-5)


# -- the ranking and the correlation ----------------------------------------------------------------
def test_average_ranks_and_spearman_equal_scipys():
    rng = np.random.default_rng(0)
    for n in (2, 5, 16, 72):
        a = rng.integers(0, 4, n).astype(np.float64)                      # many ties
        b = rng.standard_normal(n)
        np.testing.assert_array_equal(ko.average_ranks(a), stats.rankdata(a))
        np.testing.assert_array_equal(ko.average_ranks(b), stats.rankdata(b))
        want = stats.spearmanr(a, b).statistic
        got = ko.spearman(a, b)
        assert (got is None and np.isnan(want)) or got == pytest.approx(want, abs=1e-12)
    assert ko.spearman([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]) is None          # nothing to rank
    assert ko.spearman([1.0, 2.0, 3.0], [3.0, 2.0, 1.0]) == pytest.approx(-1.0)


# -- the mechanism: MultiHeadAttention.head_mask ----------------------------------------------------
def test_head_mask_forward_and_backward_equal_torch_with_the_slice_zeroed():
    """Per batch item a different head zeroed; out and every gradient equal torch autograd (float64) of
    attention written out with that slice of the merged heads multiplied by zero."""
    torch = require("torch")
    rng = np.random.default_rng(1)
    e, h, b, t = 8, 4, 2, 5
    mha = MultiHeadAttention(e, h, rng=rng, dtype=np.float64).eval()
    mha.out_proj.params["bias"][...] = rng.standard_normal(e)
    x = rng.standard_normal((b, t, e))
    mask = np.ones((b, h))
    mask[0, 1] = mask[1, 3] = 0
    mha.head_mask = mask
    out, cache = mha.forward(x)
    dout = rng.standard_normal(out.shape)
    (dx, _), grads = mha.backward(dout, cache)
    del mha.head_mask
    p = {k: torch.tensor(v, requires_grad=True) for k, v in mha.state_dict().items()}
    tx = torch.tensor(x, requires_grad=True)
    qkv = tx @ p["in_proj_weight"].T + p["in_proj_bias"]
    q, k, v = (z.reshape(b, t, h, e // h).transpose(1, 2) for z in qkv.split(e, dim=-1))
    heads = torch.softmax(q @ k.transpose(-1, -2) / np.sqrt(e // h), -1) @ v           # (B, H, T, D)
    heads = heads * torch.tensor(mask)[:, :, None, None]
    y = heads.transpose(1, 2).reshape(b, t, e) @ p["out_proj.weight"].T + p["out_proj.bias"]
    (y * torch.tensor(dout)).sum().backward()
    np.testing.assert_allclose(out, y.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-10, atol=1e-12)
    for name, g in grads.items():
        np.testing.assert_allclose(g, p[name].grad.numpy(), rtol=1e-10, atol=1e-12, err_msg=name)
    assert not np.allclose(out, mha.forward(x)[0])                      # the mask mattered, and is gone now


def test_heads_masked_restores_the_modules_and_refuses_unknown_names(explore_runs):  # noqa: F811
    model = load_run(explore_runs["text"]).model
    with ko.heads_masked(model, {"blocks.layers.0.self_attn": np.array([1.0, 0.0])}):
        assert dict(model.modules())["blocks.layers.0.self_attn"].head_mask is not None
    assert all(m.head_mask is None for _, m in model.modules() if isinstance(m, MultiHeadAttention))
    with pytest.raises(KeyError, match="no attention module"):
        with ko.heads_masked(model, {"blocks.layers.0.ffn": np.ones(2)}):
            pass


@pytest.mark.parametrize("kind", ["dates", "tabletop"])
def test_noise_floor_is_the_gap_between_float32_and_float64_forwards(explore_runs, kind):  # noqa: F811
    """KNOCKOUT.noise_floor: per target, |log-odds of the float32 forward - log-odds of the float64 one|, the
    float64 forward run here on a second copy of the run cast with astype; the explorer's model comes back
    with its own float32 arrays."""
    ex = open_explorer(explore_runs[kind])
    before = {k: v for k, v in ex.run.model.state_dict().items()}
    inp = ex.payload(INPUTS[kind])["inputs"][0]
    after = ex.run.model.state_dict()
    assert all(after[k] is v and v.dtype == np.float32 for k, v in before.items())   # the same arrays, untouched
    slots, ids = [t["query"] for t in inp["targets"]], [t["id"] for t in inp["targets"]]
    run32, run64 = load_run(explore_runs[kind]), load_run(explore_runs[kind])
    run64.model.astype(np.float64)
    lo32 = log_odds(forward_of(kind, run32)().astype(np.float64), slots, ids)
    lo64 = log_odds(forward_of(kind, run64)(), slots, ids)
    floor = np.array(inp["knockout"]["noise_floor"])
    np.testing.assert_allclose(floor, np.abs(lo32 - lo64), rtol=1e-6, atol=1e-12)
    assert 0 < floor.max() < 1e-3                  # float32's rounding, far above float64's and far below an effect
