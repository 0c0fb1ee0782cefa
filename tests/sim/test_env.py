"""GripperEnv under Gymnasium: made by gymnasium.make after npformer.sim.register(), and passing its checker;
and the NumPy-only base when gymnasium is missing."""
import subprocess
import sys

import numpy as np

from npformer.sim import GripperEnv, expert_action

CHECK = """
import warnings
warnings.simplefilter("error")
import gymnasium
import numpy as np
from gymnasium.utils.env_checker import check_env
import npformer.sim
assert "npformer/Gripper-v0" not in gymnasium.registry, "registered on import"
npformer.sim.register()
npformer.sim.register()                                     # twice is fine
env = gymnasium.make("npformer/Gripper-v0")
assert isinstance(env.unwrapped, npformer.sim.GripperEnv)
check_env(env.unwrapped)
obs, info = env.reset(seed=4, options={"perturb": True, "split": "yellow_bowl"})
assert env.observation_space.contains(obs) and info["target"] == ("yellow", "bowl")
for _ in range(60):
    obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
    assert env.observation_space.contains(obs)
    if terminated or truncated:
        break
print("ok", terminated or truncated)
"""

FALLBACK = """
import sys
sys.modules["gymnasium"] = None                             # as if it were not installed
import numpy as np
import npformer.sim
env = npformer.sim.GripperEnv()
assert type(env).__mro__[1].__name__ == "NumpyEnv" and env.observation_space is None
obs, info = env.reset(seed=21, options={"perturb": True})
obs, *_ = env.step({"move": np.array([0.5, -0.25], np.float32), "gripper": 1})
print(obs["image"].tobytes().hex())
try:
    npformer.sim.register()
except ImportError as e:
    print("ImportError", "gymnasium" in str(e))
"""


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_gymnasium_makes_it_and_its_checker_passes_without_a_warning():
    assert _run(CHECK).split() == ["ok", "True"]


def test_without_gymnasium_a_numpy_base_gives_the_same_bits():
    out = _run(FALLBACK).split("\n")
    env = GripperEnv()
    env.reset(seed=21, options={"perturb": True})
    obs, *_ = env.step({"move": np.array([0.5, -0.25], np.float32), "gripper": 1})
    assert out[0] == obs["image"].tobytes().hex()
    assert out[1] == "ImportError True"


def test_reward_is_one_on_the_last_step_of_a_success_only():
    env = GripperEnv()
    obs, info = env.reset(seed=3)
    rewards, terminated, truncated = [], False, False
    while not (terminated or truncated):
        obs, r, terminated, truncated, info = env.step(expert_action(info))
        rewards.append(r)
    assert terminated and not truncated and info["success"]
    assert rewards[-1] == 1.0 and set(rewards[:-1]) == {0.0}
    env.reset(seed=3)
    for _ in range(50):
        obs, r, terminated, truncated, info = env.step({"move": np.zeros(2, np.float32), "gripper": 0})
        assert r == 0.0
    assert truncated and not terminated


def test_bad_actions_name_what_is_wrong():
    env = GripperEnv()
    env.reset(seed=0)
    for action, word in (({"move": [0, 0]}, "keys"), ({"move": [0, 0, 0], "gripper": 0}, "move"),
                         ({"move": [0, 0], "gripper": 3}, "gripper"), ({"move": [0, 0], "gripper": 1.0}, "gripper")):
        try:
            env.step(action)
        except ValueError as e:
            assert word in str(e)
        else:
            raise AssertionError(f"{action} was accepted")
