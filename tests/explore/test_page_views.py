"""The explorer page in a real browser (Debian's chromium through Playwright), on payloads with the
shapes of each model kind whose numbers are npformer's own attention (page_payloads.py).

What a learner does, checked: the page opens with no console error and no request but its own file;
switching layer or heads redraws; the step view's numbers equal ``attention_forward``; rollout and
relevance shown equal the payload; hover, selection, statistics links, training slider and export work.
"""
import json

import numpy as np
import pytest
from page_payloads import KINDS, build, decode

from npformer.explore.render import render_html
from npformer.ops import attention_forward

LOCAL = ("file://", "data:", "blob:")      # the page itself, and downloads made in the page


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """kind -> (file URL, payload, refs), each page written once."""
    folder = tmp_path_factory.mktemp("explore_pages")
    out = {}
    for kind in KINDS:
        payload, refs = build(kind)
        path = folder / f"{kind}.html"
        path.write_text(render_html(payload), encoding="utf-8")
        out[kind] = (path.as_uri(), payload, refs)
    return out


def values(page, selector):
    """The exact numbers behind the shown ones (each element's data-value)."""
    return np.array([float(x) for x in page.eval_on_selector_all(selector, "els => els.map(e => e.dataset.value)")])


@pytest.mark.parametrize("kind", KINDS)
def test_opens_clean_and_redraws_on_layer_and_head(pages, opened, kind):
    url, payload, _ = pages[kind]
    o = opened(url)
    page = o.page
    assert page.title() == payload["title"]
    page.click("#heads-all")                                       # from the most focused head to all of them
    before = o.canvas_hash("#head-canvas")
    page.select_option("#layer-select", "1")
    after_layer = o.canvas_hash("#head-canvas")
    assert after_layer != before
    page.click("#head-boxes input[data-head='1']")                 # one head fewer
    after_head = o.canvas_hash("#head-canvas")
    assert after_head != after_layer
    page.click("#heads-none")
    assert o.canvas_hash("#head-canvas") != after_head
    for group in range(1, len(payload["inputs"][0]["groups"])):    # the decoder's groups too
        page.select_option("#group-select", str(group))
        page.click("#heads-all")
    image = ("image",) if kind in ("digits", "tabletop") else ()
    for view in ("model", "step", "matrix", "stats", "explain") + image:
        o.click_tab(view)
        page.wait_for_selector(f"#view-{view}.active canvas")
    assert o.errors == []
    assert o.foreign_requests(LOCAL) == [], "the page made a request"
    assert o.requests[0] == url


