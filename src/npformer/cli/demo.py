"""``npformer demo``: the main job of ``make demo``.

    1. the lesson: attention and the transformer block, explained and computed
    2. train the dates model (the paper's encoder-decoder, character level) with a progress bar
    3. translate a few dates with it (greedy decoding)
    4. draw its attention and say where the figure is
    5. train the tabletop vision-language-action policy with a shorter budget (DEMO_STEPS), report
       held-out success and act on one held-out yellow-with-bowl episode (``npformer act``)
    6. write the attention explorer (``npformer explore``) for the dates model and the tabletop policy
       and print the paths of the two HTML files

``STEPS`` lists the steps in order; each is a function ``step(args) -> None``.

The two training steps train into ``DIR.training`` and move it to ``DIR`` when it has finished. The demo
deletes only npformer's run directories (``train.rundir``): before it starts, any of runs/dates,
runs/tabletop and their ``.training`` and ``.old`` siblings that holds anything else, or is a link or a
file, stops it with one line naming that entry, exit code 2.
"""
from __future__ import annotations

import os
from pathlib import Path

# (source, the ISO date it means) shown by the translation step
EXAMPLES = [
    ("29 November 2026", "2026-11-29"),
    ("Sunday, 29 November 2026", "2026-11-29"),
    ("the 3rd of March, 1931", "1931-03-03"),
    ("Sat, Jul 4 1987", "1987-07-04"),
    ("21.09.2063", "2063-09-21"),
    ("NOVEMBER 29 2026", "2026-11-29"),
    ("February 14th 2000", "2000-02-14"),
]
ATTENTION_SOURCE = "29 November 2026"      # its ISO form is EXAMPLES[0][1], "2026-11-29"
# part -> (where it stands in the source, the decoder rows that write it in "2026-11-29")
ATTENTION_PARTS = {"year": ("2026", slice(0, 4)), "month": ("November", slice(5, 7)), "day": ("29", slice(8, 10))}

DEMO_STEPS = 400                    # the tabletop step's training budget (the task's default is longer)
DEMO_EVAL_N = 1000                  # held-out scenes per split in the tabletop step's final evaluation
DEMO_INSTRUCTION = "pick up the yellow cube and drop it into the bowl"   # the pairing never trained on

HELP = "the guided tour: lesson, train dates, translate, attention figure, tabletop, explorer"
DESCRIPTION = ("The guided tour, step by step: lesson (attention and the transformer block, explained and "
               "computed); train (the dates model, the paper's encoder-decoder); translate (a few dates with it); "
               "attention (draw its attention); tabletop (train the vision-language-action policy briefly and act "
               "on a held-out pairing); explore (write the attention explorer for both models).")


