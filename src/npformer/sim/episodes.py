"""Running a policy over fresh episodes, batched, and scoring them.

``run_episodes(act, n, seed)`` plays episode i from ``episode_seed(seed, EVAL_STREAM, i)``. At each step
ONE call ``act(images (B, 48, 48, 3) uint8, instructions list[str]) -> (moves (B, 2), gripper (B,))``
serves every live episode, in episode order; an episode leaves the batch when it ends.

Each episode's outcome is the first that applies:

- ``success``: the named block ends inside the named container;
- ``wrong_container``: it ends inside another container;
- ``wrong_block``: it was never grasped, and another block was;
- ``dropped``: it was grasped, and ends on the table;
- ``held_at_end``: it is still held at the end;
- ``never_grasped``: no block was ever grasped.

Dimension legend: B live episodes, H = W = 48 pixels.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .env import GripperEnv
from .world import World, episode_seed

EVAL_STREAM = 3_000_017             # evaluation episodes' seed stream (demonstrations: demos.DEMO_STREAM)
OUTCOMES = ("success", "wrong_container", "wrong_block", "dropped", "held_at_end", "never_grasped")


@dataclass
class EpisodeResult:
    seed: int
    instruction: str
    target: tuple[str, str]
    success: bool
    outcome: str
    steps: int
    truncated: bool
    events: list


def outcome(world: World) -> str:
    """The first of ``OUTCOMES`` that applies to the episode ``world`` ended in."""
    colour, container = world.target
    where = world.container_of(colour)
    if where == container:
        return "success"
    if where is not None:
        return "wrong_container"
    if colour not in world.grasped:
        return "wrong_block" if world.grasped else "never_grasped"
    return "held_at_end" if world.held == colour else "dropped"


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of ``k`` successes in ``n`` trials."""
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n and n >= 1, got k={k}, n={n}")
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def summarize(results: list[EpisodeResult]) -> dict:
    """n, success, success_ci95 (Wilson, z = 1.96), outcomes (every kind, counted), truncated, mean_steps."""
    n = len(results)
    if n == 0:
        raise ValueError("no episodes to summarize")
    k = sum(r.success for r in results)
    lo, hi = wilson(k, n)
    return {"n": n, "success": k / n, "success_ci95": [lo, hi],
            "outcomes": {o: sum(r.outcome == o for r in results) for o in OUTCOMES},
            "truncated": sum(r.truncated for r in results),
            "mean_steps": float(np.mean([r.steps for r in results]))}


def play(act, seeds: list[int], options: list[dict], watch=None) -> tuple[list[EpisodeResult], dict]:
    """Episodes reset with ``seeds[i]`` and ``options[i]``, played batched by ``act``; (results, summary).
    ``watch(i, info, move, command)``, when given, sees episode i's state and the action chosen in it
    before each step (``benchmarks/gripper_why.py grasp`` measures the policy's grasps with it)."""
    if len(seeds) != len(options) or not seeds:
        raise ValueError(f"need one options dict per seed and at least one seed, got {len(seeds)} seeds and "
                         f"{len(options)} options")
    envs = [GripperEnv() for _ in seeds]
    obs = [env.reset(seed=s, options=o)[0] for env, s, o in zip(envs, seeds, options, strict=True)]
    live = list(range(len(envs)))
    while live:
        images = np.stack([obs[i]["image"] for i in live])                   # (B, H, W, 3)
        moves, gripper = act(images, [obs[i]["instruction"] for i in live])
        moves = np.asarray(moves, dtype=np.float32)                          # (B, 2)
        gripper = np.asarray(gripper).reshape(-1)                            # (B,)
        if moves.shape != (len(live), 2) or gripper.shape != (len(live),):
            raise ValueError(f"act must return moves ({len(live)}, 2) and gripper ({len(live)},), got "
                             f"{moves.shape} and {gripper.shape}")
        still = []
        for j, i in enumerate(live):
            world = envs[i].world
            if watch is not None and world is not None:
                watch(i, world.info(), moves[j], int(gripper[j]))
            obs[i], _, terminated, truncated, _ = envs[i].step({"move": moves[j], "gripper": int(gripper[j])})
            if not (terminated or truncated):
                still.append(i)
        live = still
    results = []
    for env, s in zip(envs, seeds, strict=True):
        w = env.world
        assert w is not None
        results.append(EpisodeResult(seed=s, instruction=w.instruction, target=w.target, success=w.success,
                                     outcome=outcome(w), steps=w.steps, truncated=w.truncated,
                                     events=list(w.events)))
    return results, summarize(results)


def run_episodes(act, n: int, seed: int, split: str = "test", perturb: bool = False,
                 instructions: list | None = None, watch=None) -> tuple[list[EpisodeResult], dict]:
    """``n`` fresh evaluation episodes, episode i from ``episode_seed(seed, EVAL_STREAM, i)``, played by ``act``.

    ``instructions``: None (each drawn from ``split``), or n entries, each an instruction string or an
    (instruction, colour, container) triple, given to episode i. ``watch``: as ``play``'s. Returns
    (results, summary).
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    if instructions is not None and len(instructions) != n:
        raise ValueError(f"instructions must hold n = {n} entries, got {len(instructions)}")
    options = []
    for i in range(n):
        o = {"split": split, "perturb": bool(perturb)}
        if instructions is not None:
            entry = instructions[i]
            if isinstance(entry, str):
                o["instruction"] = entry
            else:
                o["instruction"], o["target"] = entry[0], (entry[1], entry[2])
        options.append(o)
    return play(act, [episode_seed(seed, EVAL_STREAM, i) for i in range(n)], options, watch=watch)
