"""``npformer.load_policy(RUN)``: a trained gripper run (``npformer train gripper``) as a policy that acts in
``npformer.sim.GripperEnv``.

    policy = npformer.load_policy("runs/gripper")            # greedy
    policy = npformer.load_policy("runs/gripper", temperature=0.7, seed=1)   # sampled
    obs, info = env.reset(seed=3)
    policy.reset()
    action = policy.act(obs)                                  # {"move": float32 (2,), "gripper": 0 | 1 | 2}
"""
from __future__ import annotations

from ..data.gripper_policy import GripperPolicy
from .checkpoint import load_run


def load_policy(run_dir, temperature: float = 0.0, seed: int | None = None) -> GripperPolicy:
    """The policy of the gripper run in ``run_dir`` (its model in eval mode, its action tokenizer from
    config.json, its text reader). temperature 0 is greedy; > 0 samples each token with a generator
    seeded by ``seed``. A run of another task is a ValueError naming both."""
    r = load_run(run_dir, task="gripper")
    return r.task.policy(r.model, temperature=temperature, seed=seed)
