"""What limits the gripper policy: the measurements docs/vla.md quotes beside its targets.

    python benchmarks/gripper_why.py tokenizer          # the expert acting through the tokenizer's round trip
    python benchmarks/gripper_why.py tokens RUN [RUN]   # held-out teacher-forced token accuracy of trained runs
    python benchmarks/gripper_why.py probe gripper      # can the policy learn where the gripper is? (400 steps)
    python benchmarks/gripper_why.py probe block        # ... where the named block is? (400 steps)
    python benchmarks/gripper_why.py probe gripper raw  # ... with a ViT's usual start instead of the task's
    python benchmarks/gripper_why.py ties RUN [N]       # batched against one-at-a-time episodes (N = 100)
    python benchmarks/gripper_why.py grasp RUN [N]      # where the policy closes, and where it should (N = 200)
    python benchmarks/gripper_why.py heldout RUN [N]    # where yellow-with-bowl episodes fail (N = 200)
    python benchmarks/gripper_why.py release RUN        # "done" for "open": the commonest plain-split failure

- ``tokenizer``: 500 evaluation episodes per bin count (8, 16, 32, 256), with and without the perturbations,
  played by the scripted expert whose every action goes through encode and decode first: the resolution's
  own cost in success.
- ``tokens``: on 40 demonstration episodes recorded from seed 999 (not a run's demo_seed unless set so),
  each slot's accuracy (argmax over its allowed ids against the expert's token) and whether the move's sign
  is right.
- ``probe``: the gripper task's default policy (its initialisation included) trained for 400 steps of 64
  fresh scenes on one binary question, "is the gripper (or the named block) in the right half of the
  table?", asked as the dx token (bin 0 or the last); accuracy on 300 held-out scenes every 50 steps.
  ``raw``: the patch embedding and its positions as ``PatchEmbedding`` starts them (uniform weights and
  bias, positions N(0, 0.02)) instead of the task's start (``GripperTask.build_model``).
- ``grasp``: episodes 0..N-1 of ``npformer eval RUN --seed 0``, watched step by step (``episodes.play``'s
  ``watch``): every grasp attempt (the policy closes an open, empty gripper), how far the gripper was from
  the named block's centre (in block sides; a pick needs half a side or less) and what it picked; and
  every step where the run's expert (its setting ``expert``) would close on the named block, whether
  the policy closed there too, and how far its move was from the expert's (action units, the larger axis).
- ``heldout``: episodes 0..N-1 of the yellow-with-bowl split (as ``npformer eval RUN --seed 0`` plays
  them): which block the policy grasps first (the yellow one, another, none), and, while it holds the
  yellow block in a scene with both containers, which container its moves head for (the one the move
  brings nearer).
- ``release``: the gripper command the greedy policy picks (teacher-forced, ``act_batch`` on the recorded
  image and instruction) at the steps where the expert releases the block over the container and where
  it says "done" (``data.gripper.release_rows``): on 300 clean episodes recorded from seed 999 and on the
  first 1,200 such steps of the run's own demonstrations (equal rates: not overfitting); then the
  closed-loop steps of ``npformer eval RUN --seed 0``'s first 200 test episodes where the policy said
  "done" still holding the named block, with the probability it gave "done" there.
- ``ties``: episodes 0..N-1 of ``npformer eval RUN --seed 0``, played batched and then one at a time:
  how many end differently (steps or outcome).
"""
import sys

import numpy as np

from npformer.data.gripper import GripperTask
from npformer.sim.demos import record_demos
from npformer.sim.env import GripperEnv
from npformer.sim.episodes import EVAL_STREAM
from npformer.sim.expert import EXPERTS, expert_action
from npformer.sim.render import render
from npformer.sim.tokens import ActionTokenizer
from npformer.sim.world import MAX_MOVE, episode_seed, new_episode


def tokenizer() -> None:
    for bins in (8, 16, 32, 256):
        tok = ActionTokenizer(bins, [-1, -1], [1, 1])
        for perturb in (False, True):
            wins = 0
            for i in range(500):
                env = GripperEnv()
                _, info = env.reset(seed=episode_seed(0, EVAL_STREAM, i), options={"perturb": perturb})
                while True:
                    a = expert_action(info)
                    moves, gripper = tok.decode(tok.encode(a["move"][None], np.array([a["gripper"]])))
                    _, _, terminated, truncated, info = env.step({"move": moves[0], "gripper": int(gripper[0])})
                    if terminated or truncated:
                        break
                wins += info["success"]
            print(f"{bins:4d} bins, perturb {perturb!s:5}: the expert wins {wins} of 500")


