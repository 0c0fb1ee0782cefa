"""``npformer explore``: an attention explorer in one self-contained HTML page.

    capture.py     q, k, v, weights and scale of every attention op, read from one forward's caches
    relevance.py   attention rollout (Abnar & Zuidema 2020) and gradient-weighted relevance
                   (Chefer, Gur & Wolf 2021) through npformer's own backward
    knockout.py    head knock-outs: each head's slice zeroed, one forward each, measured on every target
    targets.py     which outputs are explained: the prediction, 4 alternatives, --target POS=TOKEN
    arrays.py      arrays in the JSON (encode_array, decode_array)
    payload.py     the page's data (docs/EXPLORE_FORMAT.md) for each model kind, and the training probe
    arrays.py      arrays in the page's JSON: base64, 8-bit maps, zlib-compressed float32 byte planes
    kinds.py, words.py   token kinds from labels; word pieces as words, and where a long text was cut
    layers.py      ``--layers A-B``: only those layers' maps in the page
    render.py      ``render_html(payload) -> str``: the page with its script, style and data inline
    serve.py       ``--serve``: a local page that reruns the model for each new input

In Jupyter, ``show`` displays the same page inline::

    from npformer.explore import show
    show("runs/dates", "29 November 2026")
    show("minilm", "a cat sat on the mat", "a dog lay on the rug")
"""
from __future__ import annotations


class ExplorerView:
    """The explorer page for display in Jupyter: ``_repr_html_`` gives an iframe whose ``srcdoc`` is the
    same self-contained file ``npformer explore`` writes; ``save(path)`` writes that file."""

    def __init__(self, html: str, height: int = 760) -> None:
        self.html, self.height = html, int(height)

    def _repr_html_(self) -> str:
        import html as _html

        return (f'<iframe srcdoc="{_html.escape(self.html, quote=True)}" style="width:100%;'
                f'height:{self.height}px;border:0" sandbox="allow-scripts allow-downloads"></iframe>')

    def save(self, path) -> str:
        from ..files import atomic_write_bytes

        atomic_write_bytes(path, self.html.encode("utf-8"))
        return str(path)


def show(source, *inputs, seed: int | None = None, instruction: str | None = None, height: int = 760) -> ExplorerView:
    """The explorer for a run directory (or "minilm", or a payload dict) and inputs, as in the command
    line: texts for dates/copy/text runs and minilm, test-image indices for digits, ``seed`` and
    ``instruction`` for tabletop. IPython is not imported: Jupyter calls ``_repr_html_`` itself."""
    from .payload import open_explorer, parse_inputs
    from .render import render_html

    if isinstance(source, dict):
        payload = source
    else:
        ex = open_explorer(source)
        payload = ex.payload(parse_inputs(ex, [str(i) for i in inputs], seed=seed, instruction=instruction))
    return ExplorerView(render_html(payload), height)


__all__ = ["ExplorerView", "show"]
