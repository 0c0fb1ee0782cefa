"""``npformer info [DIR]``: a model's config and parameter count, per component.

Without DIR: the paper's base Transformer (TransformerConfig() defaults, a shared
37,000-token vocabulary as in Table 3), with its count next to the paper's 65M.
With DIR: the model of a run directory (``config.json``, and ``model.safetensors``
when present, whose tensors are counted too). No model is built: the counts come from the config's
fields (``models.config.param_count`` and ``components``); a model kind registered outside npformer,
whose size npformer cannot count, says "parameters: unknown".
"""
from __future__ import annotations

import json
from pathlib import Path

from . import CLIError

PAPER_BASE_PARAMS = 65_000_000      # "Attention Is All You Need", Table 3, base model

# the model kinds a bare model config (Config.save_json, no "model_kind") is tried as, in this order
BARE_CONFIG_KINDS = ("transformer", "decoder_lm", "classifier")

HELP = "config and parameter count of the base model or a run's model"
DESCRIPTION = __doc__.split("\n\n")[0]


def add_arguments(p) -> None:
    p.add_argument("dir", nargs="?", metavar="DIR", help="a run directory holding config.json")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def _config_from_dir(run_dir: Path):
    """(kind, config) from DIR/config.json: a run's {"model_kind", "model": {...}} or a bare model config.
    The config's size is checked as it is made, before any model is built."""
    from ..data.tasks import model_kind_classes
    from ..settings import read_json, reading

    path = run_dir / "config.json"
    if not run_dir.is_dir():
        raise CLIError(f"{run_dir} is not a directory")
    if not path.is_file():
        raise CLIError(f"{run_dir} has no config.json")
    d = read_json(path, top=dict)
    with reading(path):
        if "model_kind" in d and isinstance(d.get("model"), dict):
            config_cls, _ = model_kind_classes(d["model_kind"])
            return d["model_kind"], config_cls.from_dict(d["model"])
        errors = []
        for kind in BARE_CONFIG_KINDS:             # a bare config saved with Config.save_json
            config_cls, _ = model_kind_classes(kind)
            try:
                return kind, config_cls.from_dict(d)
            except (TypeError, ValueError) as e:
                errors.append(f"{config_cls.__name__}: {e}")
    raise CLIError(f"{path} is neither a run config (model_kind + model) nor a model config ({errors[0]})")


def _checkpoint_count(path: Path) -> tuple[int, int]:
    """(tensors, parameters) in a safetensors file, from its header only."""
    from ..tensorfile import read_header

    tensors, _ = read_header(path)
    return len(tensors), sum(t.size for t in tensors.values())


def _kernels() -> dict:
    """The ops' kernel setting (ops/kernels.py): which compiled twins it runs, numba's version and threads."""
    from ..ops import kernels
    return kernels.describe()


def _kernels_text(k: dict) -> str:
    from ..ops.kernels import AUTO_MIN_ELEMENTS
    if k["kernels"] == "numpy":
        return "numpy (the NumPy references; numba not used)"
    if not k["numba"]:
        return f"{k['kernels']} (the NumPy references: numba is not installed)"
    which = ("every compiled twin" if k["twins"] == "all" else
             f"compiled twins on arrays of {AUTO_MIN_ELEMENTS:,}+ elements: {', '.join(k['twins'])}")
    return (f"{k['kernels']} ({which}); numba {k['numba']}, threading layer {k['threading_layer']}, "
            f"{k['numba_threads']} thread(s)")


def run(args) -> int:
    from .. import models
    from ..data.tasks import model_kind_classes
    from ..models.config import components, param_count

    if args.dir is None:
        kind, config = "transformer", models.TransformerConfig()
        title = "the paper's base Transformer (shared 37,000-token vocabulary, Table 3)"
    else:
        run_dir = Path(args.dir)
        kind, config = _config_from_dir(run_dir)
        title = f"{kind} model of {run_dir}"
    _, model_cls = model_kind_classes(kind)
    model_name = getattr(model_cls, "__name__", kind)
    total, rows = param_count(config), components(config)               # from the config: no model is built
    checkpoint = None
    if args.dir is not None and (Path(args.dir) / "model.safetensors").is_file():
        checkpoint = _checkpoint_count(Path(args.dir) / "model.safetensors")

    kernels = _kernels()
    if args.json:
        out = {"model": model_name, "kind": kind, "config": config.to_dict(), "parameters": total,
               "components": {name: n for name, n, _ in rows or []}, "kernels": kernels}
        if args.dir is None:
            out["paper_parameters"] = PAPER_BASE_PARAMS
        if checkpoint is not None:
            out["checkpoint"] = {"tensors": checkpoint[0], "parameters": checkpoint[1]}
        print(json.dumps(out, indent=2))
        return 0

    print(f"npformer info: {title}")
    print(f"kernels: {_kernels_text(kernels)}")
    print(f"\n{type(config).__name__}")
    for k, v in config.to_dict().items():
        print(f"  {k:<20} {v}")
    if total is None:
        print("\nparameters: unknown (a model kind registered outside npformer: its size is not counted "
              "without building it)")
    else:
        print(f"\nparameters {total:>27,}")
    for name, n, note in rows or []:
        print(f"  {name:<20} {n:>14,}   {note}".rstrip())
    if args.dir is None and total is not None:
        pct = 100 * (total / PAPER_BASE_PARAMS - 1)
        print(f"\npaper (Table 3, base): {PAPER_BASE_PARAMS / 1e6:.0f}M; this count is "
              f"{100 * total / PAPER_BASE_PARAMS:.2f}% of it ({pct:+.2f}%)")
    if checkpoint is not None:
        n_t, n_p = checkpoint
        agree = ("cannot be compared with the config" if total is None else "matches the config" if n_p == total
                 else f"DIFFERS from the config's {total:,}")
        print(f"\nmodel.safetensors: {n_t} tensors, {n_p:,} parameters ({agree})")
    return 0
