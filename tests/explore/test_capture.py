"""What the explorer stores is what the model computed: the weights recomputed in float64 from the
payload's q, k, mask and scale equal each model's own ``attention_weights`` of an independent forward
(1e-5), and sum_j w_ij v_j equals that head's slice of the concatenated heads the model fed to out_proj."""
import numpy as np
import pytest
from explore_runs import INPUTS, explore_runs, softmax_rows  # noqa: F401 (a fixture)

from npformer.explore import capture as cap
from npformer.explore.payload import decode_array, open_explorer
from npformer.train.checkpoint import load_run
from oracles import minilm_dir


def _forward(kind: str, run, inp: dict):
    """An independent forward of the input, as the commands run it: (model cache, {group: weights}),
    the weights from the model's own ``attention_weights`` accessor, batch item 0."""
    task, model = run.task, run.model
    if kind == "dates":
        from npformer.decode import greedy
        v = task.vocab
        src = task.encode_source(inp["text"])[None]
        out = greedy(model, np.full((1, 1), v.bos_id), min(task.max_target_len, model.config.max_len),
                     src_ids=src, eos_id=v.eos_id)[0]
        _, cache = model.forward(src, np.concatenate([[v.bos_id], out[:-1]])[None])
        att = model.attention_weights(cache)
        return cache, {"encoder self": np.stack([a["self"][0] for a in att["encoder"]]),
                       "decoder self": np.stack([a["self"][0] for a in att["decoder"]]),
                       "decoder cross": np.stack([a["cross"][0] for a in att["decoder"]])}
    if kind == "text":
        _, cache = model.forward(task.encode_source(inp["text"])[None])
    elif kind == "digits":
        _, cache = model.forward(task.x_test[inp["index"]:inp["index"] + 1].astype(model.dtype))
    else:
        from npformer.data.tabletop import model_words, reader_for
        from npformer.data.tabletop_policy import scene_for_seed
        scene, text = scene_for_seed(inp["seed"])
        words = model_words(reader_for(model), model, [text])
        _, cache = model.forward(words, scene.image[None].astype(model.dtype))
    return cache, {"self": np.stack([a["self"][0] for a in model.attention_weights(cache)])}


def _recomputed(group: dict) -> tuple[np.ndarray, np.ndarray]:
    """(weights (L, H, Tq, Tk), head outputs (L, H, Tq, D)) in float64 from the stored q, k, v, mask, scale."""
    q, k, v = (decode_array(group[n]).astype(np.float64) for n in ("q", "k", "v"))
    scores = q @ np.swapaxes(k, -1, -2) * group["scale"]
    if group["bias"] is not None:
        scores = scores + decode_array(group["bias"])
    if group["mask"] is not None:
        scores = np.where(decode_array(group["mask"]).astype(bool), scores, -np.inf)
    w = softmax_rows(scores)
    return w, w @ v


@pytest.mark.parametrize("kind", ["dates", "text", "digits", "tabletop"])
def test_stored_numbers_give_the_models_attention(explore_runs, kind):  # noqa: F811
    run = load_run(explore_runs[kind])
    payload = open_explorer(explore_runs[kind]).payload(INPUTS[kind])
    _, ref = _forward(kind, run, INPUTS[kind][0])
    groups = payload["inputs"][0]["groups"]
    assert [g["name"] for g in groups] == list(ref)
    for g in groups:
        w, _ = _recomputed(g)
        np.testing.assert_allclose(w, ref[g["name"]], rtol=0, atol=1e-5, err_msg=g["name"])
        np.testing.assert_allclose(w.sum(-1)[w.sum(-1) > 0], 1.0, atol=1e-12)          # rows sum to 1
        if g["weights"] is not None:                                                 # the 8-bit copy
            np.testing.assert_allclose(decode_array(g["weights"]), ref[g["name"]], atol=0.5 / 255 + 1e-7)
        assert len(g["query_tokens"]) == w.shape[2] and len(g["key_tokens"]) == w.shape[3]


