"""Drawing the gripper world into an RGB image (48 x 48, uint8) with NumPy.

Back to front: the table, the containers (a box is a hollow square, a bowl a ring, both 0.24 of the
table across), the blocks (filled squares 0.12 a side), then the gripper, near-black, seen from above:

    open             closed, empty        holding a block

    ##############      #########           ##########
    ##          ##          ##              ## #### ##
    ##          ##          ##              ## #### ##
    ##          ##          ##              ## #### ##
    ##          ##          ##              ## #### ##

a bar with two jaws 14 pixels apart when open; one stem (the jaws shut) under a shorter bar when closed
and empty; the held block between jaws 10 pixels apart when holding. The image alone tells where the
gripper is (the middle of the jaws) and its state.

Dimension legend: H = W = IMAGE_SIZE pixels, C = 3 channels.
"""
from __future__ import annotations

import numpy as np

from .world import BLOCK_SIZE, CONTAINER_SIZE, CONTAINER_WALL, IMAGE_SIZE, World

GRIPPER_RGB = (0.04, 0.04, 0.05)
_CENTRES = (np.arange(IMAGE_SIZE) + 0.5) / IMAGE_SIZE          # (H,) pixel centres, of the table
_JAW_ROWS = (-3.5, 3.5)                                         # the jaws' rows, pixels from the gripper
_BAR_ROWS = (-5.5, -3.5)                                        # the bar's rows
# jaws' columns, pixels from the gripper (inner, outer); the bar spans the outer edge
_JAWS = {"open": (5.0, 7.0), "closed": (0.0, 1.5), "holding": (3.5, 5.5)}
_BAR_HALF = {"open": 7.0, "closed": 4.5, "holding": 5.5}


def gripper_state(world: World) -> str:
    """"open", "closed" (and empty) or "holding"."""
    if world.held is not None:
        return "holding"
    return "closed" if world.closed else "open"


def render(world: World) -> np.ndarray:
    """The image (H, W, C) uint8 of ``world`` as it is now."""
    img = np.empty((IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.float32)  # (H, W, C)
    img[...] = world.table
    x, y = _CENTRES[None, :], _CENTRES[:, None]                      # (1, W), (H, 1)
    outer = CONTAINER_SIZE / 2
    for name, (cx, cy) in world.containers.items():
        if name == "box":
            d = np.maximum(np.abs(x - cx), np.abs(y - cy))           # (H, W)
        else:
            d = np.hypot(x - cx, y - cy)                             # (H, W)
        img[(d <= outer) & (d > outer - CONTAINER_WALL)] = world.shades[name]
    half = BLOCK_SIZE / 2
    for colour, (bx, by) in world.blocks.items():
        if colour != world.held:
            img[(np.abs(x - bx) <= half) & (np.abs(y - by) <= half)] = world.shades[colour]
    if world.held is not None:                                       # on top of everything but the gripper
        gx, gy = world.gripper
        img[(np.abs(x - gx) <= half) & (np.abs(y - gy) <= half)] = world.shades[world.held]
    img[_gripper_mask(world)] = GRIPPER_RGB
    return np.round(img * 255).astype(np.uint8)                      # (H, W, C)


def _gripper_mask(world: World) -> np.ndarray:
    """The gripper's pixels (H, W) bool."""
    state = gripper_state(world)
    px = np.arange(IMAGE_SIZE) + 0.5                                 # (W,) pixel centres, in pixels
    dx = np.abs(px[None, :] - world.gripper[0] * IMAGE_SIZE)         # (1, W)
    dy = px[:, None] - world.gripper[1] * IMAGE_SIZE                 # (H, 1)
    inner, outer = _JAWS[state]
    jaws = (dy >= _JAW_ROWS[0]) & (dy <= _JAW_ROWS[1]) & (dx >= inner) & (dx <= outer)  # (H, W)
    bar = (dy >= _BAR_ROWS[0]) & (dy < _BAR_ROWS[1]) & (dx <= _BAR_HALF[state])         # (H, W)
    return jaws | bar
