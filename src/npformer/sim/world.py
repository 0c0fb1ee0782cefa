"""The gripper world: a 2-D tabletop in [0, 1]^2 with blocks, containers and one gripper, acted on over time.

Coordinates: x to the right, y downward (as image rows), both in [0, 1] of the table. A step:

1. **move**: the gripper moves by ``clip(move, -1, 1) * MAX_MOVE`` on each axis and stays on the table;
   a held block moves with it.
2. **gripper command**: ``GRIPPER_OPEN`` releases a held block where the gripper is (over a container's
   inside it is then in that container; anywhere else it lies on the table). ``GRIPPER_CLOSE`` on an open
   gripper picks up the nearest block whose centre is within ``PICK_RADIUS`` (half a block's side,
   Euclidean) of the gripper, if any, and the gripper is then closed, holding it or not; closing a closed
   gripper does nothing, so a closed, empty gripper must open before it can grasp. ``GRIPPER_DONE`` ends
   the episode (``terminated``).
3. **perturbations** (``perturb=True`` only), drawn when the episode is made, so they do not depend on
   the actions: at step ``move_at`` (1 to 3), if the target block has never been grasped, it moves to
   ``move_to``, a place free in the initial scene; and at every step t a held block slips and falls where
   it is when ``slips[t] < SLIP_P``, leaving the gripper closed and empty.

The episode is truncated after ``MAX_STEPS`` steps. It succeeds when, at its end, the named block is not
held and its centre lies inside the named container. ``info`` (``World.info``) tells all of it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .language import COLOURS, CONTAINERS, HELD_OUT, TABLE, make_instruction, parse

IMAGE_SIZE = 48                     # pixels a side
PATCH_SIZE = 8                      # a 6 x 6 grid of patches
MAX_STEPS = 50                      # the step limit (truncated)
MAX_MOVE = 0.08                     # the largest move per step and axis, of the table
BLOCK_SIZE = 0.12                   # a block's side (about 6 pixels)
PICK_RADIUS = BLOCK_SIZE / 2        # closing this near a block's centre picks it
CONTAINER_SIZE = 0.24               # a box's side, a bowl's diameter (about 11.5 pixels)
CONTAINER_WALL = 0.035              # the drawn wall
CONTAINER_INSIDE = CONTAINER_SIZE / 2 - CONTAINER_WALL  # a box's inside: |dx|, |dy| <= this; a bowl's: radius
SLIP_P = 0.03                       # chance per step that a held block slips (perturb only)
MOVE_AT = (1, 3)                    # the target block moves at a step drawn from this range (perturb only)

GRIPPER_OPEN, GRIPPER_CLOSE, GRIPPER_DONE = 0, 1, 2
COMMANDS = ("open", "close", "done")
SPLITS = ("train", "test", "yellow_bowl", "all")     # "all": every pairing, the held-out one too (a control)

COLOUR_NAMES = list(COLOURS)
CONTAINER_NAMES = list(CONTAINERS)
# centre-to-centre gaps (Chebyshev) that keep the objects apart when a scene is made
_GAP_CONTAINERS = CONTAINER_SIZE + 0.06
_GAP_BLOCK_CONTAINER = (CONTAINER_SIZE + BLOCK_SIZE) / 2 + 0.04
_GAP_BLOCKS = BLOCK_SIZE + 0.04
_GAP_GRIPPER = 0.25                 # the gripper starts this far from the target block
_GAP_MOVE = 0.25                    # a moved target lands this far from where it was
_TRIES = 2000


def inside(container: str, centre, point) -> bool:
    """Whether ``point`` (x, y) lies inside ``container`` ("box": a square; "bowl": a disc) at ``centre``."""
    dx, dy = point[0] - centre[0], point[1] - centre[1]
    if container == "box":
        return max(abs(dx), abs(dy)) <= CONTAINER_INSIDE
    return dx * dx + dy * dy <= CONTAINER_INSIDE * CONTAINER_INSIDE


@dataclass
class World:
    """One episode's state. Positions are (x, y) float tuples in [0, 1]."""
    instruction: str
    target: tuple[str, str]                     # (colour, container) the instruction names
    blocks: dict[str, tuple[float, float]]      # colour -> centre
    containers: dict[str, tuple[float, float]]  # "box"/"bowl" -> centre
    shades: dict[str, tuple[float, float, float]]  # object name -> RGB in [0, 1]
    table: tuple[float, float, float]           # the table's RGB
    gripper: tuple[float, float]
    perturb: bool
    move_at: int                                # the step the target moves at (perturb, before a grasp)
    move_to: tuple[float, float]                # where it moves
    slips: np.ndarray                           # (MAX_STEPS,) uniforms: step t slips when < SLIP_P
    closed: bool = False
    held: str | None = None
    steps: int = 0
    ended: bool = False                         # "done" was given
    grasped: list[str] = field(default_factory=list)   # colours grasped, in order (repeats kept)
    events: list[tuple[int, str, str]] = field(default_factory=list)  # (step, "moved"/"slipped", colour)

    def container_of(self, colour: str) -> str | None:
        """The container whose inside holds the block ``colour`` (not held), or None."""
        if colour == self.held:
            return None
        for name, centre in self.containers.items():
            if inside(name, centre, self.blocks[colour]):
                return name
        return None

    @property
    def success(self) -> bool:
        """The named block lies inside the named container (not held)."""
        colour, container = self.target
        return self.container_of(colour) == container

    @property
    def truncated(self) -> bool:
        return not self.ended and self.steps >= MAX_STEPS

    @property
    def over(self) -> bool:
        return self.ended or self.steps >= MAX_STEPS

    def info(self) -> dict:
        """What anyone outside the policy needs to check the episode (the env's ``info``)."""
        return {"gripper": (self.gripper[0], self.gripper[1], self.closed), "held": self.held,
                "blocks": dict(self.blocks), "containers": dict(self.containers), "target": self.target,
                "success": self.success, "step": self.steps, "instruction": self.instruction,
                "in_container": {c: self.container_of(c) for c in self.blocks},
                "grasped": list(self.grasped), "events": list(self.events)}

    def step(self, move, command: int) -> None:
        """One step: move, then the gripper command, then the perturbations (see the module's docstring)."""
        if self.over:
            raise RuntimeError("the episode has ended; reset before stepping again")
        m = np.asarray(move, dtype=np.float64).reshape(-1)
        if m.shape != (2,) or not np.isfinite(m).all():
            raise ValueError(f"move must be 2 finite numbers, got {move!r}")
        if command not in (GRIPPER_OPEN, GRIPPER_CLOSE, GRIPPER_DONE):
            raise ValueError(f"gripper must be 0 (open), 1 (close) or 2 (done), got {command!r}")
        m = np.clip(m, -1.0, 1.0) * MAX_MOVE
        self.gripper = (min(max(self.gripper[0] + float(m[0]), 0.0), 1.0),
                        min(max(self.gripper[1] + float(m[1]), 0.0), 1.0))
        if self.held is not None:
            self.blocks[self.held] = self.gripper
        if command == GRIPPER_OPEN:
            self.held, self.closed = None, False            # a held block stays where the gripper is
        elif command == GRIPPER_CLOSE and not self.closed:
            self.closed = True
            self.held = self._nearest_block()
            if self.held is not None:
                self.blocks[self.held] = self.gripper
                self.grasped.append(self.held)
        elif command == GRIPPER_DONE:
            self.ended = True
        self.steps += 1
        if self.perturb and not self.ended:
            self._perturb()

    def _nearest_block(self) -> str | None:
        best, best_d2 = None, PICK_RADIUS * PICK_RADIUS
        for colour, (x, y) in self.blocks.items():
            d2 = (x - self.gripper[0]) ** 2 + (y - self.gripper[1]) ** 2
            if d2 <= best_d2:
                best, best_d2 = colour, d2
        return best

    def _perturb(self) -> None:
        colour = self.target[0]
        if self.steps == self.move_at and colour not in self.grasped and self.held != colour:
            self.blocks[colour] = self.move_to
            self.events.append((self.steps, "moved", colour))
        if self.held is not None and self.slips[self.steps - 1] < SLIP_P:
            self.events.append((self.steps, "slipped", self.held))
            self.held = None                                 # falls where it is; the gripper stays closed


