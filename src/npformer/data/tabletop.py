"""A generated tabletop world for a tiny vision-language-action policy.

Scene: a 32 x 32 RGB image, a 4 x 4 grid of 8 x 8 cells (cell id = row * 4 + col). It holds
2 to 4 blocks of distinct colours (filled squares) and one or two containers (a box is a
hollow square, a bowl is a ring), every object in its own cell, with small jitter of
position, size and shade.
Instruction: names one block by colour and one container, with variations
("put the red block in the box", "pick up the blue cube and drop it into the bowl", ...).
Action: two discrete tokens, the cell to pick from and the cell to place in.

Held-out split: instructions that pair yellow with the bowl never appear in training
(``split="train"``); ``split="yellow_bowl"`` gives only those.

Dimension legend: B scenes, L words (padded), H = W = 32 pixels, C = 3 channels.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

GRID = 4                                    # cells per side
CELL = 8                                    # pixels per cell side
IMAGE_SIZE = GRID * CELL                    # 32
N_CELLS = GRID * GRID                       # 16
MAX_WORDS = 16                              # longest instruction, padded

COLOURS = {                                 # name -> RGB in [0, 1]
    "red": (0.85, 0.12, 0.10),
    "green": (0.12, 0.68, 0.20),
    "blue": (0.15, 0.30, 0.92),
    "yellow": (0.95, 0.85, 0.10),
    "purple": (0.58, 0.20, 0.75),
}
CONTAINERS = {                              # name -> RGB; the shape tells them apart too
    "box": (0.45, 0.26, 0.07),              # a hollow brown square
    "bowl": (0.22, 0.24, 0.30),             # a dark ring
}
TABLE = (0.86, 0.82, 0.72)                  # background
HELD_OUT = ("yellow", "bowl")               # the pairing never seen in training

# "{c}" colour, "{b}" block noun, "{k}" container, "{in}" a preposition into the container.
TEMPLATES = [
    "put the {c} {b} {in} the {k}",
    "place the {c} {b} {in} the {k}",
    "move the {c} {b} {in} the {k}",
    "drop the {c} {b} {in} the {k}",
    "pick up the {c} {b} and drop it {in} the {k}",
    "pick up the {c} {b} and put it {in} the {k}",
    # a few more of our own
    "grab the {c} {b} and place it {in} the {k}",
    "move the {c} {b} to the {k}",
    "take the {c} {b} to the {k}",
    "the {c} {b} goes {in} the {k}",
    "could you put the {c} {b} {in} the {k} please",
    "{in} the {k} put the {c} {b}",
    "find the {c} {b} and move it {in} the {k}",
]
BLOCK_NOUNS = ("block", "cube")
PREPOSITIONS = ("in", "into", "inside")
PAD = "<pad>"


def _vocabulary() -> list[str]:
    words = set(COLOURS) | set(CONTAINERS) | set(BLOCK_NOUNS) | set(PREPOSITIONS)
    for t in TEMPLATES:
        words |= {w for w in t.split() if not w.startswith("{")}
    return [PAD] + sorted(words)


VOCAB = _vocabulary()                       # word-level; id 0 is padding
WORD_TO_ID = {w: i for i, w in enumerate(VOCAB)}


@dataclass
class Scene:
    """One scene: its image and where everything is."""
    image: np.ndarray                       # (H, W, C) float32 in [0, 1]
    blocks: dict                            # colour -> cell id
    containers: dict                        # "box"/"bowl" -> cell id


# -- rendering ---------------------------------------------------------------------------------
def _draw(image, cell: int, kind: str, rgb, rng: np.random.Generator) -> None:
    """Draw one object into its cell, in place, with jitter of position, size and shade."""
    r0, c0 = (cell // GRID) * CELL, (cell % GRID) * CELL
    shade = np.clip(np.asarray(rgb) * rng.uniform(0.85, 1.12) + rng.uniform(-0.05, 0.05, 3), 0, 1)  # (3,)
    yy, xx = np.mgrid[0:CELL, 0:CELL]                             # (8, 8)
    if kind == "block":
        s = int(rng.integers(4, 6))                               # side 4 or 5 px
        oy, ox = rng.integers(0, CELL - s + 1, 2)
        m = (yy >= oy) & (yy < oy + s) & (xx >= ox) & (xx < ox + s)
    elif kind == "box":
        s = int(rng.integers(6, 8))                               # side 6 or 7 px, 1 px wall
        oy, ox = rng.integers(0, CELL - s + 1, 2)
        inside = (yy >= oy) & (yy < oy + s) & (xx >= ox) & (xx < ox + s)
        hole = (yy > oy) & (yy < oy + s - 1) & (xx > ox) & (xx < ox + s - 1)
        m = inside & ~hole
    else:                                                         # bowl: a ring
        cy, cx = rng.uniform(3.5, 4.5, 2)                         # centre, jittered
        d = np.hypot(yy + 0.5 - cy, xx + 0.5 - cx)                # distance of pixel centres
        r = rng.uniform(3.0, 3.6)
        m = (d <= r) & (d >= r - 1.4)
    image[r0:r0 + CELL, c0:c0 + CELL][m] = shade


def render_scene(rng: np.random.Generator, require: tuple[str, str] | None = None) -> Scene:
    """A random scene. ``require=(colour, container)`` makes sure both are in it."""
    n_blocks = int(rng.integers(2, 5))
    colours = list(rng.choice(sorted(COLOURS), n_blocks, replace=False))
    conts = [str(k) for k in rng.permutation(sorted(CONTAINERS))[: int(rng.integers(1, 3))]]
    if require is not None:
        colour, container = require
        if colour not in colours:
            colours[int(rng.integers(n_blocks))] = colour
        if container not in conts:
            conts[0] = container
    cells = rng.choice(N_CELLS, len(colours) + len(conts), replace=False)  # every object its own cell
    table = np.clip(np.asarray(TABLE) * rng.uniform(0.95, 1.05), 0, 1)
    image = np.empty((IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.float32)        # (H, W, C)
    image[...] = table
    blocks = {str(c): int(cell) for c, cell in zip(colours, cells)}
    containers = {k: int(cell) for k, cell in zip(conts, cells[len(colours):])}
    for c, cell in blocks.items():
        _draw(image, cell, "block", COLOURS[c], rng)
    for k, cell in containers.items():
        _draw(image, cell, k, CONTAINERS[k], rng)
    return Scene(image, blocks, containers)


# -- instructions ------------------------------------------------------------------------------
def make_instruction(colour: str, container: str, rng: np.random.Generator) -> str:
    t = TEMPLATES[int(rng.integers(len(TEMPLATES)))]
    return t.format(c=colour, k=container, b=BLOCK_NOUNS[int(rng.integers(2))],
                    **{"in": PREPOSITIONS[int(rng.integers(3))]})


def tokenize(instruction: str) -> list[str]:
    """Lower-case words; punctuation is dropped."""
    return re.sub(r"[^a-z\s]", " ", instruction.lower()).split()


def encode(instruction: str, max_words: int = MAX_WORDS) -> np.ndarray:
    """Word ids (L,) padded with 0. Unknown words or too many words raise ValueError."""
    words = tokenize(instruction)
    if not words:
        raise ValueError("the instruction is empty")
    unknown = [w for w in words if w not in WORD_TO_ID]
    if unknown:
        raise ValueError(f"unknown word {unknown[0]!r} in the instruction; known words: {' '.join(VOCAB[1:])}")
    if len(words) > max_words:
        raise ValueError(f"the instruction has {len(words)} words, at most {max_words} are allowed")
    ids = np.zeros(max_words, dtype=np.int64)                     # (L,)
    ids[:len(words)] = [WORD_TO_ID[w] for w in words]
    return ids


def parse(instruction: str) -> tuple[str, str]:
    """The (colour, container) an instruction names, or ValueError if it names not exactly one of each."""
    words = tokenize(instruction)
    colours = sorted({w for w in words if w in COLOURS})
    conts = sorted({w for w in words if w in CONTAINERS})
    if len(colours) != 1:
        raise ValueError(f"the instruction must name exactly one block colour ({', '.join(COLOURS)}), "
                         f"found {colours or 'none'}")
    if len(conts) != 1:
        raise ValueError(f"the instruction must name exactly one container (box or bowl), found {conts or 'none'}")
    return colours[0], conts[0]


def check_instruction(scene: Scene, instruction: str) -> tuple[str, str]:
    """Validate an instruction against a scene before acting on it; returns (colour, container)."""
    encode(instruction)
    colour, container = parse(instruction)
    if colour not in scene.blocks:
        raise ValueError(f"there is no {colour} block in this scene (blocks: {', '.join(sorted(scene.blocks))})")
    if container not in scene.containers:
        raise ValueError(f"there is no {container} in this scene (containers: {', '.join(sorted(scene.containers))})")
    return colour, container


# -- episodes ----------------------------------------------------------------------------------
def sample_episode(rng: np.random.Generator, split: str = "train"):
    """One (scene, instruction, pick cell, place cell).

    split: "train"/"test" never pair yellow with the bowl; "yellow_bowl" always does;
    "all" samples every pairing the scene allows.
    """
    if split not in ("train", "test", "yellow_bowl", "all"):
        raise ValueError(f"split must be 'train', 'test', 'yellow_bowl' or 'all', got {split!r}")
    scene = render_scene(rng, require=HELD_OUT if split == "yellow_bowl" else None)
    if split == "yellow_bowl":
        colour, container = HELD_OUT
    else:
        pairs = [(c, k) for c in sorted(scene.blocks) for k in sorted(scene.containers)
                 if split == "all" or (c, k) != HELD_OUT]
        colour, container = pairs[int(rng.integers(len(pairs)))]
    text = make_instruction(colour, container, rng)
    return scene, text, scene.blocks[colour], scene.containers[container]


def sample_batch(rng: np.random.Generator, n: int, split: str = "train", max_words: int = MAX_WORDS):
    """Returns (word_ids (B, L) int64, images (B, H, W, C) float32, actions (B, 2) int64 [pick, place],
    texts list[str])."""
    ids = np.zeros((n, max_words), dtype=np.int64)                # (B, L)
    images = np.empty((n, IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.float32)  # (B, H, W, C)
    actions = np.empty((n, 2), dtype=np.int64)                    # (B, 2)
    texts = []
    for i in range(n):
        scene, text, pick, place = sample_episode(rng, split)
        ids[i] = encode(text, max_words)
        images[i] = scene.image
        actions[i] = pick, place
        texts.append(text)
    return ids, images, actions, texts
