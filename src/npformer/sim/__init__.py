"""The gripper world: a closed-loop tabletop in which a policy observes a 48 x 48 image and an
instruction, acts (a move and a gripper command), and observes again.

- ``world``: the state, the dynamics and how episodes are drawn; ``render``: the image.
- ``env``: ``GripperEnv`` (Gymnasium's API) and ``register()`` for ``gymnasium.make("npformer/Gripper-v0")``.
- ``expert``: ``expert_action(info)``, the scripted expert; ``demos``: DART demonstrations.
- ``tokens``: ``ActionTokenizer``, actions as tokens; ``episodes``: batched evaluation and its scoring.

sim sits in the data layer: it reuses ``data.tabletop``'s palette and instruction grammar. Nothing here
registers anything on import.
"""
from .env import ENV_ID, GripperEnv, register
from .expert import expert_action
from .world import (
    GRIPPER_CLOSE,
    GRIPPER_DONE,
    GRIPPER_OPEN,
    IMAGE_SIZE,
    MAX_MOVE,
    MAX_STEPS,
    PATCH_SIZE,
    World,
    new_episode,
)

__all__ = ["ENV_ID", "GRIPPER_CLOSE", "GRIPPER_DONE", "GRIPPER_OPEN", "IMAGE_SIZE", "MAX_MOVE", "MAX_STEPS",
           "PATCH_SIZE", "GripperEnv", "World", "expert_action", "new_episode", "register"]
