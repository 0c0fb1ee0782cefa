"""Issue 25 in the browser: who reads whom (attention summed into blocks by token kind), words instead of
word pieces, padding hidden, SVG export, --layers' layer numbers and the truncation note.

The payloads are synthetic (page_payloads.make_group: random q, k, v, and npformer's own attention on
them), shaped like the tabletop policy (action tokens, words, padding, patches, with the padding masked as
keys) and like MiniLM (word pieces with '##' continuations). Every expected number is computed here in
NumPy from the payload, never by the page's code.
"""
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from page_payloads import _payload, decode, encode, make_group

from npformer.explore.kinds import label_kinds
from npformer.explore.layers import keep_layers
from npformer.explore.render import render_html
from npformer.explore.words import word_fields

LOCAL = ("file://", "data:", "blob:")
SVG = "{http://www.w3.org/2000/svg}"


def tabletop_payload(seed=0):
    """A VLA-shaped payload: PICK, PLACE, 4 words, 3 padding slots (masked as keys), 16 patches; and a
    training probe of the same tokens at 3 steps."""
    rng = np.random.default_rng(seed)
    words = "put red block box".split()
    toks = ["PICK", "PLACE"] + words + ["<pad>"] * 3 + [f"p({r},{c})" for r in range(4) for c in range(4)]
    kinds = label_kinds(toks)
    keep = np.array([k != "pad" for k in kinds])
    mask = np.broadcast_to(keep, (len(toks), len(toks))).copy()            # padded words are no keys
    g, ref = make_group(rng, "self", 2, 3, toks, toks, 8, mask=mask, kinds={"query": kinds, "key": kinds})
    w = ref[5].astype(np.float64)                                           # (L, H, T, T)
    probe = np.stack([w ** (1 + s / 2) for s in range(3)])                 # (S, L, H, T, T)
    probe = probe / probe.sum(-1, keepdims=True)
    training = {"steps": [0, 2, 4], "group": "self", "query_tokens": toks, "key_tokens": toks,
                "token_kinds": {"query": kinds, "key": kinds}, "weights": encode(probe, "u8")}
    inp = {"label": "put the red block in the box", "output": "pick 3, place 9", "targets": [], "groups": [g],
           "image": None}
    return _payload("tabletop", "tabletop (synthetic, padded)", [inp], 24, 3, training), w, probe


PIECES = ["[CLS]", "the", "token", "##ization", "of", "un", "##bel", "##iev", "##able", "words", ".", "[SEP]"]


def pieces_payload(seed=1, truncated=None):
    rng = np.random.default_rng(seed)
    kinds = ["special" if p.startswith("[") else "word" for p in PIECES]
    g, ref = make_group(rng, "self", 2, 4, PIECES, PIECES, 8, kinds={"query": kinds, "key": kinds}, sharp=1.0)
    g.update(word_fields(PIECES, PIECES))
    inp = {"label": "the tokenization of unbelievable words.", "output": "embedding", "targets": [], "groups": [g],
           "image": None}
    if truncated:
        inp["truncated"] = truncated
    return _payload("minilm", "MiniLM (synthetic pieces)", [inp], 32, 4), ref[5].astype(np.float64)


def np_blocks(w, q_kinds, k_kinds):
    """(Tq, Tk) -> (query kinds, key kinds, B): the mean over a kind's query rows of each row's weight on
    each key kind, over its weight on every non-padding key; padding on neither side."""
    qo = [k for n, k in enumerate(q_kinds) if k != "pad" and k not in q_kinds[:n]]
    ko = [k for n, k in enumerate(k_kinds) if k != "pad" and k not in k_kinds[:n]]
    keys = np.array(k_kinds)
    b = np.zeros((len(qo), len(ko)))
    for a, qk in enumerate(qo):
        rows = [i for i, k in enumerate(q_kinds) if k == qk]
        total = w[rows][:, keys != "pad"].sum(-1)                              # (rows,)
        for c, kk in enumerate(ko):
            b[a, c] = (w[rows][:, keys == kk].sum(-1) / total).mean()
    return qo, ko, b


def np_merge(w, qi, ki):
    """Pieces to words: the sum over a word's key pieces, the mean over its query pieces."""
    qi, ki = np.asarray(qi), np.asarray(ki)
    out = np.zeros((qi.max() + 1, ki.max() + 1))
    for a in range(qi.max() + 1):
        for b in range(ki.max() + 1):
            out[a, b] = w[qi == a][:, ki == b].sum(-1).mean()
    return out


