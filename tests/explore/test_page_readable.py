"""The explorer's pages as a beginner reads them (issue 33, section 5), on the synthetic dates page
(page_payloads.py): the head view starts on the layer's most focused head and says why, the training
tab enlarges a map with labelled axes, the step view never breaks a number across lines, and a space
token is a visible ␣ in the side tables."""
import numpy as np
import pytest
from page_payloads import build

from npformer.explore.render import render_html

SPACE = "\u2423"


@pytest.fixture(scope="module")
def dates(tmp_path_factory):
    payload, refs = build("dates")
    path = tmp_path_factory.mktemp("readable") / "dates.html"
    path.write_text(render_html(payload), encoding="utf-8")
    return path.as_uri(), payload, refs


def state(page, expr):
    return page.evaluate(f"(() => {{ const S = window.npformerPage.S; return {expr}; }})()")


def test_head_view_starts_on_the_most_focused_head_and_names_the_rule(dates, opened):
    url, payload, refs = dates
    o = opened(url)
    page = o.page
    g = payload["inputs"][0]["groups"][0]
    w = refs["encoder self"][5].astype(np.float64)                              # (L, H, T, T)
    shown = page.evaluate("window.npformerPage.viewGroup().query_tokens")          # padding hidden or not
    keep = np.array([t != "<pad>" or len(shown) == len(g["query_tokens"]) for t in g["query_tokens"]])
    entropy = -(w * np.log(np.where(w > 0, w, 1))).sum(-1)[:, :, keep].mean(-1)   # (L, H) nats
    for layer in (0, 1):
        if layer:
            page.select_option("#layer-select", "1")
        heads = state(page, "[...S.heads]")
        assert len(heads) == 1 and entropy[layer, heads[0]] <= entropy[layer].min() + 1e-3   # 8-bit weights' slack
        rule = page.inner_text("#head-rule")
        assert f"head {heads[0]} alone" in rule and "lowest mean attention entropy" in rule
        assert page.is_checked(f"#head-boxes input[data-head='{heads[0]}']")
    page.click("#heads-all")                                                    # the reader's choice stays
    page.select_option("#layer-select", "0")
    assert sorted(state(page, "[...S.heads]")) == [0, 1, 2, 3] and page.query_selector("#head-rule") is None
    assert o.errors == []


def test_training_maps_enlarge_steps_keep_numbers_whole_and_spaces_show(dates, opened):
    url, payload, _ = dates
    o = opened(url)
    page = o.page
    # a space token (the source "12 march 1990" has two) is ␣ in the head view's summed table
    src = payload["inputs"][0]["groups"][0]["key_tokens"]
    spaces = [j for j, t in enumerate(src) if t == " "]
    page.select_option("#query-select", "1")
    page.focus("#head-canvas")
    page.keyboard.press("ArrowDown")
    page.keyboard.press("Enter")
    cells = dict(page.eval_on_selector_all(
        "#summed-table tr[data-key]", "rs => rs.map(r => [+r.dataset.key, r.querySelector('td.tok').textContent])"))
    assert spaces and all(cells[j] == f"{j}: {SPACE}" for j in spaces if j in cells) and set(spaces) & set(cells)
    # the training tab: a click on layer 1, head 2's small map enlarges it, at least 240 px, axes named
    o.click_tab("training")
    box = page.eval_on_selector("#train-canvas", "c => { const r = c.getBoundingClientRect(); return [r.x, r.y]; }")
    H, left, top, pad = 4, 36, 22, 8
    cell = max(40, min(80, 900 // H - 8))
    page.mouse.click(box[0] + left + 2 * (cell + pad) + cell / 2, box[1] + top + (cell + pad) + cell / 2)
    assert state(page, "S.numbers().enlarged") == {"layer": 1, "head": 2}
    assert page.eval_on_selector("#train-zoom", "c => c.getBoundingClientRect().width") >= 240
    caption = page.inner_text("#train-zoom-caption")
    assert caption.startswith("Layer 1, head 2 at step 400") and "query token" in caption and "key token" in caption
    # the step view in a narrow window: every number (with its change mark) on one line
    page.set_viewport_size({"width": 420, "height": 900})
    o.click_tab("step")
    page.fill("#step-alpha", "3")
    page.dispatch_event("#step-alpha", "input")
    spans = page.eval_on_selector_all("#step-q span", "ss => ss.map(s => [s.getClientRects().length, s.textContent])")
    assert len(spans) == 16 and any("\u25b2" in t or "\u25bc" in t for _, t in spans)
    assert [t for n, t in spans if n != 1] == []
    lines = page.eval_on_selector("#step-q", "d => d.getClientRects()[0].height") / 18        # 12px at 1.5
    assert lines >= 2                                                  # the vector did wrap, between numbers
    assert o.errors == []
