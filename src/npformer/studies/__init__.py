"""The lesson's misconceptions as experiments on trained models: ``npformer study NAME``.

    heads          "More heads always means a better model."   1, 2, 4, 8, 16 heads at d_model 64
    positions      "Attention knows the word order."           sinusoidal, learned and no positions
    understanding  "Attention understands the sentence."       untrained vs trained; depth; no FFN

and, on the gripper policy acting over time (``studies.episodes``: arms scored over fresh episodes),

    closed-loop    the same chunk policy played open loop (blind) and closed loop, with and without perturbations
    chunks         chunk lengths 1, 4, 8 executed whole, first action only, or temporally ensembled
    drift          clean behaviour cloning, DART, DAgger at an equal number of labels
    data           success against demonstrations (100 to 3,000) and action bins (8, 32, 256)

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
    "closed-loop": ("npformer.studies.closed_loop", "ClosedLoopStudy"),     # the gripper policy over time
    "chunks": ("npformer.studies.chunks", "ChunksStudy"),
    "drift": ("npformer.studies.drift", "DriftStudy"),
    "data": ("npformer.studies.data", "DataStudy"),
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