def add_arguments(p) -> None:
    p.add_argument("--runs", default="runs", metavar="DIR", help="where run directories go (default: runs)")
    p.add_argument("--steps", type=int, metavar="N", help="training steps for the dates model (default: the task's)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="training seed (default 0)")
    p.add_argument("--skip", action="append", default=[], metavar="STEP",
                   help=f"skip a step by name: {', '.join(name for name, _ in STEPS)} (repeatable)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (nor its lines in a log)")


def banner(text: str) -> None:
    print(f"\n{'=' * 78}\n{text}\n{'=' * 78}", flush=True)


def dates_dir(args) -> Path:
    return Path(args.runs) / "dates"


def tabletop_dir(args) -> Path:
    return Path(args.runs) / "tabletop"


def staging_dir(final: Path) -> Path:
    return final.with_name(final.name + ".training")


def old_dir(final: Path) -> Path:
    return final.with_name(final.name + ".old")


def replaced_dirs(args, steps: list[str]) -> list[Path]:
    """The directories the training steps among ``steps`` may delete: each run, its staging and old copy."""
    finals = [d for name, d in (("train", dates_dir(args)), ("tabletop", tabletop_dir(args))) if name in steps]
    return [p for final in finals for p in (final, staging_dir(final), old_dir(final))]


def move_into_place(staging: Path, final: Path) -> None:
    """The finished run in ``staging`` becomes ``final``; an earlier run there is deleted only after
    (and only when it is npformer's: ``rundir.remove_run_dir``)."""
    from ..train.rundir import remove_run_dir

    if os.path.lexists(final):
        old = old_dir(final)
        if os.path.lexists(old):
            remove_run_dir(old, "the demo")
        final.rename(old)
        staging.rename(final)
        remove_run_dir(old, "the demo")
    else:
        staging.rename(final)


# -- the steps --------------------------------------------------------------------------------------

def step_lesson(args) -> None:
    banner("1. The lesson: attention and the transformer block")
    from .. import lesson
    lesson.run()


def step_train(args) -> None:
    """Train dates into a staging directory and move it into place when it succeeds, so a failed or
    interrupted demo never destroys an earlier trained model in runs/dates."""
    banner("2. Training the paper's encoder-decoder to translate dates (character level)")
    from ..data.tasks import get_task
    from ..train.trainer import TrainConfig, Trainer

    final = dates_dir(args)
    staging = staging_dir(final)
    task = get_task("dates").create()
    overrides = {"seed": args.seed} if args.steps is None else {"seed": args.seed, "steps": args.steps}
    cfg = TrainConfig(**{**task.default_train_config(), **overrides})
    trainer = Trainer.start(task, {}, cfg, staging, force=True)
    m = trainer.model.config
    print(f"model: Transformer, {m.n_encoder_layers} encoder + {m.n_decoder_layers} decoder layers, "
          f"d_model {m.d_model}, {m.n_heads} heads, {trainer.model.num_parameters():,} parameters")
    print(f"data: dates 1900-2099 in 16 formats; 1 date in {task.settings.heldout_every} is never "
          f"trained on and is used for scoring")
    schedule = {"noam": "the paper's warmup then 1/sqrt(step) schedule",
                "cosine": f"{cfg.warmup} warmup steps then a cosine decay"}.get(cfg.schedule, cfg.schedule)
    print(f"training: {cfg.steps} steps of {cfg.batch_size} dates, Adam ({cfg.beta1}, {cfg.beta2}, {cfg.eps:g}), "
          f"{schedule}, label smoothing {cfg.label_smoothing}", flush=True)
    metrics = trainer.run(progress=not args.no_progress)
    move_into_place(staging, final)
    held = metrics["held_out"]
    print(f"held-out exact match: {held['exact_match']:.2%} of {held['n']} dates never seen in training "
          f"({metrics['elapsed_seconds']:.0f} s of training)")
    print(f"saved in {final}/ (model.safetensors, config.json, metrics.json, log.csv, curves.png)")


def step_translate(args) -> None:
    banner("3. Translating dates with the trained model (greedy decoding)")
    import numpy as np

    from ..data.vocab import pad_batch
    from ..decode import greedy, strip_eos
    from ..train.checkpoint import load_run

    run = load_run(dates_dir(args), task="dates")
    task, model = run.task, run.model
    v = task.tgt_vocab
    src = pad_batch([task.encode_source(s) for s, _ in EXAMPLES], v.pad_id)           # (B, S)
    bos = np.full((len(EXAMPLES), 1), v.bos_id, dtype=np.int64)                     # (B, 1)
    out = greedy(model, bos, task.max_target_len, src_ids=src, eos_id=v.eos_id)    # (B, N)
    width = max(len(s) for s, _ in EXAMPLES)
    for (source, want), ids in zip(EXAMPLES, strip_eos(out, v.eos_id), strict=True):
        got = task.decode_target(ids)
        print(f"  {source:<{width}}  ->  {got}   {'right' if got == want else 'WRONG, expected ' + want}")
    print(f"(any date: npformer translate {dates_dir(args)} \"4 July 1976\")")


def step_attention(args) -> None:
    banner("4. Looking inside: the dates model's attention")
    from . import main as cli_main

    fig = dates_dir(args) / "attention.png"
    code = cli_main(["attention", str(dates_dir(args)), ATTENTION_SOURCE, "--out", str(fig)])
    if code:
        raise RuntimeError(f"npformer attention failed with exit code {code}")
    print(f"attention figure: {fig}")
    print("Bottom row, cross-attention: each output character (a row) shows the source characters it read.")
    shares = cross_attention_shares(dates_dir(args), ATTENTION_SOURCE, ATTENTION_PARTS)
    print("Measured on this model (last decoder layer, mean of its heads): of the attention that the rows")
    print("writing each part of the date give to the source,")
    for part, share in shares.items():
        print(f"  the {part} digits put {share:.0%} on {ATTENTION_PARTS[part][0]!r}")


def cross_attention_shares(run_dir, source: str, parts: dict) -> dict:
    """For each part name -> (source substring, output slice): the share of the cross-attention of the
    output rows in the slice (last decoder layer, mean over heads) that falls on the substring."""

    from ..train.checkpoint import load_run

    run = load_run(run_dir, task="dates")
    task, model = run.task, run.model
    v = task.tgt_vocab
    tgt_in = v.encode(EXAMPLES[0][1], bos=True)[None]                              # (1, T): <bos> + the ISO date
    _, cache = model.forward(task.encode_source(source)[None], tgt_in)
    cross = model.attention_weights(cache)["decoder"][-1]["cross"][0].mean(axis=0)  # (T, S)
    shares = {}
    for name, (text, rows) in parts.items():
        start = source.index(text)
        on_part = cross[rows, start:start + len(text)].sum()
        shares[name] = float(on_part / cross[rows].sum())
    return shares


def step_tabletop(args) -> None:
    """Train the tabletop policy briefly, report held-out success, act on a held-out pairing, draw it."""
    banner("5. Words and pixels in one sequence: a tiny vision-language-action policy (tabletop)")
    from ..data.tabletop_policy import act, describe, scene_for_seed
    from ..data.tasks import get_task
    from ..train.trainer import TrainConfig, Trainer
    from ..viz.vision import save_act

    final = tabletop_dir(args)
    staging = staging_dir(final)
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
    move_into_place(staging, final)
    held = metrics["held_out"]
    print(f"held-out scenes: success {held['success']:.1%} (pick and place both right, n={held['n']}); "
          f"never-trained yellow-with-bowl instructions: {held['yellow_bowl_success']:.1%}")
    seed = yellow_bowl_seed()
    scene, instruction = scene_for_seed(seed)[0], DEMO_INSTRUCTION
    res = act(trainer.model.eval(), scene, instruction)
    fig = save_act(final / "act.png", scene.image, res, m.patch_size, title=f"demo: {instruction}")
    right = res["pick"] == res["true_pick"] and res["place"] == res["true_place"]
    print(f"scene {seed}: {describe(scene)}")
    print(f"\"{instruction}\" -> pick cell {res['pick']}, place cell {res['place']} "
          f"({'right' if right else 'wrong'}); figure: {fig}")
    print(f"(the same: npformer act {final} --seed {seed} --instruction \"{instruction}\"; "
          f"any scene: --seed S)")


def yellow_bowl_seed() -> int:
    """The first scene seed with a yellow block and a bowl (the pairing tabletop never trains on)."""
    from ..data.tabletop_policy import scene_for_seed

    return next(s for s in range(1000) if "yellow" in scene_for_seed(s)[0].blocks
                and "bowl" in scene_for_seed(s)[0].containers)


def step_explore(args) -> None:
    """Write the attention explorer for the dates model and the tabletop policy; print where they are."""
    banner("6. Exploring attention in the browser (npformer explore)")
    from ..explore.payload import open_explorer
    from ..explore.render import render_html
    from ..files import atomic_write_bytes

    jobs: list[tuple[Path, list[dict], str]] = [(dates_dir(args), [{"text": ATTENTION_SOURCE}],
             f'npformer explore {dates_dir(args)} "{ATTENTION_SOURCE}"'),
            (tabletop_dir(args), [{"seed": yellow_bowl_seed(), "instruction": DEMO_INSTRUCTION}],
             f'npformer explore {tabletop_dir(args)} --seed {yellow_bowl_seed()} '
             f'--instruction "{DEMO_INSTRUCTION}"')]
    for run_dir, inputs, command in jobs:
        if not (run_dir / "model.safetensors").is_file():
            print(f"(no trained run in {run_dir}: skipped)")
            continue
        path = run_dir / "explore.html"
        atomic_write_bytes(path, render_html(open_explorer(run_dir).payload(inputs)).encode("utf-8"))
        print(f"open in a browser: {path.resolve()}   (the same: {command})")
    print(f"(new inputs typed into the page: npformer explore {dates_dir(args)} --serve)")


STEPS = [("lesson", step_lesson), ("train", step_train), ("translate", step_translate),
         ("attention", step_attention), ("tabletop", step_tabletop), ("explore", step_explore)]


def run(args) -> int:
    from ..train.rundir import check_removable
    from . import CLIError

    names = [n for n, _ in STEPS]
    unknown = [s for s in args.skip if s not in names]
    if unknown:
        raise CLIError(f"unknown step {unknown[0]!r} for --skip; steps: {', '.join(names)}")
    if args.steps is not None and args.steps < 1:
        raise CLIError(f"--steps must be >= 1, got {args.steps}")
    for d in replaced_dirs(args, [n for n in names if n not in args.skip]):
        if os.path.lexists(d):
            check_removable(d, "the demo")                              # before training for minutes
    for name, step in STEPS:
        if name not in args.skip:
            step(args)
    print("\ndone.")
    return 0
