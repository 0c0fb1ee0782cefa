"""The palette and the instruction grammar both tabletop worlds share: the one-shot scenes of
``data.tabletop`` and the closed-loop gripper world of ``sim``.

Colours and containers (name -> RGB in [0, 1]), the table's colour, the held-out pairing, the instruction
templates, and reading an instruction back (``tokenize``, ``parse``). It lives here, below ``data``, so that
the world imports nothing from the data layer and a task in ``data`` may import the world.
"""
from __future__ import annotations

import re

import numpy as np

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


def make_instruction(colour: str, container: str, u: np.ndarray) -> str:
    """An instruction for (colour, container); ``u`` (3,) uniforms in [0, 1) pick the template,
    the block noun and the preposition."""
    t = TEMPLATES[int(u[0] * len(TEMPLATES))]
    return t.format(c=colour, k=container, b=BLOCK_NOUNS[int(u[1] * len(BLOCK_NOUNS))],
                    **{"in": PREPOSITIONS[int(u[2] * len(PREPOSITIONS))]})


def tokenize(instruction: str) -> list[str]:
    """Lower-case words; punctuation is dropped."""
    return re.sub(r"[^a-z\s]", " ", instruction.lower()).split()


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
