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

On a gripper run (``npformer train gripper``) the policy acts over time:

    npformer act runs/gripper --seed 3 [--instruction TEXT] [--perturb] [--out FILE]

plays one episode, the same scene as ``npformer eval``'s episode 3 (under the run's seed), prints each
step's action and the outcome, and writes the episode as an animated GIF (default DIR/act.gif), each frame
captioned with its step and the decoded action; ``--out x.png`` writes a strip of the frames instead.
``--study`` is a tabletop measurement and is refused on a gripper run.
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
    p.add_argument("--out", metavar="FIG.png", help="where to draw the figure (default: DIR/act.png; a gripper "
                   "run: DIR/act.gif, or a strip of frames with --out x.png)")
    p.add_argument("--perturb", action="store_true",
                   help="gripper: the episode with the world's perturbations (the target moves once; blocks slip)")
    p.add_argument("--study", type=int, metavar="N",
                   help="instead of acting: measure colour-word vs 'the' attention over N instructions (JSON)")


def run(args) -> int:
    from ..data.tabletop_policy import act, attention_study, describe, scene_for_seed
    from ..train.checkpoint import load_run
    from ..viz.vision import save_act

    if (Path(args.run) / "config.json").is_file() and _task_of(args.run) == "gripper":
        return _act_gripper(args)
    if args.perturb:
        raise CLIError("--perturb is an option of gripper runs (npformer train gripper)")
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


def _task_of(run_dir) -> str:
    from ..train.checkpoint import read_config

    return read_config(run_dir)["task"]


def _act_gripper(args) -> int:
    """One episode of a gripper policy: its steps, its outcome, and the GIF (or PNG strip) of its frames."""
    from ..data.gripper_policy import eval_episode_seed, play_episode
    from ..train.checkpoint import load_run, run_seed
    from ..viz.episode import save_episode

    if args.study is not None:
        raise CLIError("--study measures the tabletop policy's attention on one-shot scenes; it is not built "
                       "for a gripper run")
    if args.seed < 0:
        raise CLIError(f"--seed must be >= 0, got {args.seed}")
    if args.instruction is not None and not args.instruction.strip():
        raise CLIError("empty instruction: say what to do, e.g. \"put the red block in the box\"")
    out = Path(args.out) if args.out else Path(args.run) / "act.gif"
    if out.suffix.lower() not in (".gif", ".png"):
        raise CLIError(f"--out must name a .gif (the episode) or .png (a strip of its frames), got {str(out)!r}")
    r = load_run(args.run, task="gripper")
    env_seed = eval_episode_seed(run_seed(r), args.seed)
    policy = r.task.policy(r.model)
    if args.instruction is not None:
        r.task.reader.inputs([args.instruction])            # a word the scratch policy does not know: refused
    ep = play_episode(policy, env_seed, args.instruction, args.perturb)
    world = ep["world"]
    print(f"episode {args.seed}: {ep['instruction']!r} (target: {world.target[0]} block in the {world.target[1]})")
    for t, (a, p) in enumerate(zip(ep["actions"], ep["probs"], strict=True), start=1):
        dx, dy = (float(v) for v in a["move"])
        print(f"step {t:2d}: move {dx:+.2f} {dy:+.2f}  {('open', 'close', 'done')[a['gripper']]:5s}  "
              f"p = {p[0]:.2f} {p[1]:.2f} {p[2]:.2f}")
    for step, kind, colour in world.events:
        print(f"event at step {step}: the {colour} block {kind}")
    print(f"outcome: {ep['outcome']} after {world.steps} steps{' (truncated)' if world.truncated else ''}")
    save_episode(out, ep["frames"], ep["actions"], ep["outcome"])
    print(f"{'animation' if out.suffix.lower() == '.gif' else 'frames'}: {out}")
    return 0
