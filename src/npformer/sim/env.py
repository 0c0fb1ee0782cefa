"""``GripperEnv``: the gripper world behind Gymnasium's API.

    env = GripperEnv()
    obs, info = env.reset(seed=0, options={"instruction": None, "perturb": False, "split": "train"})
    obs, reward, terminated, truncated, info = env.step({"move": np.zeros(2, np.float32), "gripper": 0})

obs = {"image": (48, 48, 3) uint8, "instruction": str}. When gymnasium imports, ``GripperEnv`` subclasses
``gymnasium.Env`` and has its spaces; without it, a NumPy-only base keeps the same methods (its spaces are
None). Seeding is Gymnasium's: ``reset(seed=s)`` draws everything of the episode (scene, instruction,
perturbations) from ``np.random.default_rng(s)``; ``reset()`` with no seed continues the stream.

Registration: nothing registers on import. ``npformer.sim.register()`` adds "npformer/Gripper-v0" to
Gymnasium's registry (once), after which ``gymnasium.make("npformer/Gripper-v0")`` works.
"""
from __future__ import annotations

import string
from typing import Any

import numpy as np

from .render import render
from .world import IMAGE_SIZE, MAX_STEPS, SPLITS, World, new_episode

ENV_ID = "npformer/Gripper-v0"
MAX_CHARS = 200                     # the longest instruction the observation space holds
# every instruction: the templates' lower-case words and spaces, and what a hand-written one may add
CHARSET = string.ascii_letters + string.digits + " ,.;:'\"!?-()<>"
OPTIONS = ("instruction", "target", "perturb", "split")

try:
    import gymnasium
    from gymnasium import spaces
except ImportError:                 # gymnasium is optional at runtime
    gymnasium = None                # type: ignore[assignment]


class NumpyEnv:
    """The base without gymnasium: ``reset(seed=...)`` seeds ``np_random`` as Gymnasium does."""

    metadata: dict[str, Any] = {}
    render_mode: str | None = None
    observation_space: Any = None
    action_space: Any = None
    _np_random: np.random.Generator | None = None

    @property
    def np_random(self) -> np.random.Generator:
        if self._np_random is None:
            self._np_random = np.random.default_rng()
        return self._np_random

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if seed is not None:
            self._np_random = np.random.default_rng(seed)
        return None

    def close(self) -> None:
        return None

    @property
    def unwrapped(self):
        return self


_Base: Any = gymnasium.Env if gymnasium is not None else NumpyEnv


def _spaces():
    """(observation_space, action_space), or (None, None) without gymnasium."""
    if gymnasium is None:
        return None, None
    obs = spaces.Dict({"image": spaces.Box(0, 255, (IMAGE_SIZE, IMAGE_SIZE, 3), np.uint8),
                       "instruction": spaces.Text(MAX_CHARS, min_length=1, charset=CHARSET)})
    act = spaces.Dict({"move": spaces.Box(-1.0, 1.0, (2,), np.float32), "gripper": spaces.Discrete(3)})
    return obs, act


def check_action(action) -> tuple[np.ndarray, int]:
    """(move (2,) float64, gripper int) of an action dict, or ValueError saying what is wrong."""
    if not isinstance(action, dict) or set(action) != {"move", "gripper"}:
        raise ValueError(f"an action is a dict with keys 'move' and 'gripper', got {action!r}")
    move = np.asarray(action["move"], dtype=np.float64).reshape(-1)
    if move.shape != (2,) or not np.isfinite(move).all():
        raise ValueError(f"action['move'] must be 2 finite numbers in [-1, 1], got {action['move']!r}")
    g = action["gripper"]
    if isinstance(g, np.ndarray) and g.shape == ():
        g = g.item()
    if isinstance(g, (bool, np.bool_)) or not isinstance(g, (int, np.integer)) or int(g) not in (0, 1, 2):
        raise ValueError(f"action['gripper'] must be 0 (open), 1 (close) or 2 (done), got {g!r}")
    return move, int(g)


def check_options(options: dict | None) -> dict:
    """The reset options with their defaults, or ValueError naming the bad one."""
    options = {} if options is None else options
    if not isinstance(options, dict):
        raise ValueError(f"options must be a dict, got {type(options).__name__}")
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValueError(f"unknown option {unknown[0]!r}; options: {', '.join(OPTIONS)}")
    out = {"instruction": options.get("instruction"), "target": options.get("target"),
           "perturb": options.get("perturb", False), "split": options.get("split", "train")}
    if out["split"] not in SPLITS:
        raise ValueError(f"options['split'] must be one of {', '.join(SPLITS)}, got {out['split']!r}")
    if not isinstance(out["perturb"], (bool, np.bool_)):
        raise ValueError(f"options['perturb'] must be True or False, got {out['perturb']!r}")
    text = out["instruction"]
    if text is not None:
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"options['instruction'] must be a non-empty string, got {text!r}")
        if len(text) > MAX_CHARS:
            raise ValueError(f"options['instruction'] has {len(text)} characters, at most {MAX_CHARS} are allowed")
        bad = sorted(set(text) - set(CHARSET))
        if bad:
            raise ValueError(f"options['instruction'] holds {bad[0]!r}, outside the observation's characters")
    target = out["target"]
    if target is not None and (not isinstance(target, (tuple, list)) or len(target) != 2):
        raise ValueError(f"options['target'] must be (colour, container), got {target!r}")
    return out


class GripperEnv(_Base):
    """Put the named block in the named container, seen only through a 48 x 48 image and the instruction.

    Reward 1.0 on the final step of a successful episode, else 0. "done" sets ``terminated``; the 50-step
    limit sets ``truncated``. ``info``: gripper (x, y, closed), held (colour or None), blocks {colour: (x, y)},
    containers {name: (x, y)}, target (colour, container), success, plus step, instruction, in_container,
    grasped and events (``World.info``).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 4}

    def __init__(self, render_mode: str | None = None) -> None:
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.render_mode = render_mode
        self.observation_space, self.action_space = _spaces()
        self.world: World | None = None
        self._image: np.ndarray | None = None

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        opts = check_options(options)
        super().reset(seed=seed)
        self.world = new_episode(self.np_random, split=opts["split"], instruction=opts["instruction"],
                                 target=opts["target"], perturb=bool(opts["perturb"]))
        return self._observe(), self.world.info()

    def step(self, action):
        if self.world is None:
            raise RuntimeError("call reset before step")
        move, gripper = check_action(action)
        self.world.step(move, gripper)
        obs, info = self._observe(), self.world.info()
        over = self.world.over
        reward = 1.0 if over and info["success"] else 0.0
        return obs, reward, self.world.ended, self.world.truncated, info

    def render(self):
        """The current image (H, W, 3) uint8 (render_mode "rgb_array")."""
        if self._image is None:
            return None
        return self._image.copy()

    def _observe(self) -> dict:
        assert self.world is not None
        self._image = render(self.world)
        return {"image": self._image.copy(), "instruction": self.world.instruction}


def register() -> None:
    """Add ``ENV_ID`` ("npformer/Gripper-v0") to Gymnasium's registry, once; ImportError without gymnasium."""
    if gymnasium is None:
        raise ImportError("npformer.sim.register needs gymnasium (pip install 'gymnasium>=1.0')")
    if ENV_ID not in gymnasium.registry:
        gymnasium.register(id=ENV_ID, entry_point="npformer.sim.env:GripperEnv", max_episode_steps=MAX_STEPS)
