"""Batched evaluation and its scoring, on episodes whose result is known by construction."""
import numpy as np
import pytest

from npformer.sim import GRIPPER_CLOSE, GRIPPER_OPEN, MAX_STEPS, expert_action, new_episode
from npformer.sim.episodes import EVAL_STREAM, outcome, play, run_episodes, wilson
from npformer.sim.world import CONTAINER_NAMES, World, episode_seed


def test_wilson_pins_0_of_50():
    lo, hi = wilson(0, 50)
    assert lo == 0.0 and hi == pytest.approx(3.8416 / 53.8416, rel=1e-12)   # z^2 / (n + z^2): [0, 0.0713...]
    assert int(hi * 10_000) / 10_000 == 0.0713
    lo, hi = wilson(50, 50)
    assert hi == 1.0 and lo == pytest.approx(1 - 3.8416 / 53.8416, rel=1e-12)
    lo, hi = wilson(20, 40)                                       # symmetric about one half
    assert lo + hi == pytest.approx(1.0)


class Replay:
    """Plays recorded action sequences; episode i is live while its sequence lasts, so the live set (and
    so which row is which episode) follows from the lengths, as a batched runner must give it."""

    def __init__(self, sequences: list[list[dict]]) -> None:
        self.sequences, self.t = sequences, 0

    def __call__(self, images, instructions):
        live = [s for s in self.sequences if len(s) > self.t]
        assert images.shape == (len(live), 48, 48, 3) and images.dtype == np.uint8 and len(instructions) == len(live)
        moves = np.stack([s[self.t]["move"] for s in live])
        gripper = np.array([s[self.t]["gripper"] for s in live])
        self.t += 1
        return moves, gripper


def _expert_run(seed: int, split: str, target=None) -> list[dict]:
    w = new_episode(np.random.default_rng(seed), split)
    actions = []
    while not w.over:
        info = w.info()
        if target is not None:
            info["target"] = target(w)
        actions.append(expert_action(info))
        w.step(actions[-1]["move"], actions[-1]["gripper"])
    return actions


def test_a_policy_replaying_the_expert_scores_100_percent():
    n, seed = 24, 5
    runs = [_expert_run(episode_seed(seed, EVAL_STREAM, i), "test") for i in range(n)]
    results, summary = run_episodes(Replay(runs), n, seed, split="test")
    assert summary["success"] == 1.0 and summary["outcomes"]["success"] == n and summary["truncated"] == 0
    assert summary["mean_steps"] == pytest.approx(np.mean([len(r) for r in runs]))
    assert [r.steps for r in results] == [len(r) for r in runs]
    assert summary["success_ci95"] == list(wilson(n, n))


def test_opening_over_the_wrong_container_scores_0_as_wrong_container():
    seeds = [s for s in range(200) if len(new_episode(np.random.default_rng(s), "test").containers) == 2][:16]
    wrong = lambda w: (w.target[0], next(k for k in CONTAINER_NAMES if k != w.target[1]))   # noqa: E731
    runs = [_expert_run(s, "test", wrong) for s in seeds]
    _, summary = play(Replay(runs), seeds, [{"split": "test"}] * len(seeds))
    assert summary["success"] == 0.0 and summary["outcomes"]["wrong_container"] == len(seeds)


def test_never_closing_scores_never_grasped():
    def act(images, instructions):
        return np.tile(np.float32([0.3, -0.2]), (len(images), 1)), np.full(len(images), GRIPPER_OPEN)

    seen: list = []
    _, summary = run_episodes(act, 10, seed=1, perturb=True, watch=lambda i, info, move, command: seen.append(i))
    assert summary["success"] == 0.0 and summary["outcomes"]["never_grasped"] == 10
    assert summary["truncated"] == 10 and summary["mean_steps"] == MAX_STEPS
    assert sorted(seen) == sorted(list(range(10)) * MAX_STEPS)       # watch sees every step of every episode


def _ended(seed: int, held=None, grasped=(), at=None) -> World:
    w = new_episode(np.random.default_rng(seed))
    w.grasped = list(grasped)
    if held is not None:
        w.held, w.closed = held, True
    if at is not None:
        w.blocks[w.target[0]] = at
    return w


def test_each_outcome_is_the_first_that_applies():
    seed = next(s for s in range(100) if len(new_episode(np.random.default_rng(s)).blocks) >= 3)
    w = new_episode(np.random.default_rng(seed))
    colour, container = w.target
    other = next(c for c in w.blocks if c != colour)
    assert outcome(_ended(seed, grasped=[colour], at=w.containers[container])) == "success"
    assert outcome(_ended(seed, grasped=[other])) == "wrong_block"
    assert outcome(_ended(seed, held=other, grasped=[other])) == "wrong_block"
    assert outcome(_ended(seed, grasped=[other, colour])) == "dropped"
    assert outcome(_ended(seed, held=colour, grasped=[colour])) == "held_at_end"
    assert outcome(_ended(seed)) == "never_grasped"
    if len(w.containers) == 2:
        wrong = next(k for k in w.containers if k != container)
        assert outcome(_ended(seed, grasped=[colour], at=w.containers[wrong])) == "wrong_container"


def test_instructions_and_bad_arguments():
    def act(images, instructions):
        assert instructions == ["put the green block in the bowl"] * len(images)
        return np.zeros((len(images), 2), np.float32), np.full(len(images), 2)

    results, summary = run_episodes(act, 3, seed=0, instructions=[("put the green block in the bowl", "green", "bowl")]
                                    * 3)
    assert [r.target for r in results] == [("green", "bowl")] * 3 and summary["mean_steps"] == 1.0
    with pytest.raises(ValueError, match="n must"):
        run_episodes(act, 0, seed=0)
    with pytest.raises(ValueError, match="instructions"):
        run_episodes(act, 2, seed=0, instructions=["put the red block in the box"])
    with pytest.raises(ValueError, match="act must return"):
        run_episodes(lambda i, t: (np.zeros((1, 2)), np.zeros(1, int)), 2, seed=0)
    assert GRIPPER_CLOSE == 1


def test_watch_sees_each_state_and_the_action_chosen_in_it():
    n, seed = 6, 2
    seeds = [episode_seed(seed, EVAL_STREAM, i) for i in range(n)]
    runs = [_expert_run(s, "test") for s in seeds]
    seen: dict = {}

    def watch(i, info, move, command):
        seen.setdefault(i, []).append((info["step"], command, expert_action(info)["gripper"]))
        assert np.array_equal(move, runs[i][info["step"]]["move"])

    play(Replay(runs), seeds, [{"split": "test", "perturb": False}] * n, watch=watch)
    assert sorted(seen) == list(range(n))
    for i, steps in seen.items():                     # every step once, in order, the expert's own command
        assert [s for s, _, _ in steps] == list(range(len(runs[i])))
        assert all(c == want for _, c, want in steps)
