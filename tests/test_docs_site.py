"""The documentation site (mkdocs.yml) builds with ``mkdocs build --strict``, offline, and what it builds is whole.

- The build runs with every proxy pointed at a closed port on this machine, so a theme, plugin or inventory that
  downloads anything fails it here as it would on a machine without a network; any warning fails it (strict).
- Every page under docs/ becomes a page of the site.
- The API reference documents every name in the ``__all__`` of each public module it covers: ops, nn, models,
  pretrained, train (with its loop and run directories), decode, explore, interop.
- No page loads a script, style, font, image or frame from another host.
- The docstrings are rendered as Markdown, so none may hold text that Markdown takes for an HTML tag (such a
  ``<name>`` vanishes from the page); a code span keeps it.
- No list is left as text: a paragraph or list item of a built page never holds a line that starts with a list
  marker ("- ", "* ", "+ ", "1. "), which is what a list nested by two spaces becomes (Python-Markdown nests by
  four); the strict build does not warn about it.
- The config's link checks are on: a second, tiny build with a missing page, a link out of docs/, a missing
  anchor and a page left out of the nav fails, naming each.

The builds need the ``docs`` extras (mkdocs, mkdocs-material, mkdocstrings-python), which the ``test`` extras
include; without them these tests are skipped, and fail under CI (tests/oracles.py).
"""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from oracles import require

require("mkdocs")
require("material")
require("mkdocstrings_handlers.python")
yaml = require("yaml")

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SRC = ROOT / "src"

# page of the API reference -> the modules it documents
API = {
    "ops": ["npformer.ops"],
    "nn": ["npformer.nn"],
    "models": ["npformer.models"],
    "pretrained": ["npformer.pretrained"],
    "train": ["npformer.train", "npformer.train.trainer", "npformer.train.checkpoint"],
    "decode": ["npformer.decode"],
    "explore": ["npformer.explore"],
    "interop": ["npformer.interop"],
}

CLOSED = "http://127.0.0.1:9"   # port 9 (discard): no proxy answers there, so every download fails at once
PROXIES = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
OFFLINE = dict.fromkeys(PROXIES, CLOSED)


def mkdocs_build(config: Path, site_dir: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k.lower() != "no_proxy"}
    # Material >= 9.7 prints a notice about MkDocs 2 on every build; it is not about this site
    env.update(OFFLINE, NO_MKDOCS_2_WARNING="1")
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
                           "--site-dir", str(site_dir)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    r = mkdocs_build(ROOT / "mkdocs.yml", out)
    log = r.stdout + r.stderr
    assert r.returncode == 0, f"mkdocs build --strict failed:\n{log}"
    complaints = [line for line in log.splitlines() if re.match(r"\s*(WARNING|ERROR)\b", line)]
    assert not complaints, "\n".join(complaints)
    return out


def html_path(site: Path, page: Path) -> Path:
    """docs/NAME.md -> site/NAME.html (mkdocs.yml sets use_directory_urls: false)."""
    return site / page.relative_to(DOCS).with_suffix(".html")


def test_every_page_is_built(site):
    pages = sorted(DOCS.rglob("*.md"))
    assert pages
    missing = [str(p.relative_to(ROOT)) for p in pages if not html_path(site, p).is_file()]
    assert not missing, f"pages with no HTML in the site: {missing}"


def test_code_blocks_wrap_rather_than_clip(site):
    """Every page links the site's stylesheet, whose rule makes a code block's long lines wrap."""
    css = (site / "stylesheets" / "extra.css").read_text()
    assert re.search(r"\.md-typeset pre > code \{[^}]*white-space: pre-wrap;", css), css
    for page in ("lesson.html", "learn.html", "index.html"):
        assert 'href="stylesheets/extra.css"' in (site / page).read_text(), page


def module_file(module: str) -> Path:
    path = SRC.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def public_names(module: str) -> list[str]:
    """The module's ``__all__``, read from its source; without one, its functions and classes not named with _."""
    body = ast.parse(module_file(module).read_text(encoding="utf-8")).body
    for node in body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    return [node.name for node in body if isinstance(node, (ast.FunctionDef, ast.ClassDef))
            and not node.name.startswith("_")]


def test_the_api_reference_documents_every_public_name(site):
    assert {p.stem for p in (DOCS / "api").glob("*.md")} >= set(API), "an API page is missing from docs/api/"
    for page, modules in API.items():
        text = (site / "api" / f"{page}.html").read_text(encoding="utf-8")
        anchors = set(re.findall(r'id="(npformer\.[\w.]+)"', text))
        for module in modules:
            names = public_names(module)
            assert names, f"{module}.__all__ is empty"
            assert module in anchors, f"api/{page}.md does not document {module}"
            # a function named as the submodule that defines it (decode.greedy) is documented by its full path
            missing = [n for n in names if f"{module}.{n}" not in anchors and f"{module}.{n}.{n}" not in anchors]
            assert not missing, f"api/{page}.md does not document {module}'s {missing}"


class Loads(HTMLParser):
    """Every URL a page loads (not the ones it links to): scripts, styles, images, frames, media."""

    ATTRS = {("script", "src"), ("link", "href"), ("img", "src"), ("img", "srcset"), ("iframe", "src"),
             ("source", "src"), ("source", "srcset"), ("video", "src"), ("audio", "src"), ("embed", "src"),
             ("object", "data")}

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if (tag, name) in self.ATTRS and value:
                self.urls.extend(value.split(",") if name == "srcset" else [value])
            elif name == "style" and value:
                self.urls.extend(re.findall(r"url\(\s*['\"]?([^'\")]+)", value))


