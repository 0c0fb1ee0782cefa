"""The step view's "try it" controls in a real browser (Debian's chromium through Playwright): the
lesson's section 2, "Why divide by the square root of d?", by hand.

The learner changes the scale (the model's 1/sqrt(d), 1 or 1/d), multiplies q by alpha (0.25 to 8) and
toggles mask cells. Checked: every recomputed number equals npformer's ``attention_forward`` in float64
on the same modified q, scale and mask, to 1e-9; a fully masked row gives zeros, never NaN; exactly the
numbers that differ from the model's are marked; the row's entropy falls and its largest weight rises
as alpha rises; everything works from the keyboard; the page makes no request and starts as before.
"""
import numpy as np
import pytest
from page_payloads import build

from npformer.explore.render import render_html
from npformer.lesson import SECTIONS
from npformer.ops import attention_forward

LOCAL = ("file://", "data:", "blob:")
LAYER, HEAD = 1, 2
NUMBERS = ("dot", "scaled", "score", "weight")          # the step table's number columns


@pytest.fixture(scope="module")
def page_file(tmp_path_factory):
    """A causal LM's page (12 tokens, 4 heads of 16): (file URL, payload, refs)."""
    payload, refs = build("text", seed=3, n_tokens=12)
    path = tmp_path_factory.mktemp("step_edit") / "text.html"
    path.write_text(render_html(payload), encoding="utf-8")
    return path.as_uri(), payload, refs


def values(page, selector):
    return np.array([float(x) for x in page.eval_on_selector_all(selector, "els => els.map(e => e.dataset.value)")])


def open_step(opened, url, query):
    o = opened(url)
    o.page.select_option("#layer-select", str(LAYER))
    o.page.select_option("#query-select", str(query))
    o.click_tab("step")
    o.page.select_option("#step-head", str(HEAD))
    return o


def expected(refs, payload, query, alpha, scale, allowed):
    """attention_forward in float64 on q * alpha, this scale and this mask row: the step view's numbers."""
    q, k, v, _, _, _ = refs["self"]
    q64 = q[LAYER, HEAD, query:query + 1].astype(np.float64) * alpha        # (1, D)
    k64 = k[LAYER, HEAD].astype(np.float64)                                # (Tk, D)
    v64 = v[LAYER, HEAD].astype(np.float64)                                # (Tk, Dv)
    out, w, _ = attention_forward(q64, k64, v64, mask=allowed[None, :], scale=scale)   # (1, Dv), (1, Tk)
    dots = q64[0] @ k64.T                                                  # (Tk,)
    score = np.where(allowed, dots * scale, -np.inf)
    return {"q": q64[0], "dot": dots, "scaled": dots * scale, "score": score, "weight": w[0], "out": out[0]}


