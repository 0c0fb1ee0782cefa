"""An episode of the gripper world as pictures, drawn with Pillow: an animated GIF (one frame per step) or
a PNG strip of the frames. Each frame is the 48 x 48 observation scaled up, with a caption under it: the
step number and the action the policy decoded at that step (move and gripper command); the last frame
names the outcome. ``npformer act`` on a gripper run writes them.
"""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from ..files import atomic_write_bytes

SCALE = 4                       # each observation pixel becomes SCALE x SCALE
CAPTION = 28                    # pixels of caption under a frame
COMMANDS = ("open", "close", "done")
STRIP_COLUMNS = 10              # frames per row of a PNG strip


def caption(step: int, action: dict | None, end: str | None = None) -> list[str]:
    """The caption's two lines: "step 3" and "+0.50 -1.00 close"; on the last frame "after step 3" and the
    outcome."""
    if action is None:
        return [f"after step {step}", end or ""]
    dx, dy = (float(v) for v in np.asarray(action["move"]).reshape(2))
    return [f"step {step}", f"{dx:+.2f} {dy:+.2f} {COMMANDS[int(action['gripper'])]}"]


def frames_with_captions(frames: list[np.ndarray], actions: list[dict], end: str):
    """Pillow images, one per frame: frame t (the observation before step t + 1) captioned with the
    action taken at it; the last frame (after the last step) with ``end``."""
    from PIL import Image, ImageDraw

    out = []
    for t, frame in enumerate(frames):
        h, w = frame.shape[:2]
        big = Image.fromarray(np.asarray(frame, dtype=np.uint8))
        big = big.resize((w * SCALE, h * SCALE), Image.Resampling.NEAREST)
        canvas = Image.new("RGB", (w * SCALE, h * SCALE + CAPTION), (255, 255, 255))
        canvas.paste(big, (0, 0))
        draw = ImageDraw.Draw(canvas)
        lines = caption(t + 1, actions[t]) if t < len(actions) else caption(t, None, end)
        for k, line in enumerate(lines):
            draw.text((3, h * SCALE + 2 + 12 * k), line, fill=(0, 0, 0))
        out.append(canvas)
    return out


def save_episode(path, frames: list[np.ndarray], actions: list[dict], end: str) -> Path:
    """Write the episode to ``path``: an animated GIF (".gif", 400 ms a frame, the last held 2 s) or a
    PNG strip of the frames (".png", STRIP_COLUMNS a row). Atomic; returns the path."""
    from PIL import Image

    path = Path(path)
    images = frames_with_captions(frames, actions, end)
    buf = io.BytesIO()
    if path.suffix.lower() == ".gif":
        durations = [400] * (len(images) - 1) + [2000]
        images[0].save(buf, format="GIF", save_all=True, append_images=images[1:], duration=durations, loop=0)
    elif path.suffix.lower() == ".png":
        w, h = images[0].size
        cols = min(STRIP_COLUMNS, len(images))
        rows = -(-len(images) // cols)
        strip = Image.new("RGB", (cols * (w + 2), rows * (h + 2)), (255, 255, 255))
        for i, im in enumerate(images):
            strip.paste(im, ((i % cols) * (w + 2), (i // cols) * (h + 2)))
        strip.save(buf, format="PNG")
    else:
        raise ValueError(f"an episode is written as .gif or .png, got {str(path)!r}")
    atomic_write_bytes(path, buf.getvalue())
    return path
