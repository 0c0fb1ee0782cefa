"""``npformer explore DIR "text"`` for a GPT-2-family directory (a tiny one saved by transformers,
tests/pretrained/tiny_gpt2.py): the payload's generation timeline against the model's own greedy
decoding and KV cache, the command line, and the page's timeline view in a real browser (keyboard too)."""
import json
import re

import numpy as np
import pytest

from oracles import require

require("torch")
require("transformers")

from tiny_gpt2 import write_gpt2  # noqa: E402

from npformer.cli import main  # noqa: E402
from npformer.decode import make_stepper  # noqa: E402
from npformer.explore.payload import decode_array, open_explorer  # noqa: E402
from npformer.explore.render import render_html  # noqa: E402
from npformer.ops import attention_forward  # noqa: E402
from npformer.pretrained import CausalLM  # noqa: E402

PROMPT = "the cat sat on"


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("explore_gpt2")
    write_gpt2(d, n_positions=64, eos=False)
    return d


@pytest.fixture(scope="module")
def payload(gpt2_dir):
    return open_explorer(gpt2_dir).payload([{"text": PROMPT}])


def test_the_timeline_is_the_greedy_generation_and_its_rows_the_cached_steps(gpt2_dir, payload):
    lm = CausalLM.load(gpt2_dir)
    prompt = lm.encode(PROMPT)
    new = lm.generate(prompt, 12)
    inp = payload["inputs"][0]
    tl, g = inp["timeline"], inp["groups"][0]
    assert payload["model"]["kind"] == "causal_lm" and tl["group"] == g["name"] == "self"
    assert tl["prompt_tokens"] == len(prompt)
    assert [s["id"] for s in tl["steps"]] == new
    assert [s["query"] for s in tl["steps"]] == list(range(len(prompt) - 1, len(prompt) + len(new) - 1))
    assert inp["output"] == lm.tokenizer.decode(new)
    # the keys the page attends over are the keys the KV cache stored while generating
    read = np.asarray([prompt + new[:-1]])                                   # (1, T)
    stepper = make_stepper(lm.model, batch=1, max_len=read.shape[1])
    stepper.step(read[:, :len(prompt)])
    for t in range(len(prompt), read.shape[1]):
        stepper.step(read[:, t:t + 1])
    k = decode_array(g["k"])                                                # (L, H, T, D)
    cached = np.stack([kl[0, :, :read.shape[1]] for kl in stepper.cache.k])
    np.testing.assert_allclose(k, cached, rtol=0, atol=1e-5)
    # each step's row reads the prompt and the tokens before it, nothing after
    q = decode_array(g["q"])
    w = attention_forward(q, k, k, mask=np.tri(read.shape[1], dtype=bool), scale=g["scale"])[1]
    for s in tl["steps"]:
        row = w[:, :, s["query"]]                                           # (L, H, T)
        assert np.allclose(row.sum(-1), 1) and not row[..., s["query"] + 1:].any()


def test_the_knockouts_equal_a_forward_with_that_heads_slice_zeroed(gpt2_dir, payload):
    """Each head knocked out by hand (its columns of W_o zeroed, the ordinary forward run, nothing of
    explore.knockout used): the page's logit, probability, decision and log-odds drop for every step it
    explains, to 1e-5; rho is scipy's Spearman of the two stored scores."""
    from scipy import special, stats

    lm = CausalLM.load(gpt2_dir)
    inp = payload["inputs"][0]
    tl, kn, targets = inp["timeline"], inp["knockout"], inp["targets"]
    slots, ids = [t["query"] for t in targets], [s["id"] for s in tl["steps"][:len(targets)]]
    read = np.asarray([lm.encode(PROMPT) + [s["id"] for s in tl["steps"][:-1]]])        # (1, T)

    def odds(logits):                                                     # log(p / (1 - p)) of each target
        return np.array([logits[s, c] - special.logsumexp(np.delete(logits[s], c))
                         for s, c in zip(slots, ids, strict=True)])

    full = lm.model.forward(read)[0][0].astype(np.float64)                 # (T, V)
    assert kn["full"]["decision"] == ids == full[slots].argmax(-1).tolist()
    np.testing.assert_allclose(kn["full"]["logit"], full[slots, ids], rtol=0, atol=1e-5)
    kg = kn["groups"]["self"]
    logit, prob, effect, decision = (decode_array(kg[n]) for n in ("logit", "prob", "effect", "decision"))
    assert logit.shape == (lm.config.n_layer, lm.config.n_head, len(targets))
    for layer in range(lm.config.n_layer):
        mha = dict(lm.model.modules())[f"blocks.layers.{layer}.self_attn"]
        d = mha.d_model // mha.n_heads
        w = mha.out_proj.params["weight"]                                 # (E, E): y = x @ w.T
        for head in range(lm.config.n_head):
            saved = w.copy()
            w[:, head * d:(head + 1) * d] = 0
            try:
                out = lm.model.forward(read)[0][0].astype(np.float64)
            finally:
                w[...] = saved
            np.testing.assert_allclose(logit[layer, head], out[slots, ids], rtol=0, atol=1e-5)
            np.testing.assert_allclose(prob[layer, head], special.softmax(out, axis=-1)[slots, ids], rtol=0, atol=1e-5)
            np.testing.assert_allclose(effect[layer, head], odds(full) - odds(out), rtol=0, atol=1e-5)
            assert decision[layer, head].tolist() == out[slots].argmax(-1).tolist()
    attention = decode_array(kg["attention"])
    for k in range(len(targets)):
        rho = stats.spearmanr(attention[..., k].ravel(), effect[..., k].ravel()).statistic
        assert kg["spearman"][k] == pytest.approx(rho, abs=1e-9) or (np.isnan(rho) and kg["spearman"][k] is None)