def elsewhere(url: str) -> bool:
    """A URL on another host: with a scheme that reaches out (http, https, ftp) or protocol-relative (//host)."""
    url = url.strip().split()[0] if url.strip() else ""
    return bool(re.match(r"(?i)(https?:|ftp:)?//", url))


def test_the_pages_load_nothing_from_another_host(site):
    pages = sorted(site.rglob("*.html"))
    assert len(pages) >= len(list(DOCS.rglob("*.md")))
    found = []
    for page in pages:
        parser = Loads()
        text = page.read_text(encoding="utf-8")
        parser.feed(text)
        found += [f"{page.relative_to(site)}: {u}" for u in parser.urls if elsewhere(u)]
        found += [f"{page.relative_to(site)}: {u}" for u in re.findall(r"@import\s+(?:url\()?['\"]?([^'\");]+)", text)
                  if elsewhere(u)]
    for sheet in sorted(site.rglob("*.css")):
        text = sheet.read_text(encoding="utf-8")
        urls = re.findall(r"url\(\s*['\"]?([^'\")]+)", text) + re.findall(r"@import\s+['\"]([^'\"]+)", text)
        found += [f"{sheet.relative_to(site)}: {u}" for u in urls if elsewhere(u)]
    assert not found, "the site loads from other hosts:\n" + "\n".join(found)


def test_the_loads_check_sees_a_script_from_another_host():
    parser = Loads()
    parser.feed('<link rel="stylesheet" href="https://fonts.example/css"><script src="//cdn.example/x.js"></script>'
                '<img src="figures/a.png"><a href="https://example.org/">a link is not a load</a>')
    assert [u for u in parser.urls if elsewhere(u)] == ["https://fonts.example/css", "//cdn.example/x.js"]


class ListsAsText(HTMLParser):
    """The text of each paragraph and list item outside code, and the lines in it that start with a list marker."""

    MARKER = re.compile(r"\n[ \t]*(?:[-*+]|\d+\.)[ \t]")
    SKIP = {"pre", "code", "script", "style"}

    def __init__(self) -> None:
        super().__init__()
        self.open: list[str] = []                   # the tags open now
        self.found: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag not in {"br", "img", "hr", "input", "meta", "link", "wbr"}:
            self.open.append(tag)

    def handle_endtag(self, tag):
        if tag in self.open:
            del self.open[len(self.open) - 1 - self.open[::-1].index(tag):]

    def handle_data(self, data):
        if {"p", "li"} & set(self.open) and not self.SKIP & set(self.open):
            for m in self.MARKER.finditer(data):
                self.found.append(data[m.start() + 1:].split("\n")[0][:60])


def test_the_list_check_sees_a_list_left_as_text():
    parser = ListsAsText()
    parser.feed("<p>Containers:\n- chest 100%;\n- mug 91%.</p><ul><li>kept\n1. as text</li></ul>"
                "<pre><code>a\n- in code</code></pre><p>a dash - inside a line</p>")
    assert parser.found == ["- chest 100%;", "- mug 91%.", "1. as text"]


def test_no_page_shows_a_list_as_text(site):
    found = []
    for page in sorted(site.rglob("*.html")):
        parser = ListsAsText()
        parser.feed(page.read_text(encoding="utf-8"))
        found += [f"{page.relative_to(site)}: {line}" for line in parser.found]
    assert not found, ("lines that should be list items render as text (nest a list by four spaces):\n"
                       + "\n".join(found))


# a docstring's text outside code: code spans (`x`, ``x``) and indented blocks, which Markdown shows as code
CODE_SPAN = re.compile(r"(`+).+?\1", re.S)
TAG = re.compile(r"<[A-Za-z!/?][^<>\n]*>")


def prose(docstring: str) -> str:
    """The text of a docstring that Markdown reads as text: without its code spans, and without its indented
    blocks (lines indented by four spaces after a blank line, and the lines that follow them)."""
    out, in_code, after_blank = [], False, True
    for line in docstring.splitlines():
        if not line.strip():
            out.append("")
            after_blank = True
            continue
        in_code = line.startswith("    ") and (in_code or after_blank)
        if not in_code:
            out.append(line)
        after_blank = False
    return CODE_SPAN.sub("", "\n".join(out))


def test_prose_keeps_text_and_drops_code():
    doc = "Returns ``{\"a.<name>\": m}`` and `<b>`.\n\n    config.json   {\"<key>\": 1}\n\nThen <name> is lost."
    assert TAG.findall(prose(doc)) == ["<name>"]


def test_docstrings_hold_no_text_that_markdown_takes_for_html():
    found = []
    for package in API:
        for path in sorted((SRC / "npformer" / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    doc = ast.get_docstring(node)
                    if doc:
                        where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 1)}"
                        found += [f"{where}: {tag}" for tag in TAG.findall(prose(doc))]
    assert not found, "write these in a code span (``...``), or Markdown drops them as HTML:\n" + "\n".join(found)


def test_a_broken_link_fails_the_build(tmp_path):
    """The real config's link checks, on a tiny site: one build, four defects, each named."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\n[gone](no-such-page.md), [out of docs](../README.md), "
                                   "[no anchor](other.md#no-such-heading)\n", encoding="utf-8")
    (docs / "other.md").write_text("# Other\n\nA page left out of the nav.\n", encoding="utf-8")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    config.update(docs_dir=str(docs), nav=[{"Home": "index.md"}])
    config["plugins"] = [p for p in config["plugins"] if not (isinstance(p, dict) and "mkdocstrings" in p)]
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    r = mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site")
    log = r.stdout + r.stderr
    assert r.returncode != 0, log
    warnings = [line for line in log.splitlines() if line.startswith("WARNING")]
    for defect in ("no-such-page.md", "../README.md", "no-such-heading", "other.md"):
        assert any(defect in w for w in warnings), f"no warning names {defect}:\n{log}"
