"""Drawing the gripper world into an RGB image (48 x 48, uint8) with NumPy.

Back to front: the table, the containers (a box is a hollow square, a bowl a ring, both 0.24 of the
table across), the blocks (filled squares 0.12 a side), then the gripper, near-black, seen from above:

    open                  closed, empty         holding a block

    ##############          ########             ##########
    ##############          ########             ##########
    ##          ##             ##                ##      ##
    ##          ##             ##                ##rrrrrr##
    ##          ##             ##                ##rrrrrr##
    ##          ##             ##                ##rrrrrr##
    ##          ##             ##                ##rrrrrr##
    ##          ##             ##                ##rrrrrr##
    ##          ##             ##                ##rrrrrr##
    ##          ##             ##                ##      ##

a bar and two jaws 10 pixels apart when open; one stem (the jaws shut) under a shorter bar when closed
and empty; the held block (r) between jaws 6 pixels apart when holding. The image alone tells where the
gripper is (the middle of the jaws) and its state.

Dimension legend: H = W = IMAGE_SIZE pixels, C = 3 channels.
"""
from __future__ import annotations

import functools

import numpy as np

from .world import BLOCK_SIZE, CONTAINER_SIZE, CONTAINER_WALL, IMAGE_SIZE, World

GRIPPER_RGB = (0.04, 0.04, 0.05)
_CENTRES = (np.arange(IMAGE_SIZE) + 0.5) / IMAGE_SIZE          # (H,) pixel centres, of the table
# in pixels from the gripper, edges between pixel centres when it sits on a pixel corner
_JAW_ROWS = (-4.0, 4.0)                                         # the jaws' rows
_BAR_ROWS = (-6.0, -4.0)                                        # the bar's rows
_JAWS = {"open": (5.0, 7.0), "closed": (0.0, 1.0), "holding": (3.0, 5.0)}  # jaws' columns (inner, outer)
_BAR_HALF = {"open": 7.0, "closed": 4.0, "holding": 5.0}
_REACH = 8.0 / IMAGE_SIZE                                       # the gripper's pixels lie this near it


def gripper_state(world: World) -> str:
    """"open", "closed" (and empty) or "holding"."""
    if world.held is not None:
        return "holding"
    return "closed" if world.closed else "open"


@functools.lru_cache(maxsize=4096)
def _u8(rgb: tuple[float, float, float]) -> np.ndarray:
    """An RGB colour in [0, 1] as uint8 (3,) (cached: a scene's colours are drawn at every step)."""
    out = np.round(np.asarray(rgb, dtype=np.float64) * 255).astype(np.uint8)      # (3,)
    out.flags.writeable = False
    return out


def _window(cx: float, cy: float, reach: float) -> tuple[slice, slice]:
    """The rows and columns of the pixels whose centres may lie within ``reach`` (of the table) of (cx, cy)."""
    r0, r1 = int((cy - reach) * IMAGE_SIZE) - 1, int((cy + reach) * IMAGE_SIZE) + 2
    c0, c1 = int((cx - reach) * IMAGE_SIZE) - 1, int((cx + reach) * IMAGE_SIZE) + 2
    return slice(max(r0, 0), max(min(r1, IMAGE_SIZE), 0)), slice(max(c0, 0), max(min(c1, IMAGE_SIZE), 0))


def render(world: World) -> np.ndarray:
    """The image (H, W, C) uint8 of ``world`` as it is now. Each object is drawn in the window it can
    cover, the same pixels as a test over the whole image."""
    img = np.empty((IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8)    # (H, W, C)
    img[...] = _u8(world.table)
    outer = CONTAINER_SIZE / 2
    for name, (cx, cy) in world.containers.items():
        rows, cols = _window(cx, cy, outer)
        x, y = _CENTRES[None, cols], _CENTRES[rows, None]           # (1, w), (h, 1)
        if name == "box":
            d = np.maximum(np.abs(x - cx), np.abs(y - cy))           # (h, w)
        else:
            d = np.hypot(x - cx, y - cy)                             # (h, w)
        img[rows, cols][(d <= outer) & (d > outer - CONTAINER_WALL)] = _u8(world.shades[name])
    half = BLOCK_SIZE / 2
    order = [c for c in world.blocks if c != world.held] + ([world.held] if world.held is not None else [])
    for colour in order:                                             # a held block on top of the others
        bx, by = world.gripper if colour == world.held else world.blocks[colour]
        rows, cols = _window(bx, by, half)
        x, y = _CENTRES[None, cols], _CENTRES[rows, None]
        img[rows, cols][(np.abs(x - bx) <= half) & (np.abs(y - by) <= half)] = _u8(world.shades[colour])
    rows, cols = _window(world.gripper[0], world.gripper[1], _REACH)
    img[rows, cols][_gripper_mask(world, rows, cols)] = _u8(GRIPPER_RGB)
    return img


def _gripper_mask(world: World, rows: slice, cols: slice) -> np.ndarray:
    """The gripper's pixels (h, w) bool in the window ``rows`` x ``cols``."""
    state = gripper_state(world)
    dx = np.abs(_CENTRES[None, cols] - world.gripper[0]) * IMAGE_SIZE   # (1, w) pixels from the gripper
    dy = (_CENTRES[rows, None] - world.gripper[1]) * IMAGE_SIZE         # (h, 1)
    inner, outer = _JAWS[state]
    jaws = (dy >= _JAW_ROWS[0]) & (dy < _JAW_ROWS[1]) & (dx >= inner) & (dx < outer)   # (h, w)
    bar = (dy >= _BAR_ROWS[0]) & (dy < _BAR_ROWS[1]) & (dx < _BAR_HALF[state])          # (h, w)
    return jaws | bar
