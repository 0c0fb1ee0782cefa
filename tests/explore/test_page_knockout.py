"""The knock-out view in headless chromium (issue 25), on the tiny tabletop run's page: it renders without
an error, its two rankings equal scipy's average ranks of the payload's numbers (largest first), the
correlation it shows is scipy's Spearman, the target selector changes the numbers, and a click on a head
or Enter on the canvas opens that head in the head view."""
import numpy as np
from explore_runs import INPUTS, explore_runs  # noqa: F401 (a fixture)
from scipy import stats

from npformer.explore.payload import decode_array, open_explorer
from npformer.explore.render import render_html


def shown(page, table, cls):
    """[(layer, head, value of the cells of class cls)] of a ranking table, top to bottom."""
    return page.eval_on_selector_all(f"#{table} tbody tr", f"""rs => rs.map(r => [+r.dataset.layer, +r.dataset.head,
        +r.querySelector('td.{cls}').dataset.value])""")


def check_target(page, kg, k):
    attention, effect = decode_array(kg["attention"])[..., k], decode_array(kg["effect"])[..., k]   # (L, H)
    for table, values in (("knockout-by-attention", attention), ("knockout-by-effect", effect)):
        ranks = stats.rankdata(-values.ravel()).reshape(values.shape)                            # 1 = the largest
        rows = shown(page, table, "rank")
        assert len(rows) == values.size
        assert [r[2] for r in rows] == sorted(r[2] for r in rows)                                 # listed by rank
        for layer, head, rank in rows:
            assert rank == ranks[layer, head]
    rho = stats.spearmanr(attention.ravel(), effect.ravel()).statistic
    said = page.get_attribute("#knockout-sentence", "data-rho")
    assert abs(float(said) - rho) < 1e-9 and abs(kg["spearman"][k] - rho) < 1e-9
    assert f"\u03c1 = {rho:.4f}" in page.inner_text("#knockout-sentence")


def test_knockout_view_ranks_correlates_and_opens_heads(explore_runs, opened, tmp_path):  # noqa: F811
    payload = open_explorer(explore_runs["tabletop"]).payload(INPUTS["tabletop"])
    path = tmp_path / "tabletop.html"
    path.write_text(render_html(payload), encoding="utf-8")
    o = opened(path.as_uri())
    page = o.page
    o.click_tab("knockout")
    kg = payload["inputs"][0]["knockout"]["groups"]["self"]
    check_target(page, kg, 0)
    page.select_option("#target-select", "6")                          # place's first alternative
    assert page.evaluate("window.npformerPage.S.target") == 6
    check_target(page, kg, 6)
    # a click on a row of the knock-out ranking opens that head
    layer, head, _ = shown(page, "knockout-by-effect", "effect")[1]
    page.click("#knockout-by-effect tbody tr:nth-child(2)")
    state = page.evaluate("[window.npformerPage.S.view, window.npformerPage.S.layer, [...window.npformerPage.S.heads]]")
    assert state == ["head", layer, [head]]
    # the keyboard: focus the canvas, the first head by knock-out, one down, Enter
    o.click_tab("knockout")
    layer, head, _ = shown(page, "knockout-by-effect", "effect")[1]
    page.focus("#knockout-canvas")
    page.keyboard.press("ArrowDown")
    assert page.inner_text("#knockout-said").startswith(f"L{layer}\u00b7H{head}")
    page.keyboard.press("Enter")
    state = page.evaluate("[window.npformerPage.S.view, window.npformerPage.S.layer, [...window.npformerPage.S.heads]]")
    assert state == ["head", layer, [head]]
    assert not o.errors and not o.foreign_requests(("file://", "data:"))
    assert np.isfinite(decode_array(kg["effect"])).all()


def test_knockout_view_names_the_heads_past_the_work_budget(explore_runs, opened, tmp_path, monkeypatch):  # noqa: F811
    """With the budget cut to two heads' knock-outs, the view ranks those two only and its note says how many
    heads were skipped, from which one, and why (the payload's knockout.skipped, issue 31)."""
    from npformer.explore import knockout as ko

    ex = open_explorer(explore_runs["tabletop"])
    tokens = len(ex.payload(INPUTS["tabletop"])["inputs"][0]["groups"][0]["query_tokens"])
    monkeypatch.setattr(ko, "WORK_BUDGET", 2 * tokens * 2)              # two knock-outs of 2 layers x T positions
    payload = ex.payload(INPUTS["tabletop"])
    sk = payload["inputs"][0]["knockout"]["skipped"]
    assert (sk["count"], sk["total"], sk["first"]) == (2, 4, {"group": "self", "layer": 1, "head": 0})
    path = tmp_path / "tabletop.html"
    path.write_text(render_html(payload), encoding="utf-8")
    o = opened(path.as_uri())
    o.click_tab("knockout")
    note = o.page.inner_text("#knockout-skipped")
    assert note.startswith("2 of the 4 heads were not knocked out, from self L1\u00b7H0 on")
    assert f"stop at {2 * tokens * 2:,} head x position x layer units" in note
    assert "In self: 2 of its 4 heads, left out of both rankings." in note
    for table in ("knockout-by-attention", "knockout-by-effect"):
        assert sorted((r[0], r[1]) for r in shown(o.page, table, "rank")) == [(0, 0), (0, 1)]
    assert not o.errors
