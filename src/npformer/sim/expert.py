"""The scripted expert: the action to take in any state, read from ``info`` (``World.info``).

It reads the gripper, what it holds, where the blocks and containers are and the target, nothing else
(not ``info["success"]``, so that it can be handed another target). Each move heads for the goal axis
by axis: ``clip((goal - gripper) / MAX_MOVE, -1, 1)``, a full step on every axis that is more than a
step away, and exactly the rest on one that is not (as few steps as a straight line takes). It opens or
closes only once it is *on* the goal, within half the world's tolerance (``CLOSE_WITHIN``: half the pick
radius of the block's centre; ``OPEN_WITHIN``: half the inside of the container, from its centre), not
on the step it arrives: the step that lands costs one more step, but the decision then rests on what
the image shows now (the jaws around the block), and a policy that misjudges the distance by up to the
other half still succeeds. In order:

- the named block lies inside the named container: **done**;
- it holds the named block: carry it to the container's centre ("close"), and **open** once on it;
- it holds another block: **open** where it is (a step away first if that would drop it on the named
  block);
- its hand is empty and closed (after a slip, or a close that missed): head for the named block and
  **open**;
- its hand is empty and open: head for the named block, **close** once on it.
"""
from __future__ import annotations

import numpy as np

from .world import (
    BLOCK_SIZE,
    CONTAINER_INSIDE,
    GRIPPER_CLOSE,
    GRIPPER_DONE,
    GRIPPER_OPEN,
    MAX_MOVE,
    PICK_RADIUS,
    inside,
)

CLOSE_WITHIN = PICK_RADIUS / 2          # closes when this near the named block's centre (of the table)
OPEN_WITHIN = CONTAINER_INSIDE / 2      # opens when the held block is this near the container's centre


def _toward(here, goal, within: float) -> tuple[np.ndarray, bool]:
    """The move (2,) float32 from ``here`` toward ``goal``, axis by axis, and whether ``here`` is already
    within ``within`` of it."""
    delta = np.array([goal[0] - here[0], goal[1] - here[1]], dtype=np.float64)   # (2,)
    return np.clip(delta / MAX_MOVE, -1.0, 1.0).astype(np.float32), bool(np.hypot(*delta) <= within)


def carrying(info: dict) -> bool:
    """Whether the expert is past the block, heading for the container: it holds the named block, or the
    block already lies in the named container. Before, its action does not depend on which container the
    instruction names; after, not on the block's colour (the block is in the gripper or in place)."""
    colour, container = info["target"]
    return info["held"] == colour or inside(container, info["containers"][container], info["blocks"][colour])


def heading_for(info: dict) -> tuple[float, float]:
    """Where the expert is heading in the state ``info`` describes: the named container's centre when
    ``carrying``, else the named block. The gripper policy's goal head is trained toward the patch of this
    place (``data/gripper.py``)."""
    colour, container = info["target"]
    return info["containers"][container] if carrying(info) else info["blocks"][colour]


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
        move, on = _toward(here, containers[container], OPEN_WITHIN)
        return _action(move, GRIPPER_OPEN if on else GRIPPER_CLOSE)
    if held is not None:                                    # the wrong block: put it down
        bx, by = blocks[colour]
        if max(abs(gx - bx), abs(gy - by)) < BLOCK_SIZE:    # not on top of the named block
            away = np.array([gx - bx, gy - by], dtype=np.float64)
            if not away.any():
                away = np.array([0.5 - bx, 0.5 - by]) if (bx, by) != (0.5, 0.5) else np.array([1.0, 0.0])
            return _action(away / np.abs(away).max(), GRIPPER_CLOSE)
        return _action((0.0, 0.0), GRIPPER_OPEN)
    move, on = _toward(here, blocks[colour], CLOSE_WITHIN)
    if closed:
        return _action(move, GRIPPER_OPEN)
    return _action(move, GRIPPER_CLOSE if on else GRIPPER_OPEN)


def straight_action(info: dict) -> dict:
    """The straight expert (the task's setting ``expert="straight"``; the task's own before 2026-12-02):
    ``expert_action``'s where that says "done" or puts a wrong block down; otherwise each move heads straight
    for ``heading_for``'s goal (the larger axis a full step and the other in proportion, or exactly the rest
    when the goal is a step or less away), and it closes on the named block, or opens over the container, on
    the step that arrives there: the policy must land within the pick radius with the move it closes on."""
    clean = expert_action(info)
    colour = info["target"][0]
    if clean["gripper"] == GRIPPER_DONE or info["held"] not in (None, colour):
        return clean
    gx, gy, closed = info["gripper"]
    goal = heading_for(info)
    delta = np.array([goal[0] - gx, goal[1] - gy], dtype=np.float64)                # (2,)
    reach = float(np.abs(delta).max())
    arrives = reach <= MAX_MOVE
    move = delta / MAX_MOVE if arrives else delta / reach
    if info["held"] == colour:
        return _action(move, GRIPPER_OPEN if arrives else GRIPPER_CLOSE)
    return _action(move, GRIPPER_CLOSE if arrives and not closed else GRIPPER_OPEN)


EXPERTS = {"settle": expert_action, "straight": straight_action}     # the task's setting ``expert``