def tokens(runs: list[str]) -> None:
    from npformer.train.checkpoint import load_run

    for run in runs:
        r = load_run(run, task="gripper")
        task, model = r.task, r.model
        demos = record_demos(40, 999, noise=task.settings.noise, flip=task.settings.flip,
                             perturb=task.settings.perturb)
        rows = np.arange(len(demos))
        _, images, actions_in, targets = task.examples(demos, rows)
        words = task.reader.inputs(demos.texts(rows))
        logits, _ = model.forward(words, images.astype(model.dtype), actions_in)      # (M, 3, V_a)
        bins = task.settings.action_bins
        sign = [float(((logits[:, j, :bins].argmax(-1) >= bins // 2) == (targets[:, j] >= bins // 2)).mean())
                for j in (0, 1)]
        acc = task.token_accuracy(model, 40, 999)
        print(f"{run}: step {r.step}, {bins} bins: accuracy dx {acc['dx']:.3f} dy {acc['dy']:.3f} "
              f"gripper {acc['gripper']:.3f}; the move's sign right: dx {sign[0]:.3f} dy {sign[1]:.3f}")


def probe(what: str, raw: bool = False) -> None:
    from npformer.train.clip import clip_by_global_norm
    from npformer.train.optim import AdamW

    task = GripperTask.create({"demos": 20})
    model = task.build_model(task.model_config({}), np.random.default_rng(0))
    if raw:
        pe = model.patch_embed.params
        init = np.random.default_rng(1)
        bound = 1 / np.sqrt(pe["weight"][0].size)
        pe["weight"][:] = init.uniform(-bound, bound, pe["weight"].shape)
        pe["bias"][:] = init.uniform(-bound, bound, pe["bias"].shape)
        pe["pos_embed"][:] = init.standard_normal(pe["pos_embed"].shape) * 0.02
    last, bos = task.settings.action_bins - 1, task.settings.action_bins + 3

    def scenes(rng, n):
        images, texts, xs = [], [], []
        for _ in range(n):
            w = new_episode(rng)
            images.append(render(w))
            texts.append(w.instruction)
            xs.append(w.gripper[0] if what == "gripper" else w.blocks[w.target[0]][0])
        targets = np.stack([np.where(np.array(xs) > 0.5, last, 0), np.zeros(n, int), np.full(n, last + 1)], 1)
        actions_in = np.concatenate([np.full((n, 1), bos), targets[:, :2]], 1)
        return task.reader.inputs(texts), np.stack(images).astype(np.float32) / 255, actions_in, targets

    lr = 2e-3
    opt = AdamW(model.state_dict(), lr=lr, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.01,
                decay=lambda k, p: p.ndim >= 2)
    rng = np.random.default_rng(0)
    held = scenes(np.random.default_rng(5), 300)
    for step in range(1, 401):
        _, grads = model.loss(*scenes(rng, 64))
        clip_by_global_norm(grads, 1.0)
        opt.step(grads, lr=lr)
        if step % 50 == 0:
            model.eval()
            logits, _ = model.forward(*held[:3])
            model.train()
            right = ((logits[:, 0, :last + 1].argmax(-1) > last // 2) == (held[3][:, 0] > last // 2)).mean()
            label = f"{what} (raw start)" if raw else what
            print(f"{label}: step {step}: right half or not, held-out accuracy {right:.3f}", flush=True)


def grasp(run: str, n: int) -> None:
    from npformer.sim.episodes import run_episodes
    from npformer.sim.world import BLOCK_SIZE, GRIPPER_CLOSE, PICK_RADIUS
    from npformer.train.checkpoint import load_run

    r = load_run(run, task="gripper")
    policy = r.task.policy(r.model)
    expert = EXPERTS[r.task.settings.expert]                    # the run's own expert
    attempts, arrivals = [], []          # (distance in block sides, what it picked); (closed?, move error)

    def watch(i, info, move, command):
        colour = info["target"][0]
        gx, gy, closed = info["gripper"]
        if closed or info["held"] is not None:
            return
        bx, by = info["blocks"][colour]
        if command == GRIPPER_CLOSE:                     # the step moves first, then closes where it landed
            px, py = np.clip(np.array([gx, gy]) + np.clip(move, -1, 1) * MAX_MOVE, 0.0, 1.0)
            d = float(np.hypot(px - bx, py - by))
            attempts.append((d / BLOCK_SIZE, d <= PICK_RADIUS))
        want = expert(info)
        if want["gripper"] == GRIPPER_CLOSE:
            err = float(np.abs(np.clip(move, -1, 1) - want["move"]).max())
            arrivals.append((command == GRIPPER_CLOSE, err))

    results, summary = run_episodes(policy.act_batch, n, 0, watch=watch)
    d = np.array([a[0] for a in attempts])
    print(f"{run}: {n} episodes, {summary['outcomes']['success']} successes; "
          f"{sum(r.outcome == 'never_grasped' for r in results)} never_grasped")
    if len(d):
        print(f"grasp attempts (closing an open, empty gripper): {len(d)}, {np.mean(d <= 0.5):.1%} within half a "
              f"block side of the named block's centre where the step's move lands; "
              f"distance in block sides: median {np.median(d):.2f}, quartiles {np.quantile(d, 0.25):.2f}-"
              f"{np.quantile(d, 0.75):.2f}")
    if arrivals:
        closed = np.array([a[0] for a in arrivals])
        err = np.array([a[1] for a in arrivals])
        print(f"steps where the expert would close on the named block: {len(arrivals)}; the policy closed at "
              f"{closed.mean():.1%} of them; its move's error there (action units, larger axis): median "
              f"{np.median(err):.2f}, {np.mean(err > PICK_RADIUS / MAX_MOVE):.1%} off by more than a pick radius")


def heldout(run: str, n: int) -> None:
    from npformer.sim.episodes import run_episodes
    from npformer.train.checkpoint import load_run

    r = load_run(run, task="gripper")
    policy = r.task.policy(r.model)
    first: dict = {}                      # episode -> the colour grasped first
    heads = {"bowl": 0, "box": 0}         # moves while holding yellow, both containers present

    def watch(i, info, move, command):
        if info["grasped"] and i not in first:
            first[i] = info["grasped"][0]
        if info["held"] == "yellow" and len(info["containers"]) == 2:
            gx, gy, _ = info["gripper"]
            d = {k: float(np.hypot(*(np.array(c) - (np.array([gx, gy]) + np.clip(move, -1, 1) * MAX_MOVE))))
                 - float(np.hypot(c[0] - gx, c[1] - gy)) for k, c in info["containers"].items()}
            heads[min(d, key=d.get)] += 1

    results, summary = run_episodes(policy.act_batch, n, 0, split="yellow_bowl", watch=watch)
    colours = [first.get(i) for i in range(n)]
    print(f"{run}: {n} yellow-with-bowl episodes, {summary['outcomes']} (truncated {summary['truncated']})")
    print(f"first grasp: yellow {colours.count('yellow')}, another block "
          f"{sum(c not in (None, 'yellow') for c in colours)}, none {colours.count(None)}")
    total = sum(heads.values())
    if total:
        print(f"moves while holding yellow, both containers on the table: {total}, toward the bowl "
              f"{heads['bowl'] / total:.1%}, toward the box {heads['box'] / total:.1%}")


def release(run: str) -> None:
    from npformer.data.gripper import release_rows
    from npformer.sim.episodes import run_episodes
    from npformer.sim.world import GRIPPER_CLOSE, GRIPPER_DONE, GRIPPER_OPEN
    from npformer.train.checkpoint import load_run

    r = load_run(run, task="gripper")
    policy = r.task.policy(r.model)
    names = {GRIPPER_OPEN: "open", GRIPPER_DONE: "done"}
    for label, demos, most in (("held-out (seed 999, clean)", record_demos(300, 999, noise=0.0, flip=0.0, perturb=0.0,
                                                                                expert=r.task.settings.expert),
                                None), ("its own demonstrations", r.task.demos(), 1200)):
        rows = np.flatnonzero(release_rows(demos))[:most]
        picked = np.concatenate([policy.act_batch(demos.images[rows[s:s + 256]], demos.texts(rows[s:s + 256]))[1]
                                 for s in range(0, len(rows), 256)])
        for command, name in names.items():
            mine = demos.gripper[rows] == command
            counts = np.bincount(picked[mine], minlength=3)
            print(f"{run}, {label}: {mine.sum()} steps where the expert says {name}: the policy says open "
                  f"{counts[GRIPPER_OPEN]}, close {counts[GRIPPER_CLOSE]}, done {counts[GRIPPER_DONE]}")
    wrong: list[float] = []
    row = [0]                                # the live episode's row in the step's batch: play() watches the
                                             # live episodes in the order it handed them to act

    def act(images, instructions):
        row[0] = 0
        return policy.act_batch(images, instructions)

    def watch(i, info, move, command):
        if command == GRIPPER_DONE and info["held"] == info["target"][0]:
            wrong.append(float(policy.last["probs"][row[0], 2].max()))
        row[0] += 1

    results, _ = run_episodes(act, 200, 0, watch=watch)
    print(f"{run}: closed loop, 200 test episodes: {sum(e.outcome == 'held_at_end' for e in results)} held_at_end; "
          f"{len(wrong)} steps said done holding the named block, its probability there: "
          f"{', '.join(f'{p:.2f}' for p in sorted(wrong))}")


def ties(run: str, n: int) -> None:
    from npformer.sim.episodes import play, run_episodes
    from npformer.train.checkpoint import load_run

    r = load_run(run, task="gripper")
    policy = r.task.policy(r.model)
    batched, _ = run_episodes(policy.act_batch, n, 0)
    differ = 0
    for i in range(n):
        alone, _ = play(policy.act_batch, [episode_seed(0, EVAL_STREAM, i)], [{"split": "test", "perturb": False}])
        differ += (alone[0].steps, alone[0].outcome) != (batched[i].steps, batched[i].outcome)
    print(f"{run}: {differ} of {n} episodes end differently played batched and one at a time")


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in ("tokenizer", "tokens", "probe", "ties", "grasp", "heldout", "release"):
        sys.exit(__doc__)
    if sys.argv[1] == "tokenizer":
        tokenizer()
    elif sys.argv[1] == "tokens":
        tokens(sys.argv[2:])
    elif sys.argv[1] == "grasp":
        grasp(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 200)
    elif sys.argv[1] == "heldout":
        heldout(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 200)
    elif sys.argv[1] == "release":
        release(sys.argv[2])
    elif sys.argv[1] == "ties":
        ties(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 100)
    else:
        probe(sys.argv[2] if len(sys.argv) > 2 else "block", raw="raw" in sys.argv[3:])
