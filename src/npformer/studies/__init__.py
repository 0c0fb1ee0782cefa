"""The lesson's misconceptions as experiments on trained models: ``npformer study NAME``.

    heads          "More heads always means a better model."   1, 2, 4, 8, 16 heads at d_model 64
    positions      "Attention knows the word order."           sinusoidal, learned and no positions
    understanding  "Attention understands the sentence."       untrained vs trained; depth; no FFN

Each study trains its settings x seeds with the ``Trainer`` on an existing task, measures every
run, and reports a table (mean and spread over the seeds), a CSV, a PNG, and one sentence chosen
from the numbers (``common.compare`` words every comparison). ``STUDIES`` lists them: study name ->
(module, class name), imported when first asked for; nothing registers itself.
"""
from __future__ import annotations

import importlib

# study name -> (module, Study class name), in the order the lesson lists the misconceptions
STUDIES: dict[str, tuple[str, str]] = {
    "understanding": ("npformer.studies.understanding", "UnderstandingStudy"),
    "positions": ("npformer.studies.positions", "PositionsStudy"),
    "heads": ("npformer.studies.heads", "HeadsStudy"),
}


def get_study(name: str):
    """A new instance of the study named ``name``; ValueError listing the names otherwise."""
    if name not in STUDIES:
        raise ValueError(f"unknown study {name!r}; studies: {', '.join(STUDIES)}")
    module, cls = STUDIES[name]
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"study {name!r}: module {module} failed to import: {e}") from e
    return getattr(mod, cls)()