def test_explore_refuses_target_on_a_gpt2_page(gpt2_dir, tmp_path, capsys):
    rc = main(["explore", str(gpt2_dir), PROMPT, "--target", "3=x", "--out", str(tmp_path / "p.html")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "--target" in err and "GPT-2" in err
    # --serve's form reaches the explorer itself, which refuses it too
    with pytest.raises(ValueError, match="--target is for trained runs"):
        open_explorer(gpt2_dir).payload([{"text": PROMPT, "target": "3=x"}])


def test_npformer_explore_writes_the_gpt2_page(gpt2_dir, tmp_path, capsys):
    out = tmp_path / "gpt2.html"
    rc = main(["explore", str(gpt2_dir), PROMPT, "--out", str(out)])
    stdout, err = capsys.readouterr()
    assert rc == 0, err
    assert stdout.strip() == str(out)
    text = out.read_text(encoding="utf-8")
    m = re.search(r'<script type="application/json" id="payload">(.*?)</script>', text, re.S)
    timeline = json.loads(m.group(1))["inputs"][0]["timeline"]
    assert timeline["prompt_tokens"] == len(CausalLM.load(gpt2_dir).encode(PROMPT))
    assert 'P.addView("timeline"' in text                                # the view's script is inlined


def test_timeline_view_in_the_browser(payload, tmp_path, opened):
    require("playwright")
    path = tmp_path / "gpt2.html"
    path.write_text(render_html(payload), encoding="utf-8")
    o = opened(path.as_uri())
    page = o.page
    o.click_tab("timeline")
    page.wait_for_selector("#view-timeline.active #timeline-canvas")
    inp = payload["inputs"][0]
    g, steps = inp["groups"][0], inp["timeline"]["steps"]
    q, k = decode_array(g["q"]).astype(np.float64), decode_array(g["k"]).astype(np.float64)
    t = k.shape[2]
    w = attention_forward(q, k, k, mask=np.tri(t, dtype=bool), scale=g["scale"])[1]   # (L, H, T, T)

    def shown_top():
        keys = page.eval_on_selector_all("#timeline-top tr[data-key]", "rs => rs.map(r => +r.dataset.key)")
        vals = page.eval_on_selector_all("#timeline-top td.w", "ts => ts.map(t => +t.dataset.value)")
        return keys, np.array(vals)

    def expected(step, layer=0):
        query = steps[step]["query"]
        row = w[layer, :, query, :query + 1].mean(0)                        # the mean over all heads
        return np.sort(row)[::-1][:5]

    page.click("#heads-all")
    keys, vals = shown_top()
    np.testing.assert_allclose(vals, expected(0), rtol=0, atol=1e-6)
    assert "step 1 wrote" in page.text_content("#timeline-said")
    before = o.canvas_hash("#timeline-canvas")
    page.focus("#timeline-canvas")
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowDown")
    assert "step 3 wrote" in page.text_content("#timeline-said")
    np.testing.assert_allclose(shown_top()[1], expected(2), rtol=0, atol=1e-6)
    page.keyboard.press("ArrowRight")
    assert o.canvas_hash("#timeline-canvas") != before
    page.select_option("#layer-select", "1")
    page.wait_for_selector("#view-timeline.active #timeline-canvas")
    np.testing.assert_allclose(shown_top()[1], expected(2, layer=1), rtol=0, atol=1e-6)
    assert o.errors == [] and o.foreign_requests(("file://", "data:", "blob:")) == []


def test_serve_answers_a_new_prompt_with_its_timeline(gpt2_dir):
    from serve_client import post, serving

    with serving(gpt2_dir, [{"text": PROMPT}]) as srv:
        status, p = post(srv, {"inputs": ["a dog ran far"]})
        assert status == 200 and p["model"]["kind"] == "causal_lm"
        lm = CausalLM.load(gpt2_dir)
        assert [s["id"] for s in p["inputs"][0]["timeline"]["steps"]] == lm.generate(lm.encode("a dog ran far"), 12)
        status, p = post(srv, {"inputs": ["word " * 300]})                  # over the explorer's prompt limit
        assert status == 400 and "the explorer takes 1 to" in p["error"]
