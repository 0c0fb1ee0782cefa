"""Which change to the gripper recipe makes the policy learn sooner: a quick trial of variants in torch.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/gripper_recipes.py VARIANT
        [--expert settle|straight] [--steps 2500] [--episodes 100] [--seed 0] [--every 500]

VARIANT is one of:
    default     the task's policy and recipe (3 layers, lr 2e-3, 1,000 demonstrations, the goal head)
    no-goal     the same without the goal head (``--set goal=false``)
    mask        the default with half the instructions of steps that head for the block read with the
                container's name masked (``--set container_mask=0.5``)
    deep        6 layers, lr 1e-3, 3,000 demonstrations, the goal head
    deep-no-goal  both

The goal head (``ActionLM``'s ``goal_head``, the task's ``goal`` setting) is a pointer from the step's
first action slot to every patch, trained toward the patch of the place the expert heads for
(``sim.expert.heading_for``: the named block until it is held, then the named container), each goal one
more scored target beside the action tokens, as ``npformer train gripper`` trains it. Acting never
reads it.

``--expert`` picks the expert that labels the demonstrations (the task's setting ``expert``):
    settle      ``sim.expert_action``: moves axis by axis, closes or opens only once within half the
                world's tolerance of its goal
    straight    ``sim.expert.straight_action``, the expert before 2026-12-02: moves straight for its goal
                and closes (opens) on the step it arrives, so the policy must land within the pick
                radius with the very move it closes on

Each variant starts from the task's own model (``GripperTask.build_model``, its initialisation
included), carried to torch by ``to_torch`` and trained there (AdamW, betas 0.9/0.98, weight decay 0.01
on matrices, warmup 100 then cosine, gradients clipped at 1, batch 64, one thread), because torch trains
this model in about 0.8x npformer's time here and the point is the recipe, not the engine. Printed, one
JSON line each: every ``--every`` steps, the held-out teacher-forced token accuracy on 40 demonstration
episodes of seed 999 (dx, dy, gripper; the moves' sign right; the goal head's accuracy); at the end,
success over ``--episodes`` fresh evaluation episodes of the test split, the yellow-with-bowl split and
the test split with perturbations (episode i from (seed 0, the evaluation stream, i), as ``npformer
eval --n N --seed 0`` draws them), played greedily by the trained torch policy.
"""
from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np

