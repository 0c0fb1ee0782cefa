"""Demonstrations of the scripted expert, recorded with DART (Laskey et al., 2017): noise is injected into
the actions the world executes, so the recording visits states off the expert's own path, while each
step's label stays the expert's clean action for the state it was in.

Noise: the executed move is ``clean + N(0, noise^2)`` per axis (in action units, clipped to [-1, 1]); with
probability ``flip`` the executed command is open for close or close for open ("done" is never injected,
nor replaced). Episode i comes from ``episode_seed(seed, DEMO_STREAM, i)``; evaluation draws from
``episodes.EVAL_STREAM``, so demonstrations never share an episode with an evaluation.

Dimension legend: M recorded steps, N episodes, H = W = 48 pixels.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .expert import EXPERTS, carrying, heading_for
from .language import COLOURS, HELD_OUT
from .render import render
from .world import GRIPPER_CLOSE, GRIPPER_DONE, GRIPPER_OPEN, SPLITS, World, episode_seed, new_episode, shade

DEMO_STREAM = 2_000_003                 # the demonstrations' seed stream (evaluation: episodes.EVAL_STREAM)
_NOISE_STREAM = 2_000_017               # the injected noise's own stream: the scene does not depend on it
_RECOLOUR_STREAM = 2_000_029            # ``recolour``'s draws, apart from the scene and the noise


@dataclass
class Demos:
    """Recorded steps: what the policy saw and the expert's clean label."""
    images: np.ndarray              # (M, H, W, 3) uint8, the observation before the step
    moves: np.ndarray               # (M, 2) float32, the expert's clean move
    gripper: np.ndarray             # (M,) int64, the expert's clean command
    goals: np.ndarray               # (M, 2) float32, where the expert is heading (``expert.heading_for``)
    carrying: np.ndarray            # (M,) bool, heading for the container, not the block (``expert.carrying``)
    executed_moves: np.ndarray      # (M, 2) float32, the move the world executed (clean + noise, clipped)
    executed_gripper: np.ndarray    # (M,) int64, the command the world executed
    episode: np.ndarray             # (M,) int64, the episode index of each step
    step: np.ndarray                # (M,) int64, the step within its episode
    instructions: list[str]         # (N,) one per episode; step j's is instructions[episode[j]]
    success: np.ndarray             # (N,) bool, whether the executed episode succeeded

    def __len__(self) -> int:
        return len(self.moves)

    def texts(self, rows: np.ndarray) -> list[str]:
        """The instruction of each row in ``rows``."""
        return [self.instructions[int(e)] for e in self.episode[rows]]


def record_demos(n_episodes: int, seed: int, noise: float = 0.3, flip: float = 0.05, split: str = "train",
                 perturb: float = 0.5, max_steps: int | None = None, watch=None, recolour: float = 0.0,
                 expert: str = "settle") -> Demos:
    """``n_episodes`` expert episodes with DART noise. ``perturb``: the fraction of episodes run with the
    perturbations on (each episode's draw comes from its seed). ``max_steps``: stop at exactly this many
    recorded steps (the last episode is cut there; ``n_episodes`` is then the most episodes it may take,
    and too few is a ValueError), so that recordings of different kinds hold the same number of labels.
    ``watch(info)``, when given, sees the world's state (``World.info``) at each recorded step, in order,
    for a measurement that needs more of it than ``Demos`` keeps. ``recolour``: the chance that a step where
    the expert is past the named block (``expert.carrying``: held, or already in place) is recorded with
    that block drawn in another palette colour (``recoloured``); the world, the label and every other draw
    stay as they were. ``expert``: which expert labels the steps and drives them (``expert.EXPERTS``)."""
    if isinstance(n_episodes, bool) or not isinstance(n_episodes, (int, np.integer)) or n_episodes < 1:
        raise ValueError(f"n_episodes must be an integer >= 1, got {n_episodes!r}")
    if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, (int, np.integer))
                                  or max_steps < 1):
        raise ValueError(f"max_steps must be None or an integer >= 1, got {max_steps!r}")
    for name, v in (("noise", noise), ("flip", flip), ("perturb", perturb), ("recolour", recolour)):
        if not np.isfinite(v) or v < 0 or (name != "noise" and v > 1):
            raise ValueError(f"{name} must be {'>= 0' if name == 'noise' else 'in [0, 1]'}, got {v!r}")
    if expert not in EXPERTS:
        raise ValueError(f"expert must be one of {', '.join(EXPERTS)}, got {expert!r}")
    expert_action = EXPERTS[expert]
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    images, gripper, goals, carry, done_moves, done_gripper, episode, steps = [], [], [], [], [], [], [], []
    moves: list[np.ndarray] = []
    texts, success = [], []
    for i in range(int(n_episodes)):
        if max_steps is not None and len(moves) >= max_steps:
            break
        rng = np.random.default_rng(episode_seed(seed, DEMO_STREAM, i))
        on = bool(rng.random() < perturb)
        world = new_episode(rng, split=split, perturb=on)
        noise_rng = np.random.default_rng([int(seed), _NOISE_STREAM, i])
        recolour_rng = np.random.default_rng([int(seed), _RECOLOUR_STREAM, i])
        while not world.over and (max_steps is None or len(moves) < max_steps):
            info = world.info()
            if watch is not None:
                watch(info)
            clean = expert_action(info)
            carry_now = carrying(info)
            if recolour and carry_now and recolour_rng.random() < recolour:
                images.append(recoloured(world, world.target[0], recolour_rng))
            else:
                images.append(render(world))
            moves.append(clean["move"])
            gripper.append(clean["gripper"])
            goals.append(heading_for(info))
            carry.append(carry_now)
            episode.append(i)
            steps.append(world.steps)
            move = np.clip(clean["move"] + noise * noise_rng.standard_normal(2), -1.0, 1.0).astype(np.float32)
            command = clean["gripper"]
            if noise_rng.random() < flip and command != GRIPPER_DONE:
                command = GRIPPER_CLOSE if command == GRIPPER_OPEN else GRIPPER_OPEN
            done_moves.append(move)
            done_gripper.append(command)
            world.step(move, command)
        texts.append(world.instruction)
        success.append(world.success)
    if max_steps is not None and len(moves) < max_steps:
        raise ValueError(f"{n_episodes} demonstration episodes hold {len(moves)} steps, fewer than the {max_steps} "
                         "labels asked for: allow more episodes")
    return Demos(images=np.stack(images), moves=np.stack(moves).astype(np.float32),
                 gripper=np.asarray(gripper, dtype=np.int64), goals=np.asarray(goals, dtype=np.float32),
                 carrying=np.asarray(carry, dtype=bool), executed_moves=np.stack(done_moves),
                 executed_gripper=np.asarray(done_gripper, dtype=np.int64),
                 episode=np.asarray(episode, dtype=np.int64),
                 step=np.asarray(steps, dtype=np.int64), instructions=texts, success=np.asarray(success))


def recoloured(world: World, colour: str, rng: np.random.Generator) -> np.ndarray:
    """The image (H, W, 3) uint8 of ``world`` with the ``colour`` block drawn in another palette colour,
    drawn from ``rng`` among those that are neither its own nor the held-out pairing's (``HELD_OUT``): a
    recording then shows blocks of several colours carried to each container and lying in it, without a
    yellow-looking block ever carried to the bowl. The world itself is left as it was."""
    others = [c for c in COLOURS if c != colour and c != HELD_OUT[0]]
    new = others[int(rng.integers(len(others)))]
    shades = world.shades
    world.shades = {**shades, colour: shade(rng, COLOURS[new])}
    try:
        return render(world)
    finally:
        world.shades = shades
