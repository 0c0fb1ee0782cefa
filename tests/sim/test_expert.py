"""The scripted expert: it always succeeds on unperturbed episodes, needs the instruction to, and acts
sensibly in states off its own path."""
import numpy as np
import pytest

from npformer.sim import GRIPPER_CLOSE, GRIPPER_DONE, GRIPPER_OPEN, expert_action, new_episode
from npformer.sim.expert import CLOSE_WITHIN, EXPERTS, OPEN_WITHIN, straight_action
from npformer.sim.world import CONTAINER_INSIDE, CONTAINER_NAMES, PICK_RADIUS, World


def _finish(w: World, target=None, expert=expert_action) -> World:
    """Run the expert (told ``target``, default the instruction's) to the episode's end, without rendering."""
    while not w.over:
        info = w.info()
        if target is not None:
            info["target"] = target
        a = expert(info)
        w.step(a["move"], a["gripper"])
    return w


@pytest.mark.parametrize("name", sorted(EXPERTS))
def test_the_expert_wins_every_unperturbed_episode_of_1000(name):
    steps, fails = [], []
    for seed in range(1000):
        w = _finish(new_episode(np.random.default_rng(seed), "train" if seed % 2 else "test"), expert=EXPERTS[name])
        if not (w.success and w.ended):
            fails.append(seed)
        steps.append(w.steps)
    assert fails == []
    assert np.mean(steps) < 20                  # short episodes: about 14 steps


@pytest.mark.parametrize("name", sorted(EXPERTS))
def test_a_random_target_wins_at_most_half(name):
    rng = np.random.default_rng(0)
    wins = 0
    for seed in range(1000):
        w = new_episode(np.random.default_rng(seed))
        fake = (list(w.blocks)[rng.integers(len(w.blocks))], list(w.containers)[rng.integers(len(w.containers))])
        wins += _finish(w, fake, EXPERTS[name]).success
    assert wins <= 500
    assert wins >= 100                          # it does finish: a guess is right about a quarter of the time


def _two_containers(n: int):
    """Seeds of scenes with both containers and 3 or more blocks."""
    seeds = []
    for seed in range(10 * n):
        w = new_episode(np.random.default_rng(seed))
        if len(w.containers) == 2 and len(w.blocks) >= 3:
            seeds.append(seed)
        if len(seeds) == n:
            return seeds
    raise AssertionError("too few scenes")


def test_off_path_states_recover():
    for seed in _two_containers(40):
        colour, container = new_episode(np.random.default_rng(seed)).target
        other = next(c for c in new_episode(np.random.default_rng(seed)).blocks if c != colour)
        wrong = next(k for k in CONTAINER_NAMES if k != container)

        w = new_episode(np.random.default_rng(seed))            # holding the wrong block
        w.held, w.closed, w.grasped = other, True, [other]
        w.blocks[other] = w.gripper
        assert expert_action(w.info())["gripper"] in (GRIPPER_OPEN, GRIPPER_CLOSE)
        assert _finish(w).success, seed

        w = new_episode(np.random.default_rng(seed))            # the target already in the wrong container
        w.blocks[colour] = w.containers[wrong]
        assert _finish(w).success, seed

        w = new_episode(np.random.default_rng(seed))            # closed and empty
        w.closed = True
        assert expert_action(w.info())["gripper"] == GRIPPER_OPEN
        assert _finish(w).success, seed

        w = new_episode(np.random.default_rng(seed))            # the target held over the wrong container
        w.gripper = w.containers[wrong]
        w.held, w.closed, w.grasped = colour, True, [colour]
        w.blocks[colour] = w.gripper
        assert expert_action(w.info())["gripper"] == GRIPPER_CLOSE
        assert _finish(w).success, seed

        w = new_episode(np.random.default_rng(seed))            # already done
        w.blocks[colour] = w.containers[container]
        assert expert_action(w.info())["gripper"] == GRIPPER_DONE


