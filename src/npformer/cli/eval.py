"""``npformer eval DIR``: score a trained run on its task's held-out data and print the metrics as JSON.

The default draw (the run's seed, the task's default size) is the one training ended with, so
``npformer eval runs/dates`` reproduces metrics.json's held-out numbers.

``npformer eval RUN --instructions FILE [FILE ...]`` (tabletop runs) scores the policy on instructions of
your own, one per line as ``instruction<TAB>colour<TAB>container``, e.g.
``grab the crimson cube and drop it in the crate<TAB>red<TAB>box``: for each line, --n fresh scenes
(default 200) that hold a block of that colour and that container, scored as ``npformer eval`` scores
a scene. It prints the overall success (the mean over the lines of all the files), each file's, each
line's, and how many words the model's own vocabulary did not know. A file's lines get the same scenes
whichever files stand beside it. The scratch policy reads such a word as its [UNK] token and is scored
anyway (a run saved before its word table had an [UNK] row reads it as padding, and the JSON's
"unknown_as" says so); the MiniLM policy reads any text. ``npformer act`` still refuses an unknown
word for the scratch policy. The package's paraphrase set is in ``npformer/data/paraphrases/``.

On a gripper run (``npformer train gripper``) the policy acts over time: ``npformer eval RUN [--n N]
[--seed S] [--perturb]`` plays N fresh episodes of each split, "test" and the held-out "yellow_bowl"
(default 500 each; episode i from (S, the evaluation stream, i)), batched, one forward per step for
every live episode, and prints success and its Wilson interval (z = 1.96), yellow_bowl_success and its
interval, the outcome counts, how many were truncated and the mean episode length. ``--perturb`` turns on
the world's perturbations (the target moves once before the grasp; a held block slips). ``--open-loop``
executes the chunk predicted from the first frame, blind (``--set chunk=K`` runs; the episode ends when
the plan runs out), and adds the path's smoothness (``data.gripper_chunks``). With
``--instructions FILE ...`` each line gets N / lines episodes (at least one; default N 500) whose scene
holds its block and container; the overall success is the mean over the lines.
"""
from __future__ import annotations

import json

HELP = "score a trained run on held-out data (JSON)"
DESCRIPTION = "Evaluate a run directory on its task's held-out split; prints JSON."


def add_arguments(p) -> None:
    p.add_argument("run", metavar="DIR", help="a run directory written by npformer train")
    p.add_argument("--seed", type=int, metavar="S", help="seed of the held-out draw (default: the run's seed)")
    p.add_argument("--n", type=int, metavar="N",
                   help="held-out examples (default: the task's); with --instructions, scenes per line (default 200)")
    p.add_argument("--instructions", metavar="FILE", nargs="+",
                   help="tabletop: score each line 'instruction<TAB>colour<TAB>container' of each FILE on fresh "
                        "scenes; the overall success is the mean over all the lines")
    p.add_argument("--open-loop", action="store_true",
                   help="gripper: execute the chunk predicted from the first frame, blind (a chunk run's plan; the "
                        "episode ends when it runs out)")
    p.add_argument("--perturb", action="store_true",
                   help="gripper: episodes with the world's perturbations (the target moves once; held blocks slip)")


def run(args) -> int:
    from ..train.checkpoint import load_run
    from . import CLIError

    if args.n is not None and args.n < 1:
        raise CLIError(f"--n must be >= 1, got {args.n}")
    if args.instructions is not None:
        return _instructions(args)
    r = load_run(args.run)
    seed = _seed(r, args)
    if r.config["task"] == "gripper" and args.open_loop:
        from ..data.gripper_chunks import evaluate_chunks

        n = r.task.settings.eval_size if args.n is None else args.n
        metrics = evaluate_chunks(r.task, r.model.eval(), n, seed, perturb=args.perturb, open_loop=True)
    elif r.config["task"] == "gripper":
        metrics = r.task.evaluate(r.model, n=args.n, seed=seed, perturb=args.perturb)
    elif args.open_loop:
        raise CLIError(f"--open-loop is an option of gripper runs; {args.run} holds a {r.config['task']!r} run")
    elif args.perturb:
        raise CLIError(f"--perturb is an option of gripper runs; {args.run} holds a {r.config['task']!r} run")
    else:
        metrics = r.task.evaluate(r.model, n=args.n, seed=seed)
    print(json.dumps({"task": r.config["task"], "run": str(r.path), "step": r.step, "seed": seed,
                      "primary_metric": r.task.primary_metric, **metrics}, indent=2))
    return 0


def _seed(r, args) -> int:
    """--seed, or the run's own: config.json's train.seed, a non-negative int."""
    from ..settings import FileFormatError
    from ..train.checkpoint import CONFIG

    if args.seed is not None:
        return args.seed
    seed = r.config["train"].get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise FileFormatError(f"{r.path / CONFIG}: train.seed must be a non-negative int, got {seed!r}")
    return seed


def _task_of(run_dir) -> str:
    """The task config.json names (read_config's checks and one-line errors)."""
    from ..train.checkpoint import read_config

    return read_config(run_dir)["task"]


def _instructions(args) -> int:
    """``--instructions FILE [FILE ...]``: each file's and each line's success on fresh scenes, as JSON."""
    from ..data.tabletop_policy import evaluate_instruction_files, read_instructions
    from ..train.checkpoint import load_run
    from . import CLIError

    files = [(str(f), read_instructions(f)) for f in args.instructions]  # a bad file fails before the model loads
    r = load_run(args.run, task=("gripper" if _task_of(args.run) == "gripper" else "tabletop"))
    seed = _seed(r, args)
    if r.config["task"] == "gripper":
        lines = [(source, *line) for source, file_lines in files for line in file_lines]
        res = r.task.evaluate_lines(r.model, lines, n=500 if args.n is None else args.n, seed=seed,
                                    perturb=args.perturb)
    elif args.perturb:
        raise CLIError("--perturb is an option of gripper runs")
    else:
        res = evaluate_instruction_files(r.model, files, n=200 if args.n is None else args.n, seed=seed)
    print(json.dumps({"task": r.config["task"], "run": str(r.path), "step": r.step, "seed": seed,
                      "instructions": [str(f) for f in args.instructions], **res}, indent=2))
    return 0
