"""``npformer act DIR --seed S --instruction "..."``: the tabletop policy acts on one scene.

    npformer act runs/tabletop --seed 3 --instruction "put the red block in the box" --out act.png
    npformer act runs/tabletop --study 2000          # does "block" attend to "red" more than to "the"?

The scene is the one ``--seed`` draws (the same seed always gives the same scene). The command
checks the instruction against the scene first: a word outside the vocabulary, or a colour or
container that is not in the scene, is an error (exit 2); the policy never acts on nothing.
Then it prints the predicted pick and place cells and draws them with the attention of the two
action tokens over the image patches and the instruction words.

``make demo`` gains a step here (``demo_step``, appended to ``npformer.cli.demo.STEPS`` when this
module is imported, which ``npformer``'s parser does for every subcommand): it trains the tabletop
policy with a shorter budget (DEMO_STEPS) and draws one held-out yellow-with-bowl episode.

``--study N`` measures, over N fresh instructions, per layer and head, how much attention the
token "block"/"cube" gives the colour word and the word "the", and what the action tokens read;
it prints the table as JSON. Nothing in training steers attention: this only observes it.
"""
from __future__ import annotations

import json
from pathlib import Path

from . import CLIError


DEMO_STEPS = 400                    # the demo's training budget (the task's default is longer, see tabletop.py)
DEMO_EVAL_N = 1000                  # held-out scenes per split in the demo's final evaluation
DEMO_INSTRUCTION = "pick up the yellow cube and drop it into the bowl"   # the pairing never trained on