def test_the_expert_moves_axis_by_axis_and_closes_only_once_on_the_block():
    w = new_episode(np.random.default_rng(0))
    bx, by = w.blocks[w.target[0]]
    w.gripper = (bx - 0.05, by + 0.03)                      # a step away: it lands, still open
    a = expert_action(w.info())
    assert a["gripper"] == GRIPPER_OPEN and a["move"].dtype == np.float32
    np.testing.assert_allclose(a["move"], [0.05 / 0.08, -0.03 / 0.08], rtol=1e-6)
    w.gripper = (bx - 0.4, by + 0.02)                       # far on x: a full step there, the rest on y
    a = expert_action(w.info())
    assert a["gripper"] == GRIPPER_OPEN
    np.testing.assert_allclose(a["move"], [1.0, -0.25], rtol=1e-6)
    w.gripper = (bx + 0.4, by - 0.2)                        # far on both: a full step on each
    np.testing.assert_allclose(expert_action(w.info())["move"], [-1.0, 1.0])
    for off, command in ((CLOSE_WITHIN * 0.99, GRIPPER_CLOSE), (CLOSE_WITHIN * 1.01, GRIPPER_OPEN)):
        w.gripper = (bx + off * 0.6, by + off * 0.8)        # the distance, not one axis, decides
        a = expert_action(w.info())
        assert a["gripper"] == command, off
        np.testing.assert_allclose(a["move"], [-off * 0.6 / 0.08, -off * 0.8 / 0.08], rtol=1e-5)
    assert CLOSE_WITHIN == PICK_RADIUS / 2                  # half the world's tolerance: a margin for the policy


def test_the_expert_opens_once_the_held_block_is_near_the_containers_centre():
    w = new_episode(np.random.default_rng(0))
    colour, container = w.target
    cx, cy = w.containers[container]
    w.held, w.closed, w.grasped = colour, True, [colour]
    for off, command in ((OPEN_WITHIN * 0.99, GRIPPER_OPEN), (OPEN_WITHIN * 1.01, GRIPPER_CLOSE)):
        w.gripper = (cx + off, cy)
        w.blocks[colour] = w.gripper
        assert expert_action(w.info())["gripper"] == command, off
    assert OPEN_WITHIN == CONTAINER_INSIDE / 2


def test_heading_for_is_the_named_block_until_it_is_held_then_the_container():
    from npformer.sim.expert import heading_for

    w = new_episode(np.random.default_rng(3))
    colour, container = w.target
    assert heading_for(w.info()) == w.blocks[colour]
    other = next((c for c in w.blocks if c != colour), None)
    if other is not None:                                       # a wrong block held: still the named one
        w.held, w.closed = other, True
        assert heading_for(w.info()) == w.blocks[colour]
    w.held, w.closed, w.grasped = colour, True, [colour]
    assert heading_for(w.info()) == w.containers[container]
    w.held, w.closed = None, False
    w.blocks[colour] = w.containers[container]                 # already in: the container
    assert heading_for(w.info()) == w.containers[container]


def test_the_straight_expert_heads_straight_and_closes_on_the_step_it_arrives():
    from npformer.sim.world import MAX_MOVE

    w = new_episode(np.random.default_rng(11))
    colour = w.target[0]
    bx, by = w.blocks[colour]
    w.gripper, w.closed, w.held = (bx - 0.30, by + 0.15), False, None
    a = straight_action(w.info())
    np.testing.assert_allclose(a["move"], [1.0, -0.5], rtol=1e-6)       # the larger axis a full step
    assert a["gripper"] == GRIPPER_OPEN
    w.gripper = (bx - 0.05, by + 0.02)                                    # a step or less away: lands on it
    a = straight_action(w.info())
    np.testing.assert_allclose(a["move"] * MAX_MOVE, [0.05, -0.02], atol=1e-7)
    assert a["gripper"] == GRIPPER_CLOSE
    w.step(a["move"], a["gripper"])
    assert w.held == colour
    w.gripper, w.closed = w.containers[w.target[1]], True               # over the container's centre: opens
    w.gripper = (w.gripper[0] + 0.03, w.gripper[1])
    assert straight_action(w.info())["gripper"] == GRIPPER_OPEN