VARIANTS = {"default": {"layers": 3, "lr": 2e-3, "data": {}},
            "no-goal": {"layers": 3, "lr": 2e-3, "data": {"goal": False}},
            "mask": {"layers": 3, "lr": 2e-3, "data": {"container_mask": 0.5}},
            "deep": {"layers": 6, "lr": 1e-3, "data": {"demos": 3000}},
            "deep-no-goal": {"layers": 6, "lr": 1e-3, "data": {"demos": 3000, "goal": False}}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("variant", choices=sorted(VARIANTS))
    ap.add_argument("--expert", choices=("settle", "straight"), default="settle")
    ap.add_argument("--steps", type=int, default=2500)
    ap.add_argument("--episodes", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0, help="the model's and the batches' seed")
    ap.add_argument("--every", type=int, default=500)
    args = ap.parse_args()
    if args.steps < 1 or args.episodes < 0 or args.every < 1:
        ap.error("--steps and --every must be >= 1, --episodes >= 0")

    import torch
    import torch.nn.functional as F

    from npformer.data.gripper import GripperTask, goal_cells, trim_padding
    from npformer.interop.torch import to_torch
    from npformer.sim.demos import record_demos
    from npformer.sim.episodes import run_episodes

    torch.set_num_threads(1)
    v = VARIANTS[args.variant]
    task = GripperTask.create({**v["data"], "expert": args.expert})
    model = task.build_model(task.model_config({"n_layers": v["layers"]}), np.random.default_rng(args.seed))
    s = task.settings
    tm = to_torch(model).train()
    bins = s.action_bins

    def forward(words, images, actions_in):
        """(action logits (B, A, V_a), goal logits (B, N) or None), as the task's loss reads them."""
        words, images = torch.as_tensor(trim_padding(words)), torch.as_tensor(images)
        if not s.goal:
            return tm(words, images, torch.as_tensor(actions_in)), None
        return tm(words, images, torch.as_tensor(actions_in), goal=True)

    params = list(tm.parameters())
    opt = torch.optim.AdamW([{"params": [q for q in params if q.ndim >= 2], "weight_decay": 0.01},
                             {"params": [q for q in params if q.ndim < 2], "weight_decay": 0.0}],
                            lr=v["lr"], betas=(0.9, 0.98), eps=1e-9)
    held = record_demos(40, 999, noise=s.noise, flip=s.flip, split="train", perturb=s.perturb,
                        expert=s.expert)
    hw, hi, ha, ht = task.examples(held, np.arange(len(held)))
    held_goals = goal_cells(held.goals)
    rng = np.random.default_rng(args.seed)
    t0 = time.time()
    for step in range(1, args.steps + 1):
        words, images, actions_in, targets, *goals = task.train_batch(rng, 64).arrays     # the task's batch
        logits, scores = forward(words, images, actions_in)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), torch.as_tensor(targets).reshape(-1),
                               reduction="sum")
        if scores is not None:                  # each goal one more scored target, as the task's loss
            loss = loss + F.cross_entropy(scores, torch.as_tensor(goals[0]), reduction="sum")
        loss = loss / (targets.size + (len(targets) if scores is not None else 0))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        lr = v["lr"] * (step / 100 if step < 100
                        else 0.5 * (1 + math.cos(math.pi * (step - 100) / max(1, args.steps - 100))))
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()
        if step % args.every == 0 or step == args.steps:
            tm.eval()
            with torch.no_grad():
                lo, hs = forward(hw, hi, ha)
            tm.train()
            lo = lo.numpy()
            sign = [float(((lo[:, j, :bins].argmax(-1) >= bins // 2) == (ht[:, j] >= bins // 2)).mean())
                    for j in (0, 1)]
            acc = [float((lo[:, j].argmax(-1) == ht[:, j]).mean()) for j in range(3)]
            row = {"variant": args.variant, "step": step, "loss": round(float(loss.detach()), 3),
                   "dx": round(acc[0], 3), "dy": round(acc[1], 3), "gripper": round(acc[2], 3),
                   "sign_dx": round(sign[0], 3), "sign_dy": round(sign[1], 3), "seconds": round(time.time() - t0, 1)}
            if hs is not None:
                row["pointer"] = round(float((hs.argmax(-1).numpy() == held_goals).mean()), 3)
            print(json.dumps(row), flush=True)
    if not args.episodes:
        return
    tm.eval()
    tok = task.tokenizer

    def act_batch(images, instructions):
        words = task.reader.inputs(instructions)
        images = np.asarray(images, np.float32) / np.float32(255)
        a = np.full((len(words), 1), bins + 3, dtype=np.int64)
        for j in range(3):
            with torch.no_grad():
                lo = forward(words, images, a)[0][:, j].numpy()
            ids = np.arange(bins) if j < 2 else np.arange(bins, bins + 3)          # the slot's allowed ids
            a = np.concatenate([a, ids[lo[:, ids].argmax(-1)][:, None]], axis=1)
        return tok.decode(a[:, 1:])

    for split, perturb in (("test", False), ("yellow_bowl", False), ("test", True)):
        _, r = run_episodes(act_batch, args.episodes, 0, split=split, perturb=perturb)
        print(json.dumps({"variant": args.variant, "split": split, "perturb": perturb, "n": args.episodes,
                          "success": r["success"], "outcomes": r["outcomes"],
                          "seconds": round(time.time() - t0, 1)}), flush=True)


if __name__ == "__main__":
    main()
