"""The explorer page on real models: tiny runs of every trained kind (explore_runs.py) and MiniLM,
through the payload builder (npformer.explore.payload) and render_html, in Debian's chromium.

For each kind: the page opens with no console error and no request; switching layer and head
changes the drawing; the step view's numbers equal npformer's attention_forward on the stored q, k,
v and mask (1e-5), and the weights the model itself stored (8-bit, 1/255); rollout and relevance
shown equal the payload's."""
import numpy as np
import pytest
from explore_runs import INPUTS, explore_runs  # noqa: F401 (a fixture)

from npformer.explore.payload import decode_array, open_explorer
from npformer.explore.render import render_html
from npformer.ops import attention_forward
from oracles import minilm_dir

LOCAL = ("file://", "data:", "blob:")
KINDS = ("dates", "text", "digits", "tabletop")


def values(page, selector):
    return np.array([float(x) for x in page.eval_on_selector_all(selector, "els => els.map(e => e.dataset.value)")])


def write_page(tmp_path, name, payload):
    path = tmp_path / f"{name}.html"
    path.write_text(render_html(payload), encoding="utf-8")
    return path.as_uri()


def check_views(o, payload):
    """Every check of the module on one opened page."""
    page = o.page
    inp = payload["inputs"][0]
    h0 = o.canvas_hash("#head-canvas")
    page.select_option("#layer-select", "1")
    h1 = o.canvas_hash("#head-canvas")
    assert h1 != h0
    page.click("#head-boxes input[data-head='0']")
    assert o.canvas_hash("#head-canvas") != h1
    for gi, g in enumerate(inp["groups"]):
        q, k, v = (decode_array(g[n]) for n in "qkv")
        mask = None if g["mask"] is None else decode_array(g["mask"]).astype(bool)
        out, w, _ = attention_forward(q, k, v, mask=mask)               # (L, H, Tq, Dv), (L, H, Tq, Tk)
        layer, head, i = g["n_layers"] - 1, g["n_heads"] - 1, len(g["query_tokens"]) - 1
        page.select_option("#group-select", str(gi))
        page.select_option("#layer-select", str(layer))
        page.select_option("#query-select", str(i))
        o.click_tab("step")
        page.select_option("#step-head", str(head))
        shown = values(page, "#step-table td.weight")
        np.testing.assert_allclose(shown, w[layer, head, i], rtol=0, atol=1e-5)
        if g["weights"] is not None:                                     # the model's own weights, 8-bit
            np.testing.assert_allclose(shown, decode_array(g["weights"])[layer, head, i], rtol=0, atol=0.5 / 255 + 1e-6)
        dots = q[layer, head, i].astype(np.float64) @ k[layer, head].astype(np.float64).T     # (Tk,)
        np.testing.assert_allclose(values(page, "#step-table td.scaled"), dots * g["scale"], rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(values(page, "#step-out span"), out[layer, head, i], rtol=0, atol=1e-5)
        assert abs(values(page, "#step-sum")[0] - 1) < 1e-9
        o.click_tab("head")
    for t_index, t in enumerate(inp["targets"][:2]):
        o.click_tab("explain")
        page.select_option("#target-select", str(t_index))             # moves to the target's group
        g = next(g for g in inp["groups"] if g["name"] == t["group"])
        query = t["query"]

        def row(a, query=query):
            return a.mean(0) if query is None else a[query]
        if g["rollout"] is not None:
            page.select_option("#rollout-layer", str(g["n_layers"] - 1))
            np.testing.assert_allclose(values(page, "#explain-rollout td.value"), row(decode_array(g["rollout"])[-1]),
                                       rtol=0, atol=1e-6)
        np.testing.assert_allclose(values(page, "#explain-relevance td.value"),
                                   row(decode_array(g["relevance"][t["name"]]).astype(np.float64)), rtol=0, atol=1e-6)
    if inp["image"] is not None:
        o.click_tab("image")
        page.wait_for_selector("#image-canvas")
    assert o.errors == []
    assert o.foreign_requests(LOCAL) == []


@pytest.mark.parametrize("kind", KINDS)
def test_real_runs_in_the_page(explore_runs, opened, tmp_path, kind):  # noqa: F811
    payload = open_explorer(explore_runs[kind]).payload(INPUTS[kind])
    o = opened(write_page(tmp_path, kind, payload))
    assert not o.page.is_hidden("#tabs button[data-view='training']")   # these runs saved their probes
    check_views(o, payload)


def test_minilm_two_sentences_in_the_page(opened, tmp_path):
    minilm_dir()
    payload = open_explorer("minilm").payload([{"text": "A man is playing a guitar."},
                                               {"text": "Someone plays an instrument."}])
    o = opened(write_page(tmp_path, "minilm", payload))
    assert o.page.is_visible("#input-select")
    assert "cosine similarity" in o.page.text_content("#summary")
    check_views(o, payload)
    o.page.select_option("#input-select", "1")                        # the second sentence
    o.click_tab("head")
    assert o.page.eval_on_selector_all("#query-select option", "os => os.length") == \
        len(payload["inputs"][1]["groups"][0]["query_tokens"])
    assert o.errors == []
