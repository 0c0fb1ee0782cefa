"""The scripted expert: the action to take in any state, read from ``info`` (``World.info``).

It reads the gripper, what it holds, where the blocks and containers are and the target, nothing else
(not ``info["success"]``, so that it can be handed another target). Each move heads straight for the
goal: ``(goal - gripper) / MAX_MOVE`` when the goal is one step away or less (it lands on it), else the
same direction scaled so that the larger axis moves by a full step. In order:

- the named block lies inside the named container: **done**;
- it holds the named block: carry it to the container's centre ("close"), and **open** on the step it
  arrives;
- it holds another block: **open** where it is (a step away first if that would drop it on the named
  block);
- its hand is empty and closed (after a slip, or a close that missed): head for the named block and
  **open**;
- its hand is empty and open: head for the named block, **close** on the step it arrives.
"""
from __future__ import annotations

import numpy as np

from .world import BLOCK_SIZE, GRIPPER_CLOSE, GRIPPER_DONE, GRIPPER_OPEN, MAX_MOVE, inside


def _toward(here, goal) -> tuple[np.ndarray, bool]:
    """The move (2,) float32 from ``here`` straight toward ``goal``, and whether it gets there."""
    delta = np.array([goal[0] - here[0], goal[1] - here[1]], dtype=np.float64)   # (2,)
    reach = float(np.abs(delta).max())
    if reach <= MAX_MOVE:
        return (delta / MAX_MOVE).astype(np.float32), True
    return (delta / reach).astype(np.float32), False


def _action(move, gripper: int) -> dict:
    return {"move": np.asarray(move, dtype=np.float32).reshape(2), "gripper": int(gripper)}


def expert_action(info: dict) -> dict:
    """The clean expert action ``{"move": float32 (2,), "gripper": int}`` for the state ``info`` describes."""
    colour, container = info["target"]
    gx, gy, closed = info["gripper"]
    here = (gx, gy)
    held = info["held"]
    blocks, containers = info["blocks"], info["containers"]
    if held != colour and inside(container, containers[container], blocks[colour]):
        return _action((0.0, 0.0), GRIPPER_DONE)
    if held == colour:
        move, arrives = _toward(here, containers[container])
        return _action(move, GRIPPER_OPEN if arrives else GRIPPER_CLOSE)
    if held is not None:                                    # the wrong block: put it down
        bx, by = blocks[colour]
        if max(abs(gx - bx), abs(gy - by)) < BLOCK_SIZE:    # not on top of the named block
            away = np.array([gx - bx, gy - by], dtype=np.float64)
            if not away.any():
                away = np.array([0.5 - bx, 0.5 - by]) if (bx, by) != (0.5, 0.5) else np.array([1.0, 0.0])
            return _action(away / np.abs(away).max(), GRIPPER_CLOSE)
        return _action((0.0, 0.0), GRIPPER_OPEN)
    move, arrives = _toward(here, blocks[colour])
    if closed:
        return _action(move, GRIPPER_OPEN)
    return _action(move, GRIPPER_CLOSE if arrives else GRIPPER_OPEN)
