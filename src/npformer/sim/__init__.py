"""The gripper world: a closed-loop tabletop in which a policy observes a 48 x 48 image and an
instruction, acts (a move and a gripper command), and observes again.

- ``world``: the state, the dynamics and how episodes are drawn; ``render``: the image.
- ``env``: ``GripperEnv`` (Gymnasium's API) and ``register()`` for ``gymnasium.make("npformer/Gripper-v0")``.
- ``expert``: ``expert_action(info)``, the scripted expert; ``demos``: DART demonstrations.
- ``tokens``: ``ActionTokenizer``, actions as tokens; ``episodes``: batched evaluation and its scoring.

- ``language``: the palette and the instruction grammar, shared with ``data.tabletop``.

sim has its own layer, just below ``data``: it imports nothing from the data layer, and a task there
(``data.gripper``) imports it. Nothing here registers anything on import, and the names below load on
first use (``from npformer.sim import GripperEnv``), so that ``data.tabletop``, which reads the palette
from ``sim.language``, does not import gymnasium.
"""
import importlib

_WHERE = {"ENV_ID": "env", "GripperEnv": "env", "register": "env", "expert_action": "expert",
          **{name: "world" for name in ("GRIPPER_CLOSE", "GRIPPER_DONE", "GRIPPER_OPEN", "IMAGE_SIZE", "MAX_MOVE",
                                        "MAX_STEPS", "PATCH_SIZE", "World", "new_episode")}}

__all__ = ["ENV_ID", "GRIPPER_CLOSE", "GRIPPER_DONE", "GRIPPER_OPEN", "IMAGE_SIZE", "MAX_MOVE", "MAX_STEPS",
           "PATCH_SIZE", "GripperEnv", "World", "expert_action", "new_episode", "register"]


def __getattr__(name: str):
    if name in _WHERE:
        value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