def numbers(page):
    return page.evaluate("(() => { const n = window.npformerExplore.state.numbers; "
                         "return typeof n === 'function' ? n() : n; })()")


def values(page, selector):
    return np.array([float(x) for x in page.eval_on_selector_all(selector, "els => els.map(e => e.dataset.value)")])


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    folder = tmp_path_factory.mktemp("blocks_pages")
    out = {}
    table, w, probe = tabletop_payload()
    cut = keep_layers(tabletop_payload()[0], 1, 1)
    note = {"limit": 12, "pieces": 12, "kept_chars": 40, "dropped_chars": 17, "after_piece": ".", "after_index": 10,
            "note": "truncated to the model's limit of 12 word pieces: kept characters 0-39 (up to piece 10 '.'), "
                    "dropped the last 17 of 57 characters"}
    pieces, pw = pieces_payload(truncated=note)
    for name, payload in (("tabletop", table), ("layers", cut), ("pieces", pieces)):
        path = folder / f"{name}.html"
        path.write_text(render_html(payload), encoding="utf-8")
        out[name] = (path.as_uri(), payload)
    return out, w, probe, pw


def test_blocks_equal_numpy_and_follow_the_training_slider(pages, opened):
    out, w, probe, _ = pages
    url, payload = out["tabletop"]
    o = opened(url)
    page = o.page
    g = payload["inputs"][0]["groups"][0]
    kinds = g["token_kinds"]["query"]
    o.click_tab("blocks")
    page.wait_for_selector("#view-blocks.active canvas")
    shown = numbers(page)
    assert shown["query_kinds"] == ["action", "word", "patch"] == shown["key_kinds"]     # no padding
    for layer in range(2):
        for head in range(3):
            _, _, b = np_blocks(w[layer, head], kinds, kinds)
            np.testing.assert_allclose(shown["heads"][layer][head], b, rtol=0, atol=1e-5)
            np.testing.assert_allclose(np.sum(shown["heads"][layer][head], axis=1), 1, rtol=0, atol=1e-9)
        _, _, b = np_blocks(decode(g["rollout"])[layer], kinds, kinds)                  # the stored 8-bit rollout
        np.testing.assert_allclose(shown["rollout"][layer], b, rtol=0, atol=1e-6)
    # the table of the chosen layer and head
    page.select_option("#layer-select", "1")
    page.select_option("#blocks-head", "2")
    _, _, b = np_blocks(w[1, 2], kinds, kinds)
    np.testing.assert_allclose(values(page, "#blocks-table td.value"), b.ravel(), rtol=0, atol=1e-5)
    np.testing.assert_allclose(values(page, "#blocks-table td.sum"), 1, rtol=0, atol=1e-9)
    # the training probe at the Over training slider's step, both ways
    page.select_option("#blocks-source", "training")
    o.click_tab("training")
    page.fill("#train-slider", "1")
    page.dispatch_event("#train-slider", "input")
    o.click_tab("blocks")
    shown = numbers(page)
    assert shown["step"] == 2
    probe8 = decode(payload["training"]["weights"])                                   # (S, L, H, T, T), 8-bit
    _, _, b = np_blocks(probe8[1, 0, 1], kinds, kinds)
    np.testing.assert_allclose(shown["heads"][0][1], b, rtol=0, atol=1e-6)
    page.fill("#blocks-step", "0")
    page.dispatch_event("#blocks-step", "change")
    assert numbers(page)["step"] == 0
    o.click_tab("training")
    assert page.input_value("#train-slider") == "0"
    # a block opens the head view with only those kinds
    o.click_tab("blocks")
    page.select_option("#blocks-source", "input")
    page.click("#blocks-table td.value[data-query='action'][data-key='patch']")
    page.wait_for_selector("#view-head.active #kind-filter")
    head = numbers(page)
    assert head["kind_filter"] == {"query": "action", "key": "patch"} and head["heads"] == [2] and head["layer"] == 1
    assert o.errors == [] and o.foreign_requests(LOCAL) == []


