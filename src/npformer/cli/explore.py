"""``npformer explore``: an interactive attention explorer in one self-contained HTML file.

    npformer explore runs/dates "29 November 2026" --out dates.html   # a trained run: dates, text, copy
    npformer explore minilm "a sentence" ["a second sentence"]       # all-MiniLM-L6-v2, word pieces
    npformer explore MODEL_DIR "a sentence"                          # a Hugging Face bert/roberta/distilbert dir
    npformer explore runs/digits 17                                  # a test image, by index
    npformer explore runs/tabletop --seed 2 --instruction "put the blue block in the bowl"
    npformer explore runs/gripper --seed 3 [--instruction TEXT] [--perturb]   # an episode, step by step
    npformer explore runs/dates --serve [--port 8765]                # a local page for new inputs
    npformer explore minilm "a sentence" --layers 4-5                # only layers 4 and 5's maps in the page
    npformer explore runs/tabletop --target pick=6                   # explain another output: why cell 6?

Without --out the file is RUN_DIR/explore.html (./explore.html for minilm and for a Hugging Face
directory, which config.json's model_type marks: the model's folder is left as it is); the command
prints its path. The page makes no network request: its script, style and data are inline. ``--serve`` binds
127.0.0.1 only (``npformer.explore.serve``).
"""
from __future__ import annotations

from pathlib import Path

from . import CLIError

HELP = "an interactive attention explorer (one offline HTML file, or --serve)"
DESCRIPTION = ("Write every layer's and head's attention, the step-by-step computation with the model's numbers, "
               "rollout and gradient-weighted relevance for INPUT into one self-contained HTML page.")


def add_arguments(p) -> None:
    p.add_argument("source", metavar="RUN_DIR", help='a run directory written by npformer train, "minilm", or a '
                                                     "Hugging Face model directory (config.json with a model_type)")
    p.add_argument("inputs", nargs="*", metavar="INPUT",
                   help="texts (dates, copy, text, minilm: up to two sentences), or test-image indices (digits)")
    p.add_argument("--out", metavar="FILE.html", help="where to write the page (default: RUN_DIR/explore.html, "
                                                      "./explore.html for minilm or a model directory)")
    p.add_argument("--seed", type=int, metavar="S", help="tabletop: which scene; gripper: which episode (default 0)")
    p.add_argument("--instruction", metavar="TEXT", help="tabletop, gripper: what to do (default: one made up for "
                                                         "the scene)")
    p.add_argument("--perturb", action="store_true", help="gripper: the episode with the world's perturbations "
                                                          "(the block moves once; a held block may slip)")
    p.add_argument("--target", metavar="POS=TOKEN",
                   help="explain this output besides the prediction (shown first): POS a 0-based output position, "
                        "or pick, place or cls; TOKEN the token's text or id, or the cell or class number")
    p.add_argument("--serve", action="store_true", help="serve the page on 127.0.0.1 and rerun the model per input")
    p.add_argument("--port", type=int, default=8765, metavar="N", help="--serve's port (default 8765)")
    p.add_argument("--layers", metavar="A-B", help="store only layers A to B's maps (0-based, inclusive) to shrink "
                                                   "the page; rollout and relevance still run through every layer")


def run(args) -> int:
    from ..explore.payload import open_explorer, parse_inputs
    from ..files import atomic_write_bytes

    if args.serve and args.out:
        raise CLIError("--serve shows the page in a browser; it takes no --out")
    if not 0 <= args.port <= 65535:
        raise CLIError(f"--port must be in 0..65535, got {args.port}")
    if args.seed is not None and args.seed < 0:
        raise CLIError(f"--seed must be >= 0, got {args.seed}")
    from ..pretrained.hf import model_type

    minilm = args.source == "minilm"
    if not minilm and not Path(args.source).is_dir():
        raise CLIError(f"run directory not found: {args.source} (nor a model directory)")
    model = minilm or model_type(args.source) is not None              # a model, not a run: write here
    out = Path(args.out) if args.out else (Path("explore.html") if model else Path(args.source) / "explore.html")
    if out.suffix.lower() not in (".html", ".htm"):
        raise CLIError(f"--out must name an .html file, got {str(out)!r}")
    if not args.serve and not out.parent.is_dir():
        raise CLIError(f"directory does not exist: {out.parent}")
    layers = _layers(args.layers)
    if args.target is not None:
        _check_target(args.target, model)
    ex = open_explorer(args.source)
    ex.layers = layers
    inputs = parse_inputs(ex, args.inputs, seed=args.seed, instruction=args.instruction, perturb=args.perturb)
    for one in inputs if args.target is not None else ():
        one["target"] = args.target
    if args.serve:
        return _serve(ex, inputs, args.port)
    from ..explore.render import render_html

    payload = _payload(ex, inputs)
    _say_truncated(payload)
    html = render_html(payload)
    atomic_write_bytes(out, html.encode("utf-8"))
    print(out)
    return 0


def _check_target(spec: str, model_dir: bool) -> None:
    """--target's form (POS=TOKEN), before the model loads; whether POS and TOKEN exist is the model's to say."""
    from ..explore.targets import TargetError, split_target

    if model_dir:
        raise CLIError("--target is for trained runs: a model directory's page explains its own outputs (minilm's "
                       "and a BERT-family model's: [CLS] and the mean-pooled embedding; a GPT-2's: each token it "
                       "generated)")
    try:
        split_target(spec)
    except TargetError as e:
        raise CLIError(f"--{e}") from None


def _payload(ex, inputs) -> dict:
    from ..explore.targets import TargetError

    try:
        return ex.payload(inputs)
    except TargetError as e:
        raise CLIError(f"--{e}") from None


def _layers(text: str | None) -> tuple[int, int] | None:
    """--layers A-B, checked before the model loads (against the model's depth when the payload is made)."""
    if text is None:
        return None
    from ..explore.layers import parse_layers

    try:
        return parse_layers(text)
    except ValueError as e:
        raise CLIError(str(e)) from None


def _say_truncated(payload: dict) -> None:
    """One line on stderr per input the tokenizer cut (the page says it too)."""
    import sys

    for n, inp in enumerate(payload["inputs"]):
        if inp.get("truncated"):
            print(f"npformer explore: input {n + 1} {inp['truncated']['note']}", file=sys.stderr)


def _serve(ex, inputs, port: int) -> int:
    from ..explore.serve import ExploreServer
    from ..explore.targets import TargetError

    try:
        server = ExploreServer(ex, inputs, port)
    except TargetError as e:
        raise CLIError(f"--{e}") from None
    except OSError as e:
        if e.errno in (98, 48, 10048):                               # EADDRINUSE (Linux, macOS, Windows)
            raise CLIError(f"port {port} is in use on 127.0.0.1: choose another with --port") from None
        raise
    print(f"serving {server.url} (Ctrl-C to stop)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("stopped")
    finally:
        server.server_close()
    return 0