# -- making an episode ---------------------------------------------------------------------------
def _far(p, others, gap: float) -> bool:
    return all(max(abs(p[0] - q[0]), abs(p[1] - q[1])) >= gap for q in others)


def _place(rng: np.random.Generator, lo: float, placed: list[tuple[tuple[float, float], float]]):
    """A point in [lo, 1 - lo]^2 at least each (point, gap) of ``placed`` away (Chebyshev)."""
    for _ in range(_TRIES):
        p = (float(rng.uniform(lo, 1 - lo)), float(rng.uniform(lo, 1 - lo)))
        if all(_far(p, [q], gap) for q, gap in placed):
            return p
    raise RuntimeError("could not place an object without overlap")


def _choose(rng: np.random.Generator, split: str, require: tuple[str, str] | None):
    """The scene's colours and containers, the first of each in ``require`` when given."""
    n_blocks, n_conts = int(rng.integers(2, 5)), int(rng.integers(1, 3))
    colours = [COLOUR_NAMES[i] for i in rng.permutation(len(COLOUR_NAMES))]
    conts = [CONTAINER_NAMES[i] for i in rng.permutation(len(CONTAINER_NAMES))]
    if require is None and split == "yellow_bowl":
        require = HELD_OUT
    if require is not None:
        for names, want, n in ((colours, require[0], n_blocks), (conts, require[1], n_conts)):
            names.remove(want)
            names.insert(int(rng.integers(0, n)), want)
    return colours[:n_blocks], conts[:n_conts]


