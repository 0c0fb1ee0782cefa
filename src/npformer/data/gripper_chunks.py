"""Action chunks for the gripper policy: K steps of actions per prediction, and three ways to execute them.

With ``--set chunk=K`` the policy predicts, from one frame, the actions of the next K steps: 3K tokens,
(dx, dy, gripper) per step, decoded one after another over the KV cache. Training targets that fall past
the end of a demonstration are "done" steps (no move, the done command): the expert's own last action
is "done", so the padding repeats what it would keep saying, and every slot is scored.

``--set execute=...`` says how the chunks become actions (``play_chunks``):

- ``chunk``: predict, execute all K actions blind, predict again from the frame then reached;
- ``first``: predict at every step and execute the first action of each new chunk (closed loop);
- ``ensemble``: predict at every step; the action for step t blends every prediction made for t
  (ACT's temporal ensembling): prediction i, i = 0 for the oldest, weighs exp(-m i); the move is the
  weighted mean, the gripper command the weighted vote (ties to the lowest command).

``open_loop``: the chunk predicted from the first frame is the whole episode, executed blind; when it
runs out before the step limit the episode ends there ("done"). ``npformer eval --open-loop`` plays it.

Smoothness of a path is the mean, over its consecutive steps, of |move_t - move_{t-1}| (Euclidean, in
action units): 0 for a constant move, at most 2 sqrt 2.

Dimension legend: B live episodes, K chunk steps, H = W = 48 pixels.
"""
from __future__ import annotations

import numpy as np

from ..decode.action_lm import CachedActionLM, restrict
from ..sim.env import GripperEnv
from ..sim.episodes import EVAL_STREAM, EpisodeResult, outcome, summarize
from ..sim.tokens import TOKENS_PER_STEP
from ..sim.world import GRIPPER_DONE, MAX_STEPS, episode_seed
from .tabletop import model_words

EXECUTE = ("chunk", "first", "ensemble")