def register(subparsers) -> None:
    p = subparsers.add_parser("act", help="run the tabletop policy on a scene and draw what it attends to",
                              description="Render a tabletop scene, predict the pick and place cells for an "
                                          "instruction, and draw them with the action tokens' attention.")
    p.add_argument("run", metavar="DIR", help="a tabletop run directory (npformer train tabletop)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="which scene (default 0)")
    p.add_argument("--instruction", metavar="TEXT",
                   help='e.g. "put the red block in the box" (default: one made up for the scene)')
    p.add_argument("--out", metavar="FIG.png", help="where to draw the figure (default: DIR/act.png)")
    p.add_argument("--study", type=int, metavar="N",
                   help="instead of acting: measure colour-word vs 'the' attention over N instructions (JSON)")
    p.set_defaults(func=run)


def scene_for_seed(seed: int):
    """The scene ``--seed`` names, and an instruction made up for it (any pairing it allows)."""
    import numpy as np

    from ..data.tabletop import sample_episode

    if seed < 0:
        raise CLIError(f"--seed must be >= 0, got {seed}")
    scene, text, _, _ = sample_episode(np.random.default_rng([seed, 7]), split="all")
    return scene, text


def act(model, scene, instruction: str):
    """Check the instruction against the scene, then predict. Returns a dict with the words, the
    predicted cells and probabilities, the true cells, the attention weights and the token layout."""
    import numpy as np

    from ..data.tabletop import check_instruction, encode, tokenize
    from ..ops import softmax_forward

    colour, container = check_instruction(scene, instruction)        # ValueError on bad input
    ids = encode(instruction, model.config.max_words)[None]          # (1, L)
    logits, cache = model.forward(ids, scene.image[None].astype(model.dtype))  # (1, 2, N)
    probs, _ = softmax_forward(logits[0].astype(np.float64))        # (2, N)
    pick, place = (int(i) for i in probs.argmax(-1))
    return {"words": tokenize(instruction), "pick": pick, "place": place,
            "p_pick": float(probs[0, pick]), "p_place": float(probs[1, place]),
            "true_pick": scene.blocks[colour], "true_place": scene.containers[container],
            "weights": [w["self"][0] for w in model.attention_weights(cache)],
            "layout": model.layout(ids.shape[1])}


def describe(scene) -> str:
    def where(cell):
        return f"cell {cell} (row {cell // 4}, col {cell % 4})"
    parts = [f"{c} block at {where(cell)}" for c, cell in sorted(scene.blocks.items(), key=lambda kv: kv[1])]
    parts += [f"{k} at {where(cell)}" for k, cell in sorted(scene.containers.items(), key=lambda kv: kv[1])]
    return "; ".join(parts)


def attention_study(model, n: int, seed: int = 0, batch_size: int = 250) -> dict:
    """Over n fresh instructions ("all" pairings, so yellow-with-bowl too), per layer and head,
    the mean attention weight
      block -> colour word, block -> "the" before the colour, block -> every "the" (summed);
      pick  -> colour word, pick -> "the" (summed);  place -> container word, place -> "the" (summed);
      pick -> the patch of the block to pick, place -> the patch of the container; each action token's
      total weight on words and on patches;
    and the share of instructions where block -> colour beats block -> the (the article before it),
    "the" (before the colour) -> colour, and the weight one key would get if attention were uniform.
    "block" means the block noun ("block" or "cube") of the instruction."""
    import numpy as np

    from ..data.tabletop import COLOURS, CONTAINERS, WORD_TO_ID, sample_batch

    rng = np.random.default_rng([seed, 99])
    the_id, noun_ids = WORD_TO_ID["the"], {WORD_TO_ID["block"], WORD_TO_ID["cube"]}
    colour_ids = {WORD_TO_ID[c] for c in COLOURS}
    cont_ids = {WORD_TO_ID[k] for k in CONTAINERS}
    sums = None
    wins = None
    uniform = 0.0                                                 # the weight of one key if attention were uniform
    done = 0
    while done < n:
        b = min(batch_size, n - done)
        ids, images, actions, _ = sample_batch(rng, b, "all", model.config.max_words)
        _, cache = model.forward(ids, images.astype(model.dtype))
        w = np.stack([x["self"] for x in model.attention_weights(cache)], axis=1)  # (B, layers, H, T, T)
        lay = model.layout(ids.shape[1])
        w0, p0 = lay["words"].start, lay["patches"].start
        if sums is None:
            n_layers, n_heads = w.shape[1:3]
            keys = ["block->colour", "block->the_before_colour", "block->all_the", "pick->colour", "pick->all_the",
                    "place->container", "place->all_the", "pick->its_block_patch", "place->its_container_patch",
                    "pick->all_words", "pick->all_patches", "place->all_words", "place->all_patches",
                    "the_before_colour->colour"]
            sums = {k: np.zeros((n_layers, n_heads)) for k in keys}
            wins = np.zeros((n_layers, n_heads))
        for i in range(b):
            row = ids[i]
            noun = next(j for j, t in enumerate(row) if t in noun_ids)
            colour = next(j for j, t in enumerate(row) if t in colour_ids)
            cont = next(j for j, t in enumerate(row) if t in cont_ids)
            thes = [j for j, t in enumerate(row) if t == the_id]
            before = colour - 1 if colour > 0 and row[colour - 1] == the_id else None
            wi = w[i]                                             # (layers, H, T, T)
            uniform += 1.0 / (2 + int((row != 0).sum()) + lay["patches"].stop - lay["patches"].start)
            q_noun = wi[:, :, w0 + noun]                          # (layers, H, T)
            sums["block->colour"] += q_noun[..., w0 + colour]
            if before is not None:
                sums["block->the_before_colour"] += q_noun[..., w0 + before]
                wins += q_noun[..., w0 + colour] > q_noun[..., w0 + before]
                sums["the_before_colour->colour"] += wi[:, :, w0 + before, w0 + colour]
            sums["block->all_the"] += q_noun[..., [w0 + j for j in thes]].sum(-1)
            sums["pick->colour"] += wi[:, :, 0, w0 + colour]
            sums["pick->all_the"] += wi[:, :, 0, [w0 + j for j in thes]].sum(-1)
            sums["place->container"] += wi[:, :, 1, w0 + cont]
            sums["place->all_the"] += wi[:, :, 1, [w0 + j for j in thes]].sum(-1)
            sums["pick->its_block_patch"] += wi[:, :, 0, p0 + actions[i, 0]]
            sums["place->its_container_patch"] += wi[:, :, 1, p0 + actions[i, 1]]
            for a, name in ((0, "pick"), (1, "place")):
                sums[f"{name}->all_words"] += wi[:, :, a, lay["words"]].sum(-1)
                sums[f"{name}->all_patches"] += wi[:, :, a, lay["patches"]].sum(-1)
        done += b
    # every template puts "the" right before the colour, so block->the_before_colour has n terms
    out = {k: np.round(v / n, 4).tolist() for k, v in sums.items()}
    out["share_block_colour_beats_the"] = np.round(wins / n, 4).tolist()
    return {"n": n, "seed": seed, "indexing": "[layer][head]", "uniform_weight": round(uniform / n, 4), **out}


def run(args) -> int:
    from ..train.checkpoint import load_run

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
    scene, made_up = scene_for_seed(args.seed)
    instruction = args.instruction if args.instruction is not None else made_up
    print(f"scene {args.seed}: {describe(scene)}")
    print(f"instruction: {instruction}")
    res = act(r.model, scene, instruction)
    right = res["pick"] == res["true_pick"] and res["place"] == res["true_place"]
    print(f"action: pick cell {res['pick']} (p={res['p_pick']:.3f}), place cell {res['place']} "
          f"(p={res['p_place']:.3f})  -> {'right' if right else 'WRONG'} (the scene says pick "
          f"{res['true_pick']}, place {res['true_place']})")
    from ..viz.vision import save_act_figure
    save_act_figure(out, scene.image, res["words"], res["weights"], res["layout"], res["pick"], res["place"],
                    r.model.config.patch_size, title=f"npformer act {args.run} --seed {args.seed}",
                    probs=(res["p_pick"], res["p_place"]))
    print(f"figure: {out}")
    return 0


# -- the demo step ------------------------------------------------------------------------------
def demo_step(args) -> None:
    """Train the tabletop policy briefly, report held-out success, act on a held-out pairing, draw it."""
    import shutil

    from ..data.tasks import get_task
    from ..train.trainer import TrainConfig, Trainer
    from .demo import banner

    banner("5. Words and pixels in one sequence: a tiny vision-language-action policy (tabletop)")
    final = Path(args.runs) / "tabletop"
    staging = final.with_name(final.name + ".training")
    task = get_task("tabletop").create()
    cfg = TrainConfig(**{**task.default_train_config(), "steps": DEMO_STEPS, "warmup": min(50, DEMO_STEPS // 8),
                         "seed": args.seed, "eval_every": 200, "final_eval_n": DEMO_EVAL_N})
    trainer = Trainer.start(task, {}, cfg, staging, force=True)
    m = trainer.model.config
    print("scene: 32x32 RGB, a 4x4 grid of cells, 2-4 coloured blocks, a box and/or a bowl; instruction: "
          "\"put the red block in the box\" and variations")
    print(f"model: one encoder ({m.n_layers} layers, d_model {m.d_model}, {m.n_heads} heads, "
          f"{trainer.model.num_parameters():,} parameters) reads 2 action tokens + {m.max_words} word slots + "
          f"{m.n_cells} image patches as one sequence; the action tokens point at the pick and place cells")
    print(f"training: {cfg.steps} steps of {cfg.batch_size} fresh scenes (the demo's short budget; "
          f"`npformer train tabletop` runs {task.default_train_config()['steps']}). Instructions pairing "
          "yellow with the bowl are never trained on.", flush=True)
    metrics = trainer.run(progress=not args.no_progress)
    if final.exists():
        shutil.rmtree(final)
    staging.rename(final)
    held = metrics["held_out"]
    print(f"held-out scenes: success {held['success']:.1%} (pick and place both right, n={held['n']}); "
          f"never-trained yellow-with-bowl instructions: {held['yellow_bowl_success']:.1%}")
    seed = next(s for s in range(1000) if "yellow" in scene_for_seed(s)[0].blocks
                and "bowl" in scene_for_seed(s)[0].containers)             # the first scene with both
    scene, instruction = scene_for_seed(seed)[0], DEMO_INSTRUCTION
    res = act(trainer.model.eval(), scene, instruction)
    fig = final / "act.png"
    from ..viz.vision import save_act_figure
    save_act_figure(fig, scene.image, res["words"], res["weights"], res["layout"], res["pick"], res["place"],
                    m.patch_size, title=f"demo: {instruction}", probs=(res["p_pick"], res["p_place"]))
    right = res["pick"] == res["true_pick"] and res["place"] == res["true_place"]
    print(f"scene {seed}: {describe(scene)}")
    print(f"\"{instruction}\" -> pick cell {res['pick']}, place cell {res['place']} "
          f"({'right' if right else 'wrong'}); figure: {fig}")
    print(f"(the same: npformer act {final} --seed {seed} --instruction \"{instruction}\"; "
          f"any scene: --seed S)")


def _add_demo_step() -> None:
    from . import demo
    if all(name != "tabletop" for name, _ in demo.STEPS):
        demo.STEPS.append(("tabletop", demo_step))


_add_demo_step()