def new_episode(rng: np.random.Generator, split: str = "train", instruction: str | None = None,
                target: tuple[str, str] | None = None, perturb: bool = False) -> World:
    """A fresh episode drawn from ``rng``: the scene, the instruction and the perturbations.

    Without ``instruction`` one is drawn from ``split``: "train" and "test" never pair yellow with the bowl,
    "yellow_bowl" always does, "all" draws among every pairing the scene allows (a control, as tabletop's).
    With one, ``target`` (colour, container) says what it asks; without a target
    it is read from the instruction's words (``language.parse``). The scene always holds the target. The
    perturbations are drawn whether or not ``perturb`` is on, so both see the same scene.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    if instruction is not None:
        if not isinstance(instruction, str) or not instruction.strip():
            raise ValueError(f"instruction must be a non-empty string, got {instruction!r}")
        target = parse(instruction) if target is None else (str(target[0]), str(target[1]))
        if target[0] not in COLOURS:
            raise ValueError(f"unknown colour {target[0]!r}; colours: {', '.join(COLOUR_NAMES)}")
        if target[1] not in CONTAINERS:
            raise ValueError(f"unknown container {target[1]!r}; containers: {', '.join(CONTAINER_NAMES)}")
    elif target is not None:
        raise ValueError("a target needs the instruction that names it")
    colours, conts = _choose(rng, split, target)
    if instruction is None:
        if split == "yellow_bowl":
            target = HELD_OUT
        else:
            pairs = [(c, k) for c in colours for k in conts if split == "all" or (c, k) != HELD_OUT]
            target = pairs[int(rng.integers(0, len(pairs)))]
        instruction = make_instruction(target[0], target[1], rng.random(3))
    assert target is not None

    placed: list[tuple[tuple[float, float], float]] = []
    containers = {}
    for k in conts:
        containers[k] = _place(rng, CONTAINER_SIZE / 2 + 0.02, placed)
        placed.append((containers[k], _GAP_CONTAINERS))
    blocks = {}
    others = [(p, _GAP_BLOCK_CONTAINER) for p in containers.values()]
    for c in colours:
        blocks[c] = _place(rng, BLOCK_SIZE / 2 + 0.02, others)
        others.append((blocks[c], _GAP_BLOCKS))
    gripper = _place(rng, 0.05, [(blocks[target[0]], _GAP_GRIPPER)])
    shades = {name: shade(rng, rgb) for name, rgb in [(c, COLOURS[c]) for c in colours]
              + [(k, CONTAINERS[k]) for k in conts]}
    table = tuple(float(v) for v in np.clip(np.asarray(TABLE) * rng.uniform(0.96, 1.04), 0, 1))

    move_at = int(rng.integers(MOVE_AT[0], MOVE_AT[1] + 1))
    free = others + [(blocks[target[0]], _GAP_MOVE)]
    move_to = _place(rng, BLOCK_SIZE / 2 + 0.02, free)
    slips = rng.random(MAX_STEPS)
    return World(instruction=instruction, target=(target[0], target[1]), blocks=blocks, containers=containers,
                 shades=shades, table=(table[0], table[1], table[2]), gripper=gripper, perturb=bool(perturb),
                 move_at=move_at, move_to=move_to, slips=slips)


def shade(rng: np.random.Generator, rgb) -> tuple[float, float, float]:
    """A palette colour with a small jitter of brightness and hue."""
    v = np.clip(np.asarray(rgb) * rng.uniform(0.9, 1.08) + rng.uniform(-0.04, 0.04, 3), 0, 1)
    return float(v[0]), float(v[1]), float(v[2])


def episode_seed(seed: int, stream: int, i: int) -> int:
    """The integer seed of episode ``i`` of ``stream`` under ``seed``: 63 bits of SeedSequence([seed, stream, i]),
    so streams never share an episode."""
    state = np.random.SeedSequence([int(seed), int(stream), int(i)]).generate_state(2, np.uint32)
    return (int(state[0]) << 31) | (int(state[1]) >> 1)