@pytest.mark.parametrize("kind", KINDS)
def test_step_view_numbers_equal_npformer_attention(pages, opened, kind):
    url, payload, refs = pages[kind]
    o = opened(url)
    page = o.page
    groups = payload["inputs"][0]["groups"]
    for gi, g in enumerate(groups):
        q, k, v, mask, bias, _ = refs[g["name"]]
        out, w, _ = attention_forward(q, k, v, mask=mask, bias=bias)     # float32, as the model runs it
        layer, head = g["n_layers"] - 1, g["n_heads"] - 1
        i = len(g["query_tokens"]) - 2
        page.select_option("#group-select", str(gi))
        page.select_option("#layer-select", str(layer))
        page.select_option("#query-select", str(i))
        o.click_tab("step")
        page.select_option("#step-head", str(head))
        np.testing.assert_allclose(values(page, "#step-q span"), q[layer, head, i], rtol=0, atol=1e-6)
        dots = q[layer, head, i].astype(np.float64) @ k[layer, head].astype(np.float64).T
        np.testing.assert_allclose(values(page, "#step-table td.dot"), dots, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(values(page, "#step-table td.scaled"), dots * g["scale"], rtol=1e-9, atol=1e-9)
        allowed = values(page, "#step-table td.mask")
        expect_allowed = np.ones(len(g["key_tokens"])) if mask is None else mask[i].astype(float)
        np.testing.assert_array_equal(allowed, expect_allowed)
        scores = values(page, "#step-table td.score")
        assert np.all(np.isneginf(scores) == (allowed == 0))
        np.testing.assert_allclose(values(page, "#step-table td.weight"), w[layer, head, i], rtol=0, atol=1e-5)
        assert abs(values(page, "#step-sum")[0] - 1) < 1e-12
        np.testing.assert_allclose(values(page, "#step-out span"), out[layer, head, i], rtol=0, atol=1e-5)
        np.testing.assert_allclose(values(page, "#step-slice span"), out[layer, head, i], rtol=0, atol=1e-5)
        # the whole map the other views draw (the page's fast path for every row at once)
        drawn = page.evaluate(f"""(() => {{ const x = window.npformerExplore;
            return Array.from(x.headWeights(x.state.payload.inputs[0].groups[{gi}], {layer}, {head})); }})()""")
        np.testing.assert_allclose(np.reshape(drawn, w.shape[2:]), w[layer, head], rtol=0, atol=1e-5)
        o.click_tab("head")
    assert o.errors == []


@pytest.mark.parametrize("kind", ["dates", "digits", "tabletop", "minilm"])
def test_rollout_and_relevance_shown_equal_the_payload(pages, opened, kind):
    url, payload, refs = pages[kind]
    o = opened(url)
    page = o.page
    page.click("#heads-all")                                       # every head, not the default one
    inp = payload["inputs"][0]
    for t_index, target in enumerate(inp["targets"]):
        gi = next(n for n, g in enumerate(inp["groups"]) if g["name"] == target["group"])
        g = inp["groups"][gi]
        page.select_option("#group-select", str(gi))
        o.click_tab("explain")
        page.select_option("#target-select", str(t_index))
        row = target["query"]
        w = refs[g["name"]][5]                                     # (L, H, Tq, Tk)
        np.testing.assert_allclose(values(page, "#explain-raw td.value"), w[0, :, row].mean(0), rtol=0, atol=1e-5)
        if g["rollout"]:
            if t_index:                                            # the rollout layer picked stays picked
                page.select_option("#rollout-layer", str(g["n_layers"] - 1))
            shown = values(page, "#explain-rollout td.value")
            np.testing.assert_allclose(shown, decode(g["rollout"])[-1, row], rtol=0, atol=1e-7)   # 8-bit maps
            page.select_option("#rollout-layer", "0")
            np.testing.assert_allclose(values(page, "#explain-rollout td.value"), decode(g["rollout"])[0, row],
                                       rtol=0, atol=1e-7)
        rel = decode(g["relevance"][target["name"]])[row].astype(np.float64)
        np.testing.assert_array_equal(values(page, "#explain-relevance td.value"), rel)
    assert o.errors == []


@pytest.mark.parametrize("kind", ["digits", "tabletop"])
def test_image_view_draws_patches_and_words(pages, opened, kind):
    url, payload, refs = pages[kind]
    o = opened(url)
    page = o.page
    page.click("#heads-all")                                       # every head, not the default one
    inp = payload["inputs"][0]
    g = inp["groups"][0]
    action = len(g["query_tokens"]) - 1                           # the last token: [PLACE] or a patch
    page.select_option("#query-select", str(action))
    o.click_tab("image")
    page.wait_for_selector("#image-canvas")
    h0 = o.canvas_hash("#image-canvas")
    numbers = page.evaluate("window.npformerExplore.state.numbers")
    w = refs["self"][5][0, :, action].mean(0)                     # layer 0, every head's mean
    off = inp["image"]["patch_token_offset"]
    n = inp["image"]["grid"][0] * inp["image"]["grid"][1]
    np.testing.assert_allclose(numbers["patches"], w[off:off + n], atol=1e-6)
    words = [j for j, kind_ in enumerate(g["token_kinds"]["key"]) if kind_ != "patch"]
    np.testing.assert_allclose(values(page, "#image-words td.value"), w[words], atol=1e-6)
    page.select_option("#image-source", "relevance")
    assert o.canvas_hash("#image-canvas") != h0
    # "stretch" scales the tint to the largest patch instead of the row's largest weight: it changes the
    # drawing exactly when that weight is not on a patch
    page.select_option("#image-source", "attention")
    means = refs["self"][5][0].mean(0)                             # (Tq, Tk), layer 0
    patch = np.zeros(means.shape[1], bool)
    patch[off:off + n] = True
    for i in (action, int(np.argmax(means[:, ~patch].max(1) > means[:, patch].max(1)))):
        page.select_option("#query-select", str(i))
        h = o.canvas_hash("#image-canvas")
        page.check("#stretch")
        assert (o.canvas_hash("#image-canvas") != h) == (means[i, ~patch].max() > means[i, patch].max())
        page.uncheck("#stretch")
        assert o.canvas_hash("#image-canvas") == h
    page.select_option("#image-source", "rollout")
    assert o.errors == []


def test_hover_isolates_and_selection_sums(pages, opened):
    url, payload, refs = pages["dates"]
    o = opened(url)
    page = o.page
    page.click("#heads-all")                                       # every head, not the default one
    g = payload["inputs"][0]["groups"][0]
    w = refs["encoder self"][5]
    box = page.eval_on_selector("#head-canvas", "c => { const r = c.getBoundingClientRect(); return [r.x, r.y]; }")
    row_h, top = 20, 24                                            # the head view's layout for <= 48 tokens
    full = o.canvas_hash("#head-canvas")
    page.mouse.move(box[0] + 100, box[1] + top + 3 * row_h + 5)      # over query token 3
    assert o.canvas_hash("#head-canvas") != full
    page.mouse.move(box[0] + 5, box[1] + 5)                         # off the tokens: all lines again
    assert o.canvas_hash("#head-canvas") == full
    for i in (2, 5):
        page.mouse.click(box[0] + 100, box[1] + top + i * row_h + 5)
    page.mouse.move(box[0] + 5, box[1] + 5)
    keys = np.array(page.eval_on_selector_all("#summed-table tr[data-key]", "rs => rs.map(r => +r.dataset.key)"))
    summed = values(page, "#summed-table td[data-value]")
    expect = (w[0, :, 2] + w[0, :, 5]).mean(0)                       # summed over tokens, mean over heads
    np.testing.assert_allclose(summed, expect[keys], atol=1e-6)
    assert len(keys) == min(20, len(g["key_tokens"])) and summed[0] == pytest.approx(expect.max(), abs=1e-6)
    assert o.errors == []


def test_the_keyboard_moves_selects_and_opens(pages, opened):
    """Without a mouse: in the head view the arrow keys move between tokens and Enter selects a query
    token (the same sums as a click); in the model view they choose a square and Enter opens it."""
    url, payload, refs = pages["dates"]
    o = opened(url)
    page = o.page
    page.click("#heads-all")                                       # every head, not the default one
    g = payload["inputs"][0]["groups"][0]
    w = refs["encoder self"][5]
    full = o.canvas_hash("#head-canvas")
    page.focus("#head-canvas")
    page.keyboard.press("ArrowDown")                                # first press: the current query token
    said = page.text_content("#head-said")
    assert said.startswith("query token ")
    start = int(said.split()[2])
    assert o.canvas_hash("#head-canvas") != full                    # its lines alone
    for _ in range(2):
        page.keyboard.press("ArrowDown")
    i = start + 2
    assert page.text_content("#head-said") == f"query token {i} \u201c{g['query_tokens'][i]}\u201d"
    page.keyboard.press("Enter")
    assert page.text_content("#head-said").endswith(", selected")
    keys = np.array(page.eval_on_selector_all("#summed-table tr[data-key]", "rs => rs.map(r => +r.dataset.key)"))
    np.testing.assert_allclose(values(page, "#summed-table td[data-value]"), w[0, :, i].mean(0)[keys], atol=1e-6)
    page.keyboard.press("ArrowRight")
    assert page.text_content("#head-said").startswith(f"key token {i} ")
    page.keyboard.press("Escape")
    assert page.text_content("#head-said") == ""

    o2 = opened(pages["minilm"][0])
    page = o2.page
    page.click("#heads-all")                                        # the model view's square starts on head 0
    o2.click_tab("model")
    page.focus("#model-canvas")
    assert page.text_content("#model-said") == "layer 0, head 0"
    for key in ["ArrowRight"] * 5 + ["ArrowDown"] * 3:
        page.keyboard.press(key)
    assert page.text_content("#model-said") == "layer 3, head 5"
    page.keyboard.press("Enter")
    assert page.is_visible("#view-head.active")
    assert page.input_value("#layer-select") == "3"
    assert page.eval_on_selector_all("#head-boxes input:checked", "bs => bs.map(b => +b.dataset.head)") == [5]
    assert o.errors == [] and o2.errors == []


def test_threshold_prunes_lines(pages, opened):
    o = opened(pages["text"][0])
    h = o.canvas_hash("#head-canvas")
    o.page.fill("#threshold", "0.5")
    o.page.dispatch_event("#threshold", "change")
    assert o.canvas_hash("#head-canvas") != h


def test_model_view_opens_a_head_and_stats_sort_and_link(pages, opened):
    url, payload, _ = pages["minilm"]
    o = opened(url)
    page = o.page
    o.click_tab("model")
    box = page.eval_on_selector("#model-canvas", "c => { const r = c.getBoundingClientRect(); return [r.x, r.y]; }")
    cell = page.evaluate("Math.max(48, Math.min(96, Math.floor(1000 / 12) - 8))")
    page.mouse.click(box[0] + 36 + 5 * (cell + 8) + 10, box[1] + 22 + 3 * (cell + 8) + 10)     # layer 3, head 5
    assert page.is_visible("#view-head.active")
    assert page.input_value("#layer-select") == "3"
    assert page.eval_on_selector_all("#head-boxes input:checked", "bs => bs.map(b => +b.dataset.head)") == [5]
    o.click_tab("stats")
    page.click("#stats-table th[data-key='entropy']")
    page.click("#stats-table th[data-key='entropy']")              # twice: largest first
    ent = values(page, "#stats-table td.entropy")
    assert np.all(np.diff(ent) <= 0)
    st = payload["inputs"][0]["groups"][0]["stats"]["entropy"]
    assert ent[0] == pytest.approx(max(max(r) for r in st))
    first = page.eval_on_selector("#stats-table tbody tr", "r => [+r.dataset.layer, +r.dataset.head]")
    page.click("#stats-table tbody tr")
    assert page.input_value("#layer-select") == str(first[0])
    assert page.eval_on_selector_all("#head-boxes input:checked", "bs => bs.map(b => +b.dataset.head)") == [first[1]]
    assert o.errors == []


def test_training_slider_only_when_the_run_saved_it(pages, opened):
    o = opened(pages["dates"][0])
    page = o.page
    o.click_tab("training")
    h_end = o.canvas_hash("#train-canvas")
    page.fill("#train-slider", "0")
    page.dispatch_event("#train-slider", "input")
    assert page.text_content("#train-step") == "step 0"
    assert o.canvas_hash("#train-canvas") != h_end
    o2 = opened(pages["text"][0])                                  # no "training" in this payload
    assert o2.page.is_hidden("#tabs button[data-view='training']")
    assert o.errors == [] and o2.errors == []


def test_export_png_and_json(pages, opened):
    url, payload, refs = pages["dates"]
    o = opened(url)
    page = o.page
    o.click_tab("step")
    with page.expect_download() as d:
        page.click("#export-png")
    png = open(d.value.path(), "rb").read()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and d.value.suggested_filename.endswith(".png")
    with page.expect_download() as d:
        page.click("#export-json")
    numbers = json.loads(open(d.value.path(), encoding="utf-8").read())
    assert numbers["view"] == "step" and numbers["layer"] == 0 and numbers["query"] == 0
    w = refs["encoder self"][5][0, numbers["head"], 0]
    np.testing.assert_allclose(numbers["weights"], w, atol=1e-5)
    q, k, v = (x[0, numbers["head"]] for x in refs["encoder self"][:3])
    np.testing.assert_array_equal(numbers["q"], q[0])
    np.testing.assert_array_equal(numbers["k"], k)
    np.testing.assert_array_equal(numbers["v"], v)
    o.click_tab("model")                                           # a view whose numbers are every map
    with page.expect_download() as d:
        page.click("#export-json")
    numbers = json.loads(open(d.value.path(), encoding="utf-8").read())
    np.testing.assert_allclose(numbers["weights"], refs["encoder self"][5], atol=1e-5)   # (L, H, Tq, Tk)
    o.click_tab("training")
    page.fill("#train-slider", "1")
    page.dispatch_event("#train-slider", "input")
    with page.expect_download() as d:
        page.click("#export-json")
    numbers = json.loads(open(d.value.path(), encoding="utf-8").read())
    assert numbers["step"] == payload["training"]["steps"][1]
    np.testing.assert_allclose(numbers["weights"], decode(payload["training"]["weights"])[1], atol=1e-6)
    assert o.errors == []
    assert o.foreign_requests(LOCAL) == []


def test_page_works_inside_jupyters_sandboxed_iframe(browser, tmp_path):
    """``npformer.explore.show`` puts the page in a sandboxed srcdoc iframe (an opaque origin): it must
    load, inflate its compressed arrays and draw there too."""
    from page_browser import HASH_JS, Opened

    from npformer.explore import ExplorerView
    payload, _ = build("minilm", n_tokens=160)                     # large enough for compressed q, k, v
    assert payload["inputs"][0]["groups"][0]["q"].get("codec") == "zlib-shuffle4"
    host = tmp_path / "notebook.html"
    host.write_text("<!DOCTYPE html><html><body>" + ExplorerView(render_html(payload))._repr_html_() +
                    "</body></html>", encoding="utf-8")
    o = Opened(browser.new_page())
    try:
        o.page.goto(host.as_uri())
        frame = o.page.frames[1]
        frame.wait_for_selector("body[data-ready='1']", timeout=30000)
        h0 = frame.eval_on_selector("#head-canvas", HASH_JS)
        frame.select_option("#layer-select", "2")
        assert frame.eval_on_selector("#head-canvas", HASH_JS) != h0
        assert o.errors == []
        assert o.foreign_requests(LOCAL + ("about:",)) == []
    finally:
        o.page.close()