def test_head_outputs_are_the_models_concatenated_heads(explore_runs):  # noqa: F811
    """The step view's last rows: sum_j w_ij v_j is head h's slice of what out_proj read, in every group."""
    run = load_run(explore_runs["dates"])
    cache, _ = _forward("dates", run, INPUTS["dates"][0])
    payload = open_explorer(explore_runs["dates"]).payload(INPUTS["dates"])
    enc_layers, dec_layers = cache[0][1][0], cache[1][1][0]           # the stacks' per-layer caches
    mha = {"encoder self": [c[0].fn for c in enc_layers], "decoder self": [c[0].fn for c in dec_layers],
           "decoder cross": [c[1].fn for c in dec_layers]}
    for g in payload["inputs"][0]["groups"]:
        _, out = _recomputed(g)                                        # (L, H, Tq, D)
        n_layers, n_heads, tq, d = out.shape
        for layer in range(n_layers):
            merged = mha[g["name"]][layer][3][0][0]                    # out_proj's input x, item 0: (Tq, E)
            np.testing.assert_allclose(out[layer].transpose(1, 0, 2).reshape(tq, n_heads * d), merged,
                                       rtol=0, atol=1e-5, err_msg=f"{g['name']} layer {layer}")


def test_a_mask_other_than_the_models_is_refused(explore_runs):  # noqa: F811
    run = load_run(explore_runs["dates"])
    cache, _ = _forward("dates", run, INPUTS["dates"][0])
    with pytest.raises(RuntimeError, match="decoder self: weights recomputed"):
        cap.capture("transformer", cache, {"encoder self": None, "decoder self": None, "decoder cross": None})
    groups = cap.capture("transformer", cache, {"encoder self": None, "decoder self": cap.causal(
        cache[1][1][0][0][0].fn[2][0].shape[2]), "decoder cross": None})
    assert groups["decoder self"].mask is not None and groups["encoder self"].mask is None
    with pytest.raises(ValueError, match="no attention capture"):
        cap.capture("nonesuch", cache, {})


def test_minilm_stored_numbers_give_its_attention():
    minilm_dir()
    from npformer.explore.encoders import MiniLMExplorer
    from npformer.nn import Encoder

    ex = MiniLMExplorer()
    text = "The cat sat on the mat, unbothered."
    payload = ex.payload([{"text": text}])
    ids = ex.encoder.tokenizer.encode([text])[0]
    _, cache = ex.encoder.model.forward(ids[None])
    ref = np.stack([a["self"][0] for a in Encoder.attention_weights(cache[1])])      # (6, 12, T, T)
    (g,) = payload["inputs"][0]["groups"]
    w, _ = _recomputed(g)
    np.testing.assert_allclose(w, ref, rtol=0, atol=1e-5)
    assert g["query_tokens"][0] == "[CLS]" and g["query_tokens"][-1] == "[SEP]" and len(g["query_tokens"]) == len(ids)
    assert payload["model"] == {"kind": "minilm", "d_model": 384, "n_heads": 12, "head_dim": 32, "norm": "post"}


def test_head_statistics_by_hand():
    """Uniform attention over 3 keys: entropy ln 3, distance (1 + 2/3 + 1) / 3, weight on key 0 1/3; causal
    uniform: entropy (0 + ln 2 + ln 3) / 3, distance (0 + 1/2 + 1) / 3, first (1 + 1/2 + 1/3) / 3."""
    from npformer.explore.payload import head_stats
    uniform = np.full((1, 1, 3, 3), 1 / 3)
    s = head_stats(uniform, None)
    np.testing.assert_allclose([s["entropy"][0][0], s["distance"][0][0], s["first"][0][0]],
                               [np.log(3), 8 / 9, 1 / 3], atol=1e-5)
    m = np.tri(3, dtype=bool)
    causal = (m / m.sum(-1, keepdims=True))[None, None]
    s = head_stats(causal, m)
    np.testing.assert_allclose([s["entropy"][0][0], s["distance"][0][0], s["first"][0][0]],
                               [(np.log(2) + np.log(3)) / 3, 0.5, (1 + 1 / 2 + 1 / 3) / 3], atol=1e-5)
