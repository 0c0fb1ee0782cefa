"""render_html: one self-contained page, the payload inlined so that no text can close its element."""
import json
import re

import pytest
from page_payloads import build

from npformer.explore.render import payload_json, render_html


def _payload_text(page: str) -> str:
    m = re.search(r'<script type="application/json" id="payload">(.*?)</script>', page, re.S)
    assert m, "the payload element is missing"
    return m.group(1)


def test_page_is_one_file_with_everything_inline():
    payload, _ = build("dates")
    page = render_html(payload)
    assert page.startswith("<!DOCTYPE html>")
    assert "__EXPLORE_" not in page                              # every slot filled
    # no external resource of any kind: outside the inline script and style, no src= or href=
    # attribute and no <link>; in the style no url() or @import; and a policy that forbids loading any
    markup = re.sub(r"<(script|style)\b[^>]*>.*?</\1>", "", page, flags=re.S | re.I)
    assert not re.search(r"\s(src|href)\s*=", markup, re.I)
    assert not re.search(r"<link\b", markup, re.I)
    style = re.search(r"<style>(.*?)</style>", page, re.S).group(1)
    assert "@import" not in style and "url(" not in style
    assert "default-src 'none'" in page
    assert re.search(r"<script>\s*// npformer explore", page)      # the script is inline
    assert json.loads(_payload_text(page)) == payload            # the payload reads back exactly


def test_script_closers_in_the_payload_are_escaped():
    payload, _ = build("text")
    evil = "</script><script>alert(1)</script><!-- \u2028 & <b>"
    payload["title"] = evil
    payload["inputs"][0]["label"] = evil
    page = render_html(payload)
    text = _payload_text(page)
    assert "<" not in text and ">" not in text                   # nothing can end the element early
    assert json.loads(text)["inputs"][0]["label"] == evil
    title = re.search(r"<title>(.*?)</title>", page, re.S).group(1)
    assert "<" not in title and "&lt;/script&gt;" in title
    assert page.count("</script>") == 2                          # the payload's and the code's own


def test_bad_payload_is_refused_with_a_clear_message():
    with pytest.raises(ValueError, match=r"payload\['version'\]: expected 1"):
        render_html({"version": 2})
    with pytest.raises(TypeError, match="payload: expected a dict"):
        payload_json([1, 2])
    with pytest.raises(ValueError):                              # NaN is not JSON
        payload_json({"version": 1, "x": float("nan")})