def check_chunk_settings(s) -> None:
    """The gripper task's chunk, execute, ensemble_m, dagger and round_steps settings; ValueError naming one."""
    if not 1 <= s.chunk <= MAX_STEPS:
        raise ValueError(f"chunk must be an integer in [1, {MAX_STEPS}] (the step limit), got {s.chunk!r}")
    if s.execute not in EXECUTE:
        raise ValueError(f"execute must be one of {', '.join(EXECUTE)}, got {s.execute!r}")
    if isinstance(s.ensemble_m, bool) or not isinstance(s.ensemble_m, (int, float)) or not np.isfinite(s.ensemble_m) \
            or s.ensemble_m < 0:
        raise ValueError(f"ensemble_m must be a finite number >= 0, got {s.ensemble_m!r}")
    for name in ("dagger", "round_steps"):
        v = getattr(s, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {v!r}")
    if s.dagger == 1:
        raise ValueError("dagger must be 0 (no DAgger) or at least 2 rounds (round 1 is the expert's demonstrations)")


def chunk_targets(tokenizer, demos, rows: np.ndarray, k: int) -> np.ndarray:
    """Tokens (B, 3 k) of recorded steps ``rows`` and the k - 1 steps after each in its episode; steps
    past the episode's end are "done" steps (move 0, the done command)."""
    rows = np.asarray(rows, dtype=np.int64)
    last = np.searchsorted(demos.episode, demos.episode[rows], side="right") - 1        # (B,) episode's last row
    idx = rows[:, None] + np.arange(k)                                                # (B, K)
    past = idx > last[:, None]                                                        # (B, K)
    idx = np.minimum(idx, last[:, None])
    moves = np.where(past[..., None], np.float32(0), demos.moves[idx])                # (B, K, 2)
    gripper = np.where(past, GRIPPER_DONE, demos.gripper[idx])                        # (B, K)
    tokens = tokenizer.encode(moves.reshape(-1, 2), gripper.reshape(-1))             # (B K, 3)
    return tokens.reshape(len(rows), TOKENS_PER_STEP * k)


def predict(policy, images: np.ndarray, instructions: list[str], steps: int | None = None
            ) -> tuple[np.ndarray, np.ndarray]:
    """One chunk per row: (moves (B, K, 2) float32, gripper (B, K) int64). ``steps``: decode only the
    chunk's first ``steps`` steps (greedy only): the tokens are decoded in order and each reads only the
    ones before it, so they are the first tokens of the whole chunk, for a fraction of the work."""
    if steps is None or policy.temperature > 0:
        tokens, _ = policy.tokens(images, instructions)                               # (B, 3 K)
    else:
        tokens = greedy_prefix(policy, images, instructions, TOKENS_PER_STEP * steps)  # (B, 3 steps)
    b = len(tokens)
    moves, gripper = policy.tokenizer.decode(tokens.reshape(-1, TOKENS_PER_STEP))
    return moves.reshape(b, -1, 2), gripper.reshape(b, -1)


def greedy_prefix(policy, images: np.ndarray, instructions: list[str], n_slots: int) -> np.ndarray:
    """The first ``n_slots`` action tokens (B, n_slots) that ``decode.act_tokens`` decodes greedily, each
    restricted to its slot's ids, without decoding the rest of the chunk."""
    m = policy.model
    words = model_words(policy.reader, m, list(instructions), unknown_ok=policy.unknown_ok)  # (B, L) or (B, L, S)
    dec = CachedActionLM(m, words, np.asarray(images).astype(m.dtype) / m.dtype.type(255))
    nxt = np.full(len(images), m.config.bos_id, dtype=np.int64)                      # (B,)
    out = []
    for j in range(n_slots):
        nxt = restrict(dec.step(nxt[:, None])[:, 0], policy.allowed[j]).argmax(axis=-1)   # (B,)
        out.append(nxt.astype(np.int64))
    return np.stack(out, axis=1)                                                      # (B, n_slots)


def ensemble(preds: list[tuple[int, np.ndarray, np.ndarray]], t: int, m: float) -> tuple[np.ndarray, int]:
    """Step t's action from the chunks ``preds`` [(step made, moves (K, 2), gripper (K,))], oldest first:
    those that cover t, weighted exp(-m i) with i = 0 for the oldest; (move (2,), command)."""
    cover = [(mv[t - s], g[t - s]) for s, mv, g in preds if 0 <= t - s < len(g)]
    w = np.exp(-m * np.arange(len(cover)))                                            # (n,)
    move = (w[:, None] * np.stack([c[0] for c in cover])).sum(axis=0) / w.sum()     # (2,)
    votes = np.zeros(3)
    for wi, (_, g) in zip(w, cover, strict=True):
        votes[int(g)] += wi
    return move.astype(np.float32), int(votes.argmax())


def play_chunks(policy, seeds: list[int], options: list[dict], execute: str = "first", m: float = 0.1,
                open_loop: bool = False) -> tuple[list[EpisodeResult], dict]:
    """Episodes reset with ``seeds[i]`` and ``options[i]``, played batched by a chunk ``policy``
    (``GripperPolicy``) as ``execute`` says, or blind from the first frame (``open_loop``). Returns
    (results, summary): ``sim.episodes.summarize``'s, with ``smoothness`` (the mean over episodes)."""
    if execute not in EXECUTE:
        raise ValueError(f"execute must be one of {', '.join(EXECUTE)}, got {execute!r}")
    envs = [GripperEnv() for _ in seeds]
    obs = [env.reset(seed=s, options=o)[0] for env, s, o in zip(envs, seeds, options, strict=True)]
    preds: list[list] = [[] for _ in envs]                  # per episode: (step made, moves, gripper)
    taken: list[list] = [[] for _ in envs]                  # per episode: the moves executed
    live, t = list(range(len(envs))), 0
    while live:
        if open_loop:
            need = live if t == 0 else []
        elif execute == "chunk":
            need = [i for i in live if not preds[i] or t - preds[i][-1][0] >= len(preds[i][-1][2])]
        else:
            need = live
        if need:
            moves, gripper = predict(policy, np.stack([obs[i]["image"] for i in need]),
                                     [obs[i]["instruction"] for i in need],
                                     steps=1 if execute == "first" and not open_loop else None)
            for j, i in enumerate(need):
                preds[i].append((t, moves[j], gripper[j]))
                if execute != "ensemble":
                    preds[i] = preds[i][-1:]
                else:                                       # keep the chunks that still cover a step to come
                    preds[i] = [p for p in preds[i] if t - p[0] < len(p[2])]
        still = []
        for i in live:
            made, mv, g = preds[i][-1]
            if execute == "ensemble" and not open_loop:
                move, command = ensemble(preds[i], t, m)
            elif t - made < len(g):
                move, command = mv[t - made], int(g[t - made])
            else:                                           # the blind plan has run out: the episode ends
                move, command = np.zeros(2, np.float32), GRIPPER_DONE
            taken[i].append(np.asarray(move, dtype=np.float64))
            obs[i], _, terminated, truncated, _ = envs[i].step({"move": np.clip(move, -1, 1).astype(np.float32),
                                                                 "gripper": command})
            if not (terminated or truncated):
                still.append(i)
        live, t = still, t + 1
    results = []
    for env, s in zip(envs, seeds, strict=True):
        w = env.world
        assert w is not None
        results.append(EpisodeResult(seed=s, instruction=w.instruction, target=w.target, success=w.success,
                                     outcome=outcome(w), steps=w.steps, truncated=w.truncated, events=list(w.events)))
    summary = summarize(results)
    summary["smoothness"] = float(np.mean([smoothness(np.stack(m)) for m in taken]))
    return results, summary


def smoothness(moves: np.ndarray) -> float:
    """Mean |move_t - move_{t-1}| over a path's consecutive steps (moves (T, 2)); 0 for a single step."""
    if len(moves) < 2:
        return 0.0
    return float(np.linalg.norm(np.diff(moves, axis=0), axis=1).mean())


def evaluate_chunks(task, model, n: int, seed: int, perturb: bool = False, execute: str | None = None,
                    open_loop: bool = False, split: str = "test", yellow: bool = True) -> dict:
    """The gripper task's ``evaluate`` for a chunk policy (or ``open_loop``): n fresh episodes of ``split``
    (episode i from (seed, EVAL_STREAM, i), as ``run_episodes`` draws them) and, with ``yellow``, n of
    "yellow_bowl"; the same keys as ``GripperTask.evaluate`` and ``smoothness``, ``execute``, ``open_loop``."""
    s = task.settings
    execute = s.execute if execute is None else execute
    policy = task.policy(model)
    seeds = [episode_seed(seed, EVAL_STREAM, i) for i in range(n)]

    def run(which: str) -> dict:
        opts = [{"split": which, "perturb": bool(perturb)} for _ in range(n)]
        return play_chunks(policy, seeds, opts, execute, s.ensemble_m, open_loop)[1]

    test = run(split)
    out = {"success": test["success"], "success_ci95": test["success_ci95"]}
    if yellow:
        y = run("yellow_bowl")
        out.update(yellow_bowl_success=y["success"], yellow_bowl_ci95=y["success_ci95"])
    return {**out, "n": n, "perturb": bool(perturb), "chunk": s.chunk, "execute": execute,
            "open_loop": bool(open_loop), "mean_steps": test["mean_steps"], "smoothness": test["smoothness"],
            "truncated": test["truncated"], "outcomes": test["outcomes"]}