def test_padding_hidden_by_default_and_shown_by_the_toggle(pages, opened):
    out, w, _, _ = pages
    url, payload = out["tabletop"]
    o = opened(url)
    page = o.page
    page.click("#heads-all")                                       # every head, not the default one
    toks = payload["inputs"][0]["groups"][0]["query_tokens"]
    real = [t for t in toks if t != "<pad>"]
    assert page.is_visible("#padding-toggle") and not page.is_checked("#show-padding")
    keep = np.array([t != "<pad>" for t in toks])
    for view in ("head", "matrix"):
        o.click_tab(view)
        shown = numbers(page)
        assert shown["query_tokens"] == real and shown["key_tokens"] == real
    np.testing.assert_allclose(shown["weights"], w[0][:, keep][:, :, keep].mean(0), rtol=0, atol=1e-5)
    o.click_tab("stats")
    entropy = -(np.where(w > 0, w * np.log(np.where(w > 0, w, 1)), 0)).sum(-1)[:, :, keep].mean(-1)   # (L, H)
    got = {(r["layer"], r["head"]): r["entropy"] for r in numbers(page)["rows"]}
    np.testing.assert_allclose([got[(lay, h)] for lay in range(2) for h in range(3)], entropy.ravel(), atol=1e-5)
    page.check("#show-padding")
    o.click_tab("matrix")
    assert numbers(page)["query_tokens"] == toks
    assert o.errors == []


def test_words_merge_pieces_and_rows_sum_to_one(pages, opened):
    out, _, _, pw = pages
    url, payload = out["pieces"]
    o = opened(url)
    page = o.page
    g = payload["inputs"][0]["groups"][0]
    assert g["word_labels"]["query"] == ["[CLS]", "the", "tokenization", "of", "unbelievable", "words", ".", "[SEP]"]
    assert page.is_visible("#truncated") and "dropped the last 17 of 57" in page.inner_text("#truncated")
    o.click_tab("matrix")
    assert numbers(page)["query_tokens"] == PIECES
    page.check("#words")
    page.click("#heads-none")
    page.click("#head-boxes input[data-head='3']")
    page.select_option("#layer-select", "1")
    shown = numbers(page)
    assert shown["query_tokens"] == g["word_labels"]["query"]
    merged = np_merge(pw[1, 3], g["word_index"]["query"], g["word_index"]["key"])
    np.testing.assert_allclose(shown["weights"], merged, rtol=0, atol=1e-5)
    np.testing.assert_allclose(np.sum(shown["weights"], axis=1), 1, rtol=0, atol=1e-6)
    o.click_tab("head")
    assert numbers(page)["key_tokens"] == g["word_labels"]["key"]
    o.click_tab("stats")
    rows = {(r["layer"], r["head"]): r for r in numbers(page)["rows"]}
    dist = np.abs(np.arange(8)[:, None] - np.arange(8)[None, :])
    for lay in range(2):
        for h in range(4):
            m = np_merge(pw[lay, h], g["word_index"]["query"], g["word_index"]["key"])
            assert rows[(lay, h)]["entropy"] == pytest.approx(-(m * np.log(m)).sum(-1).mean(), abs=1e-5)
            assert rows[(lay, h)]["distance"] == pytest.approx((m * dist).sum(-1).mean(), abs=1e-5)
            assert rows[(lay, h)]["first"] == pytest.approx(m[:, 0].mean(), abs=1e-5)
    assert o.errors == []


def test_export_svg_is_vector_with_the_labels(pages, opened):
    out, _, _, _ = pages
    url, payload = out["tabletop"]
    o = opened(url)
    page = o.page
    toks = [t for t in payload["inputs"][0]["groups"][0]["query_tokens"] if t != "<pad>"]
    for view, labels in (("head", toks), ("blocks", ["H0", "H1", "rollout", "L0", "action", "patch"])):
        o.click_tab(view)
        with page.expect_download() as d:
            page.click("#export-svg")
        assert d.value.suggested_filename.endswith(".svg")
        root = ET.parse(d.value.path()).getroot()
        assert root.tag == SVG + "svg"
        texts = [t.text for t in root.iter(SVG + "text")]
        assert set(labels) <= set(texts), (view, texts)
        shapes = list(root.iter(SVG + "rect")) + list(root.iter(SVG + "path"))
        assert len(shapes) > 10 and not list(root.iter(SVG + "image"))
    assert o.errors == []


def test_layers_keep_their_real_numbers(pages, opened):
    out, w, _, _ = pages
    url, payload = out["layers"]
    o = opened(url)
    page = o.page
    page.click("#heads-all")                                       # every head, not the default one
    assert page.eval_on_selector_all("#layer-select option", "os => os.map(o => o.textContent)") == ["1"]
    o.click_tab("matrix")
    shown = numbers(page)
    assert shown["layer"] == 1
    keep = np.array([t != "<pad>" for t in payload["inputs"][0]["groups"][0]["query_tokens"]])
    np.testing.assert_allclose(shown["weights"], w[1][:, keep][:, :, keep].mean(0), rtol=0, atol=1e-5)
    o.click_tab("blocks")
    assert numbers(page)["layers"] == [1]
    assert o.errors == []
