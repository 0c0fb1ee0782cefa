"""``npformer demo``: the main job of ``make demo``.

    1. the lesson: attention and the transformer block, explained and computed
    2. train the dates model (the paper's encoder-decoder, character level) with a progress bar
    3. translate a few dates with it (greedy decoding)
    4. draw its attention and say where the figure is

``STEPS`` lists the steps in order; each is a function ``step(args) -> None``. Another part of
npformer adds its own step by appending to ``STEPS`` (or inserting where it belongs).
"""
from __future__ import annotations

import shutil
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


def register(subparsers) -> None:
    p = subparsers.add_parser("demo", help="the guided tour: lesson, train dates, translate, attention figure",
                              description="Run the lesson, train the dates model, translate a few dates "
                                          "and draw the model's attention.")
    p.add_argument("--runs", default="runs", metavar="DIR", help="where run directories go (default: runs)")
    p.add_argument("--steps", type=int, metavar="N", help="training steps for the dates model (default: the task's)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="training seed (default 0)")
    p.add_argument("--skip", action="append", default=[], metavar="STEP",
                   help="skip a step by name: lesson, train, translate, attention (repeatable)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def banner(text: str) -> None:
    print(f"\n{'=' * 78}\n{text}\n{'=' * 78}", flush=True)


def dates_dir(args) -> Path:
    return Path(args.runs) / "dates"


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
    staging = final.with_name(final.name + ".training")
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
    if final.exists():
        old = final.with_name(final.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        final.rename(old)
        staging.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        staging.rename(final)
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
    for (source, want), ids in zip(EXAMPLES, strip_eos(out, v.eos_id)):
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
    import numpy as np

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


STEPS = [("lesson", step_lesson), ("train", step_train), ("translate", step_translate),
         ("attention", step_attention)]


def run(args) -> int:
    from . import CLIError

    names = [n for n, _ in STEPS]
    unknown = [s for s in args.skip if s not in names]
    if unknown:
        raise CLIError(f"unknown step {unknown[0]!r} for --skip; steps: {', '.join(names)}")
    if args.steps is not None and args.steps < 1:
        raise CLIError(f"--steps must be >= 1, got {args.steps}")
    for name, step in STEPS:
        if name not in args.skip:
            step(args)
    print("\ndone.")
    return 0
