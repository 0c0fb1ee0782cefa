"""DAgger (Ross, Gordon and Bagnell, 2011) for the gripper task: ``--set dagger=ROUNDS``.

Round 1 trains on the expert's demonstrations (``demos // ROUNDS`` episodes, or ``labels // ROUNDS``
recorded steps when ``labels`` is set, recorded with the task's noise settings). At the end of each
round the policy drives fresh episodes of the demonstrations' split (``demo_split``), greedy, and the
task's expert (``expert``) labels every state it visits; the policy then keeps training on the aggregate, as DAgger's
last step (beta = 0 after round 1). Each later round collects as many labelled states as round 1
recorded, so the labels split evenly over the rounds and a run with ROUNDS rounds sees about as many
(state, action) pairs as plain cloning of ``demos`` episodes.

A round is ``round_steps`` optimizer steps (0: the recipe's steps / ROUNDS). The round count lives in
the task and restarts with the process: a resumed DAgger run does not repeat the rounds it already
drove. It runs with the NumPy engine (the torch engine calls no ``Task.loss``).

Dimension legend: M labelled states, B live episodes, H = W = 48 pixels.
"""
from __future__ import annotations

import numpy as np

from ..sim.demos import DEMO_STREAM, Demos
from ..sim.expert import EXPERTS, carrying, heading_for
from ..sim.render import render
from ..sim.world import episode_seed, new_episode

DAGGER_STREAM = DEMO_STREAM + 101       # the policy-driven episodes' seeds, apart from the demonstrations'


def round_steps(task) -> int:
    s = task.settings
    return s.round_steps or max(1, task.default_train_config()["steps"] // s.dagger)


def dagger_step(task, model) -> None:
    """Count one training step; at the end of rounds 1 .. ROUNDS - 1, drive and label a round's states
    and add them to the task's demonstrations."""
    s = task.settings
    task.dagger_calls += 1
    every = round_steps(task)
    done = task.dagger_calls // every
    if task.dagger_calls % every or not 1 <= done < s.dagger:
        return
    demos = task.demos()
    first = task.first_rows                 # round 1's recorded steps: each round collects as many
    was_training = model.training
    model.eval()
    try:
        new = drive_and_label(task.policy(model).act_batch, first, (s.demo_seed or 0) + done, perturb=s.perturb,
                              expert=s.expert, split=s.demo_split)
    finally:
        model.train(was_training)
    task._demos = aggregate(demos, new)


def drive_and_label(act, n_states: int, seed: int, perturb: float = 0.5, batch: int = 64,
                    expert: str = "settle", split: str = "train") -> Demos:
    """``n_states`` states visited by ``act`` (a batched policy, as ``run_episodes`` calls it) on fresh
    episodes of ``split`` (episode i from (seed, DAGGER_STREAM, i)), each labelled with the action of
    ``expert`` (``sim.expert.EXPERTS``); the executed move and command are the policy's."""
    expert_action = EXPERTS[expert]
    images: list = []
    moves: list = []
    gripper: list = []
    goals: list = []
    carry: list = []
    ex_moves: list = []
    ex_gripper: list = []
    episode: list = []
    steps: list = []
    texts: list = []
    success: list = []
    i = 0
    while len(moves) < n_states:
        worlds = []
        for _ in range(batch):
            rng = np.random.default_rng(episode_seed(seed, DAGGER_STREAM, i))
            worlds.append((i, new_episode(rng, split=split, perturb=bool(rng.random() < perturb))))
            i += 1
        live = list(worlds)
        while live and len(moves) < n_states:
            frames = np.stack([render(w) for _, w in live])                           # (B, H, W, 3)
            mv, g = act(frames, [w.instruction for _, w in live])
            for j, (e, w) in enumerate(live):
                if len(moves) >= n_states:
                    break
                info = w.info()
                label = expert_action(info)
                images.append(frames[j])
                moves.append(label["move"])
                gripper.append(label["gripper"])
                goals.append(heading_for(info))
                carry.append(carrying(info))
                ex_moves.append(np.clip(mv[j], -1, 1).astype(np.float32))
                ex_gripper.append(int(g[j]))
                episode.append(e)
                steps.append(w.steps)
                w.step(ex_moves[-1], ex_gripper[-1])
            live = [(e, w) for e, w in live if not w.over]
        for _, w in worlds:
            texts.append(w.instruction)
            success.append(w.success)
    return Demos(images=np.stack(images), moves=np.stack(moves).astype(np.float32),
                 gripper=np.asarray(gripper, dtype=np.int64), goals=np.asarray(goals, dtype=np.float32),
                 carrying=np.asarray(carry, dtype=bool), executed_moves=np.stack(ex_moves),
                 executed_gripper=np.asarray(ex_gripper, dtype=np.int64), episode=np.asarray(episode, dtype=np.int64),
                 step=np.asarray(steps, dtype=np.int64), instructions=texts, success=np.asarray(success))


def aggregate(a: Demos, b: Demos) -> Demos:
    """``a`` then ``b``, b's episodes renumbered after a's and its rows grouped by episode (so that each
    episode's rows are contiguous and in step order, as ``chunk_targets`` reads them)."""
    order = np.lexsort((b.step, b.episode))                                            # (M_b,)
    offset = len(a.instructions)
    ids = np.unique(b.episode)
    texts = [b.instructions[int(e)] for e in ids]
    renumber = np.searchsorted(ids, b.episode[order]) + offset
    return Demos(images=np.concatenate([a.images, b.images[order]]), moves=np.concatenate([a.moves, b.moves[order]]),
                 gripper=np.concatenate([a.gripper, b.gripper[order]]), goals=np.concatenate([a.goals, b.goals[order]]),
                 carrying=np.concatenate([a.carrying, b.carrying[order]]),
                 executed_moves=np.concatenate([a.executed_moves, b.executed_moves[order]]),
                 executed_gripper=np.concatenate([a.executed_gripper, b.executed_gripper[order]]),
                 episode=np.concatenate([a.episode, renumber]), step=np.concatenate([a.step, b.step[order]]),
                 instructions=a.instructions + texts, success=np.concatenate([a.success, b.success[ids]]))