def check_numbers(page, exp):
    np.testing.assert_allclose(values(page, "#step-q span"), exp["q"], rtol=1e-9, atol=1e-12)
    for col in ("dot", "scaled", "weight"):
        np.testing.assert_allclose(values(page, f"#step-table td.{col}"), exp[col], rtol=1e-9, atol=1e-12, err_msg=col)
    shown = values(page, "#step-table td.score")
    np.testing.assert_array_equal(np.isneginf(shown), np.isneginf(exp["score"]))
    finite = np.isfinite(exp["score"])
    np.testing.assert_allclose(shown[finite], exp["score"][finite], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(values(page, "#step-out span"), exp["out"], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(values(page, "#step-slice span"), exp["out"], rtol=1e-9, atol=1e-12)
    assert abs(values(page, "#step-sum")[0] - exp["weight"].sum()) < 1e-12


def shown_mask(page):
    return values(page, "#step-table td.mask").astype(bool)


def test_edited_rows_equal_attention_forward(page_file, opened):
    url, payload, refs = page_file
    g = payload["inputs"][0]["groups"][0]
    D, Tk = g["head_dim"], len(g["key_tokens"])
    query = 7
    o = open_step(opened, url, query)
    page = o.page
    causal = np.arange(Tk) <= query                                        # the model's mask row
    np.testing.assert_array_equal(shown_mask(page), causal)
    scales = {"model": g["scale"], "one": 1.0, "inv-d": 1.0 / D}
    for choice, log2_alpha in (("one", 3), ("inv-d", -2), ("model", 0.75), ("one", -1.25)):
        page.select_option("#step-scale", choice)
        page.fill("#step-alpha", str(log2_alpha))
        alpha = 2.0 ** log2_alpha
        assert abs(values(page, "#step-alpha-value")[0] - alpha) < 1e-12
        check_numbers(page, expected(refs, payload, query, alpha, scales[choice], causal))
    # a key the model masked (a later token) allowed, and one it allowed forbidden
    page.click("#step-table button.mask-toggle[data-key='9']")
    page.click("#step-table button.mask-toggle[data-key='2']")
    edited = causal.copy()
    edited[9], edited[2] = True, False
    np.testing.assert_array_equal(shown_mask(page), edited)
    check_numbers(page, expected(refs, payload, query, 2.0 ** -1.25, 1.0, edited))
    assert o.errors == []
    assert o.foreign_requests(LOCAL) == []


def test_fully_masked_row_gives_zeros_not_nan(page_file, opened):
    url, payload, refs = page_file
    o = open_step(opened, url, 0)                                          # the first token reads only itself
    page = o.page
    page.click("#step-table button.mask-toggle[data-key='0']")
    allowed = np.zeros(len(payload["inputs"][0]["groups"][0]["key_tokens"]), dtype=bool)
    np.testing.assert_array_equal(shown_mask(page), allowed)
    exp = expected(refs, payload, 0, 1.0, payload["inputs"][0]["groups"][0]["scale"], allowed)
    assert not np.isnan(exp["weight"]).any() and not exp["weight"].any()  # npformer's convention
    check_numbers(page, exp)
    assert "No key may be read" in page.text_content("#step-row-stats")
    assert float(page.get_attribute("#step-row-stats", "data-entropy")) == 0.0
    assert o.errors == []


def row_stats(page):
    return {name: float(page.get_attribute("#step-row-stats", "data-" + name))
            for name in ("max-weight", "entropy", "entropy-share", "score-std")}


def test_entropy_falls_as_alpha_rises(page_file, opened):
    url, payload, refs = page_file
    g = payload["inputs"][0]["groups"][0]
    query = len(g["key_tokens"]) - 1                                       # reads all 12 keys
    allowed = np.ones(len(g["key_tokens"]), dtype=bool)
    o = open_step(opened, url, query)
    page = o.page
    at_one = {}
    for choice, scale in (("model", g["scale"]), ("one", 1.0)):
        page.select_option("#step-scale", choice)
        seen = []
        for log2_alpha in (-2, -1, 0, 1, 2, 3):
            page.fill("#step-alpha", str(log2_alpha))
            exp = expected(refs, payload, query, 2.0 ** log2_alpha, scale, allowed)
            w = exp["weight"]
            entropy = -(w * np.log(np.where(w > 0, w, 1))).sum()
            got = row_stats(page)
            assert abs(got["entropy"] - entropy) < 1e-9
            assert abs(got["entropy-share"] - entropy / np.log(allowed.sum())) < 1e-9
            assert abs(got["max-weight"] - w.max()) < 1e-9
            assert abs(got["score-std"] - exp["score"].std()) < 1e-9 * max(1.0, exp["score"].std())
            seen.append(got)
            if log2_alpha == 0:
                at_one[choice] = got
        # softmax(alpha * s): entropy strictly falls, the largest weight rises (the scores are not all equal)
        assert np.all(np.diff([s["entropy"] for s in seen]) < 0), seen
        assert np.all(np.diff([s["max-weight"] for s in seen]) > 0), seen
    # no scaling is the model's scores times sqrt(16) = 4: sharper, as the lesson's section 2 says
    assert at_one["one"]["entropy"] < at_one["model"]["entropy"]
    assert at_one["one"]["max-weight"] > at_one["model"]["max-weight"]
    assert o.errors == []


def test_default_view_unchanged_and_marks_follow_the_numbers(page_file, opened):
    url, payload, refs = page_file
    g = payload["inputs"][0]["groups"][0]
    query = 5
    o = open_step(opened, url, query)
    page = o.page
    assert page.input_value("#step-scale") == "model"
    assert values(page, "#step-alpha-value")[0] == 1.0
    assert SECTIONS[2] in page.text_content("#step-edit")
    assert page.query_selector_all("#view-step .changed") == []
    causal = np.arange(len(g["key_tokens"])) <= query
    check_numbers(page, expected(refs, payload, query, 1.0, g["scale"], causal))
    model = {col: values(page, f"#step-table td.{col}") for col in NUMBERS}
    page.fill("#step-alpha", "1")                                          # alpha 2
    page.click("#step-table button.mask-toggle[data-key='8']")            # a later key allowed
    for col in NUMBERS:
        now = values(page, f"#step-table td.{col}")
        marks = page.eval_on_selector_all(f"#step-table td.{col}", """els => els.map(e =>
            [e.classList.contains('changed'), (e.querySelector('.mark') || {}).textContent || ''])""")
        differs = now != model[col]
        assert differs.any(), col
        assert [m[0] for m in marks] == differs.tolist(), col
        arrows = ["\u25b2" if a > b else "\u25bc" if a < b else "" for a, b in zip(now, model[col], strict=True)]
        assert [m[1] for m in marks] == arrows, col
    assert "changed" in page.get_attribute("#step-table tr[data-key='8'] td.mask", "class")
    assert "changed" not in page.get_attribute("#step-table tr[data-key='7'] td.mask", "class")
    page.click("#step-reset")
    assert page.query_selector_all("#view-step .changed") == []
    check_numbers(page, expected(refs, payload, query, 1.0, g["scale"], causal))
    assert o.errors == []
    assert o.foreign_requests(LOCAL) == []


def test_keyboard_drives_scale_alpha_and_mask(page_file, opened):
    url, payload, refs = page_file
    g = payload["inputs"][0]["groups"][0]
    query = 4
    o = open_step(opened, url, query)
    page = o.page
    active = "() => { const a = document.activeElement; return a.id || a.dataset.key || a.tagName; }"
    page.focus("#step-scale")
    page.keyboard.press("ArrowDown")                                        # the next choice: no scaling
    assert page.input_value("#step-scale") == "one"
    page.keyboard.press("Tab")
    assert page.evaluate(active) == "step-alpha"
    page.keyboard.press("End")
    assert values(page, "#step-alpha-value")[0] == 8.0
    page.keyboard.press("Home")
    assert values(page, "#step-alpha-value")[0] == 0.25
    page.keyboard.press("ArrowRight")
    assert abs(values(page, "#step-alpha-value")[0] - 2 ** -1.75) < 1e-12
    causal = np.arange(len(g["key_tokens"])) <= query
    check_numbers(page, expected(refs, payload, query, 2 ** -1.75, 1.0, causal))
    toggle = "#step-table button.mask-toggle[data-key='6']"
    assert page.get_attribute(toggle, "aria-pressed") == "false"
    page.focus(toggle)
    page.keyboard.press("Enter")
    assert page.get_attribute(toggle, "aria-pressed") == "true"
    assert page.evaluate(active) == "6"                                    # the focus stays on the cell
    edited = causal.copy()
    edited[6] = True
    check_numbers(page, expected(refs, payload, query, 2 ** -1.75, 1.0, edited))
    page.keyboard.press("Space")
    assert page.get_attribute(toggle, "aria-pressed") == "false"
    np.testing.assert_array_equal(shown_mask(page), causal)
    page.focus("#step-reset")
    page.keyboard.press("Enter")
    assert page.input_value("#step-scale") == "model"
    assert values(page, "#step-alpha-value")[0] == 1.0
    assert page.query_selector_all("#view-step .changed") == []
    assert o.errors == []
