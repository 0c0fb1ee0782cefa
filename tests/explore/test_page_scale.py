"""The issue's scale in the browser: MiniLM's shape at its maximum length (256 word pieces, 6 layers x
12 heads, q, k, v zlib-compressed as the payload builder stores them) and a 512-token causal text
input. The pages must open without error and stay correct at that size; how long they take is
printed (run with -s to see it), never asserted: benchmarks/bench_explore_page.py measures the real
models' pages and docs/explorer.md quotes it."""
import time

import numpy as np
import pytest
from page_payloads import build

from npformer.explore.render import render_html
from npformer.ops import attention_forward


@pytest.mark.parametrize("kind,n", [("minilm", 256), ("text", 512)])
def test_big_inputs_open_and_stay_right(opened, tmp_path, kind, n):
    payload, refs = build(kind, n_tokens=n)
    path = tmp_path / f"{kind}{n}.html"
    path.write_text(render_html(payload), encoding="utf-8")
    t = time.perf_counter()
    o = opened(path.as_uri())
    wall = time.perf_counter() - t
    page = o.page
    timing = page.evaluate("window.npformerExplore.timing")
    h0 = o.canvas_hash("#head-canvas")
    t = time.perf_counter()
    page.select_option("#layer-select", "1")
    layer_s = time.perf_counter() - t
    assert o.canvas_hash("#head-canvas") != h0
    g = payload["inputs"][0]["groups"][0]
    q, k, v, mask, bias, _ = refs["self"]
    out, w, _ = attention_forward(q, k, v, mask=mask, bias=bias)
    page.select_option("#query-select", str(n - 1))
    t = time.perf_counter()
    o.click_tab("step")
    step_s = time.perf_counter() - t
    page.select_option("#step-head", "0")                          # the view opened on the layer's most focused head
    np.testing.assert_allclose([float(x) for x in page.eval_on_selector_all(
        "#step-table td.weight", "els => els.map(e => e.dataset.value)")], w[1, 0, n - 1], rtol=0, atol=1e-5)
    t = time.perf_counter()
    o.click_tab("model")
    model_s = time.perf_counter() - t
    assert o.errors == [] and o.foreign_requests(("file://", "data:")) == []
    print(f"\n{kind} {n} tokens ({g['n_layers']}x{g['n_heads']} heads, {path.stat().st_size / 1e6:.1f} MB): "
          f"navigation to interactive {timing['ready_ms']:.0f} ms (driver: {wall * 1000:.0f} ms; parse "
          f"{timing['parse_ms']:.0f}, inflate {timing['inflate_ms']:.0f}, first view {timing['first_view_ms']:.0f}); "
          f"layer switch {layer_s * 1000:.0f} ms, step view {step_s * 1000:.0f} ms, model view {model_s * 1000:.0f} ms")
