"""``npformer act DIR --seed S --instruction "..."``: the tabletop policy acts on one scene.

    npformer act runs/tabletop --seed 3 --instruction "put the red block in the box" --out act.png
    npformer act runs/tabletop --study 2000          # does "block" attend to "red" more than to "the"?

The scene is the one ``--seed`` draws (the same seed always gives the same scene). The command
checks the instruction against the scene first: a word outside the vocabulary, or a colour or
container that is not in the scene, is an error (exit 2); the policy never acts on nothing.
Then it prints the predicted pick and place cells and draws them with the attention of the two
action tokens over the image patches and the instruction words.

A policy trained with ``--text-encoder minilm`` reads any text ("lift the crimson brick into the
crate"); its words are MiniLM's word pieces. A colour or container named with the world's words must
still be in the scene; one named otherwise has no right cell to compare with, and the command says so.

``--study N`` measures, over N fresh instructions, per layer and head, how much attention the
token "block"/"cube" gives the colour word and the word "the", and what the action tokens read;
it prints the table as JSON. Nothing in training steers attention: this only observes it.

The policy's logic (``scene_for_seed``, ``act``, ``describe``, ``attention_study``) lives in
``npformer.data.tabletop_policy``; ``make demo``'s tabletop step is ``npformer.cli.demo.step_tabletop``.
"""
from __future__ import annotations

import json
from pathlib import Path

from . import CLIError

HELP = "run the tabletop policy on a scene and draw what it attends to"
DESCRIPTION = ("Render a tabletop scene, predict the pick and place cells for an instruction, and draw them "
               "with the action tokens' attention.")


def add_arguments(p) -> None:
    p.add_argument("run", metavar="DIR", help="a tabletop run directory (npformer train tabletop)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="which scene (default 0)")
    p.add_argument("--instruction", metavar="TEXT",
                   help='e.g. "put the red block in the box" (default: one made up for the scene)')
    p.add_argument("--out", metavar="FIG.png", help="where to draw the figure (default: DIR/act.png)")
    p.add_argument("--study", type=int, metavar="N",
                   help="instead of acting: measure colour-word vs 'the' attention over N instructions (JSON)")


def run(args) -> int:
    from ..data.tabletop_policy import act, attention_study, describe, scene_for_seed
    from ..train.checkpoint import load_run
    from ..viz.vision import save_act

    if args.study is not None:
        if args.study < 1:
            raise CLIError(f"--study must be >= 1, got {args.study}")
        r = load_run(args.run, task="tabletop")
        print(json.dumps(attention_study(r.model, args.study, args.seed), indent=1))
        return 0
    if args.instruction is not None and not args.instruction.strip():
        raise CLIError("empty instruction: say what to do, e.g. \"put the red block in the box\"")
    out = Path(args.out) if args.out else Path(args.run) / "act.png"
    if out.suffix.lower() != ".png":
        raise CLIError(f"--out must name a .png file, got {str(out)!r}")
    r = load_run(args.run, task="tabletop")
    if args.seed < 0:
        raise CLIError(f"--seed must be >= 0, got {args.seed}")
    scene, made_up = scene_for_seed(args.seed)
    instruction = args.instruction if args.instruction is not None else made_up
    print(f"scene {args.seed}: {describe(scene)}")
    print(f"instruction: {instruction}")
    res = act(r.model, scene, instruction)
    if r.model.config.text_dim:
        print(f"word pieces read through MiniLM: {' '.join(res['words'])}")
    print(f"action: pick cell {res['pick']} (p={res['p_pick']:.3f}), place cell {res['place']} "
          f"(p={res['p_place']:.3f})  -> {_verdict(res)}")
    save_act(out, scene.image, res, r.model.config.patch_size, title=f"npformer act {args.run} --seed {args.seed}")
    print(f"figure: {out}")
    return 0


def _verdict(res: dict) -> str:
    """right/WRONG against the cells the instruction's world words name; what is unknown, said so."""
    truth = {"pick": res["true_pick"], "place": res["true_place"]}
    known = {k: v for k, v in truth.items() if v is not None}
    if not known:
        return "not checked (the instruction names no colour or container with the world's words)"
    right = all(res[k] == v for k, v in known.items())
    said = ", ".join(f"{k} {v}" for k, v in known.items())
    rest = "" if len(known) == 2 else f"; the {next(k for k in truth if k not in known)} is not checked"
    return f"{'right' if right else 'WRONG'} (the scene says {said}{rest})"
