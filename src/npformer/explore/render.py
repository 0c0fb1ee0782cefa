"""One self-contained HTML file from the explorer's payload (docs/EXPLORE_FORMAT.md).

The page is files in ``page/`` (``explore.html``, ``explore.css``, and the scripts of ``_SCRIPTS``),
written by hand, no framework. ``render_html`` inlines the scripts, the style and the payload JSON into
the template, so the result opens from disk and makes no network request.

The payload goes in ``<script type="application/json">``, which the browser never runs, but whose
text ends at the first ``</script``. JSON allows ``\\u003c`` for ``<`` inside strings (the only
place a ``<`` can occur in JSON), so every ``<`` is written that way; ``JSON.parse`` reads the
same string back, and no ``</script>`` or ``<!--`` can appear in the element.
"""
from __future__ import annotations

import html
import json
import re
from importlib import resources

# the template's slots, each replaced exactly once
_SLOTS = ("__EXPLORE_TITLE__", "/*__EXPLORE_CSS__*/", "/*__EXPLORE_JS__*/", "__EXPLORE_PAYLOAD__")
# the page's scripts, inlined in this order into the one <script> element: explore.js first (the shared state
# and the views); each later file adds views through the hooks explore.js offers
# timeline.js: the causal LM's generation timeline; episode.js: a policy's episode;
# svg.js last: it records what every view draws
_SCRIPTS = ("explore.js", "units.js", "blocks.js", "timeline.js", "knockout.js", "episode.js", "svg.js")


def _page_file(name: str) -> str:
    return resources.files("npformer.explore").joinpath("page").joinpath(name).read_text(encoding="utf-8")


def payload_json(payload: dict) -> str:
    """The payload as JSON that is safe inside a ``<script>`` element (no '<', no U+2028/U+2029 raw)."""
    if not isinstance(payload, dict):
        raise TypeError(f"payload: expected a dict (docs/EXPLORE_FORMAT.md), got {type(payload).__name__}")
    text = json.dumps(payload, separators=(",", ":"), allow_nan=False)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _check_inline(name: str, text: str) -> None:
    # an inlined script or style must not close its own element early
    closer = "</script" if name.endswith(".js") else "</style"
    if closer in text.lower():
        raise ValueError(f"page/{name} contains {closer!r}, which would end its inline element")


def render_html(payload: dict) -> str:
    """The explorer page for ``payload`` as one HTML string (write it with encoding='utf-8')."""
    if payload.get("version") != 1:
        raise ValueError(f"payload['version']: expected 1, got {payload.get('version')!r}")
    template = _page_file("explore.html")
    css = _page_file("explore.css")
    _check_inline("explore.css", css)
    scripts = []
    for name in _SCRIPTS:
        text = _page_file(name)
        _check_inline(name, text)
        scripts.append(text)
    js = "\n".join(scripts)
    values = {
        "__EXPLORE_TITLE__": html.escape(str(payload.get("title", "npformer explore"))),
        "/*__EXPLORE_CSS__*/": css,
        "/*__EXPLORE_JS__*/": js,
        "__EXPLORE_PAYLOAD__": payload_json(payload),
    }
    # split the template (only the template) at its slots, so inserted text is never searched for a slot
    pieces = re.split("(" + "|".join(re.escape(slot) for slot in _SLOTS) + ")", template)
    for slot in _SLOTS:
        if pieces.count(slot) != 1:
            raise ValueError(f"page/explore.html: slot {slot!r} found {pieces.count(slot)} times, expected once")
    return "".join(values.get(piece, piece) if n % 2 else piece for n, piece in enumerate(pieces))
