"""The knock-out view in headless chromium (issue 25), on the tiny tabletop run's page: it renders without
an error, its two rankings equal scipy's average ranks of the payload's numbers (largest first), the
correlation it shows is scipy's Spearman, the target selector changes the numbers, and a click on a head
or Enter on the canvas opens that head in the head view."""
import numpy as np
import pytest
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


def permutations(n: int) -> np.ndarray:
    """Every ordering of 0..n-1, (n!, n): each of (n-1)!'s with n-1 put at each place."""
    p = np.zeros((1, 0), dtype=np.int8)
    for m in range(n):
        p = np.concatenate([np.insert(p, at, m, axis=1) for at in range(m + 1)])
    return p


def exact_level(n: int) -> float | None:
    """Spearman's two-sided 5% critical rho for n untied items from the n! equally likely rankings: the
    smallest rho = 1 - 6 S / (n^3 - n) with P(|rho| >= it) <= 0.05; None when even rho = 1 is too likely."""
    s = ((permutations(n) - np.arange(n)).astype(np.int64) ** 2).sum(1)           # (n!,) sum of d^2
    values, counts = np.unique(s, return_counts=True)
    ok = values[2 * np.cumsum(counts) <= 0.05 * len(s)]                          # rho's law is symmetric
    return None if not len(ok) else 1 - 6 * ok.max() / (n ** 3 - n)


def test_knockout_sentence_uses_exact_levels_and_the_noise_floor(explore_runs, opened, tmp_path):  # noqa: F811
    """With the tabletop run's 4 heads the sentence says that no 5% result is possible (no level above 1);
    the page's levels for 5..10 heads are the exact ones, for 5..7 also scipy's exact permutation test's
    boundary; with every effect below the payload's noise floor it ranks nothing and draws no conclusion."""
    payload = open_explorer(explore_runs["tabletop"]).payload(INPUTS["tabletop"])
    path = tmp_path / "tabletop.html"
    path.write_text(render_html(payload), encoding="utf-8")
    o = opened(path.as_uri())
    page = o.page
    o.click_tab("knockout")
    said = page.inner_text("#knockout-sentence")
    assert "with 4 heads no ranking can reach the two-sided 5% level" in said and "2 times in 24 (8.3%)" in said
    assert "would be" not in said and "did not predict" not in said
    levels = page.evaluate("[...Array(13).keys()].map(n => window.npformerPage.spearmanLevel(n))")
    for n in range(2, 11):
        want = exact_level(n)
        if want is None:
            assert levels[n] is None and n <= 4
        else:
            assert levels[n]["exact"] and abs(levels[n]["level"] - want) < 1e-12 and levels[n]["level"] <= 1
    assert [round(levels[n]["level"], 3) for n in range(5, 11)] == [1.0, 0.886, 0.786, 0.738, 0.7, 0.648]  # Zar 1972
    assert not levels[11]["exact"] and abs(levels[12]["level"] - 1.96 / np.sqrt(11)) < 1e-12
    for n in (5, 6, 7):                       # the level's rho has p <= 0.05 in scipy's exact test, the next one not
        perms = permutations(n)
        rho = 1 - 6 * ((perms - np.arange(n)).astype(np.int64) ** 2).sum(1) / (n ** 3 - n)
        at, below = perms[np.isclose(rho, levels[n]["level"])][0], perms[rho < levels[n]["level"] - 1e-9]
        below = below[np.argmax(rho[rho < levels[n]["level"] - 1e-9])]

        def rho_of(y, axis=-1, n=n):                # against 0..n-1: Spearman's rho of an untied ranking
            return 1 - 6 * ((y - np.arange(n)) ** 2).sum(axis=axis) / (n ** 3 - n)

        def p_value(y, n=n, rho_of=rho_of):        # scipy's exact test over the n! orders of y
            assert rho_of(y) == pytest.approx(stats.spearmanr(np.arange(n), y).statistic, abs=1e-12)
            return stats.permutation_test((y.astype(np.int64),), rho_of, permutation_type="pairings",
                                          n_resamples=np.inf, vectorized=True).pvalue
        assert p_value(at) <= 0.05 < p_value(below)
    effects = decode_array(payload["inputs"][0]["knockout"]["groups"]["self"]["effect"])
    floor = float(np.abs(effects[..., 0]).max()) * 1.5
    page.evaluate(f"window.npformerPage.input().knockout.noise_floor[0] = {floor}; window.npformerPage.render()")
    said = page.inner_text("#knockout-sentence")
    assert said.startswith("The knock-out effects are too small to rank") and "No conclusion is drawn" in said
    for claim in ("predicted", "did not predict", "first head too", "\u03c1 ="):
        assert claim not in said
    assert not o.errors
