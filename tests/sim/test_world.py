"""The gripper world's rules at their boundaries, its image, its seeds and its perturbations."""
import numpy as np
import pytest

from npformer.data.tabletop import COLOURS, CONTAINERS, TABLE
from npformer.sim import GRIPPER_CLOSE, GRIPPER_DONE, GRIPPER_OPEN, MAX_MOVE, MAX_STEPS, GripperEnv
from npformer.sim.render import GRIPPER_RGB, render
from npformer.sim.world import World, new_episode

EPS = 1e-6
HALF = 0.06            # half a block's side (0.12): the pick radius
INNER = 0.085          # a container's inside: 0.24 / 2 less its 0.035 wall


def world(gripper=(0.2, 0.2), blocks=None, containers=None, held=None, perturb=False, slips=None, move_at=2):
    blocks = {"red": (0.5, 0.5), "blue": (0.8, 0.2)} if blocks is None else blocks
    containers = {"box": (0.3, 0.75), "bowl": (0.75, 0.75)} if containers is None else containers
    shades = {**{c: COLOURS[c] for c in blocks}, **{k: CONTAINERS[k] for k in containers}}
    w = World(instruction="put the red block in the box", target=("red", "box"), blocks=dict(blocks),
              containers=dict(containers), shades=shades, table=TABLE, gripper=gripper, perturb=perturb,
              move_at=move_at, move_to=(0.15, 0.85), slips=np.ones(MAX_STEPS) if slips is None else slips)
    if held is not None:
        w.held, w.closed = held, True
        w.blocks[held] = gripper
        w.grasped.append(held)
    return w


# -- picking -------------------------------------------------------------------------------------
@pytest.mark.parametrize("offset, picks", [((HALF - EPS, 0.0), True), ((HALF + EPS, 0.0), False),
                                           ((0.0, -(HALF - EPS)), True), ((0.0, HALF + EPS), False),
                                           ((0.042, 0.042), True),      # 0.0594 away
                                           ((0.045, 0.045), False)])    # 0.0636 away, though within the square
def test_closing_picks_within_half_a_block_side_of_the_centre(offset, picks):
    w = world(gripper=(0.5 + offset[0], 0.5 + offset[1]))
    w.step((0.0, 0.0), GRIPPER_CLOSE)
    assert w.closed
    assert w.held == ("red" if picks else None)


def test_the_move_comes_before_the_command_and_is_clipped():
    w = world(gripper=(0.5 + 0.13, 0.5))          # a full step (0.08, clipped from 0.13) lands 0.05 away
    w.step((-0.13 / MAX_MOVE, 0.0), GRIPPER_CLOSE)
    assert w.gripper[0] == pytest.approx(0.55)
    assert w.held == "red" and w.blocks["red"] == w.gripper


def test_a_closed_empty_gripper_must_open_before_it_grasps():
    w = world(gripper=(0.5, 0.5))
    w.closed = True
    w.step((0.0, 0.0), GRIPPER_CLOSE)
    assert w.held is None
    w.step((0.0, 0.0), GRIPPER_OPEN)
    w.step((0.0, 0.0), GRIPPER_CLOSE)
    assert w.held == "red"


def test_the_nearest_block_is_picked_and_carried():
    w = world(gripper=(0.5, 0.5), blocks={"red": (0.54, 0.5), "blue": (0.47, 0.5)})
    w.step((0.0, 0.0), GRIPPER_CLOSE)
    assert w.held == "blue"
    w.step((1.0, -0.5), GRIPPER_CLOSE)
    assert w.blocks["blue"] == pytest.approx((0.58, 0.46)) and w.blocks["red"] == (0.54, 0.5)


def test_the_gripper_stays_on_the_table():
    w = world(gripper=(0.02, 0.99))
    w.step((-1.0, 1.0), GRIPPER_OPEN)
    assert w.gripper == (0.0, 1.0)


# -- releasing -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name, offset, inside", [
    ("box", (INNER - EPS, 0.0), True), ("box", (INNER + EPS, 0.0), False),
    ("box", (0.07, -0.07), True),                           # a box's inside is a square
    ("bowl", (0.0, INNER - EPS), True), ("bowl", (-(INNER + EPS), 0.0), False),
    ("bowl", (0.07, -0.07), False)])                        # a bowl's a disc: 0.099 from its centre
def test_opening_over_a_containers_inside_puts_the_block_in_it(name, offset, inside):
    centre = (0.5, 0.5)
    spot = (centre[0] + offset[0], centre[1] + offset[1])
    w = world(gripper=spot, blocks={"red": (0.2, 0.2), "blue": (0.8, 0.2)}, containers={name: centre}, held="red")
    w.target = ("red", name)
    w.step((0.0, 0.0), GRIPPER_OPEN)
    assert w.held is None and not w.closed
    assert w.blocks["red"] == spot                          # left where it is, in or out
    assert w.container_of("red") == (name if inside else None)
    assert w.success == inside


def test_done_ends_the_episode_and_the_step_limit_truncates():
    w = world(gripper=(0.5, 0.5))
    w.step((0.0, 0.0), GRIPPER_DONE)
    assert w.ended and w.over and not w.truncated
    with pytest.raises(RuntimeError, match="reset"):
        w.step((0.0, 0.0), GRIPPER_OPEN)
    w = world()
    for _ in range(MAX_STEPS - 1):
        w.step((0.0, 0.0), GRIPPER_OPEN)
    assert not w.over
    w.step((0.0, 0.0), GRIPPER_OPEN)
    assert w.truncated and not w.ended


def test_bad_actions_are_refused():
    w = world()
    with pytest.raises(ValueError, match="gripper"):
        w.step((0.0, 0.0), 3)
    with pytest.raises(ValueError, match="move"):
        w.step((np.nan, 0.0), GRIPPER_OPEN)


# -- perturbations -------------------------------------------------------------------------------
@pytest.mark.parametrize("u, slips", [(0.0299, True), (0.0301, False)])
def test_a_held_block_slips_below_p_and_falls_where_it_is(u, slips):
    draws = np.ones(MAX_STEPS)
    draws[2] = u                                            # step 3
    w = world(gripper=(0.5, 0.4), held="red", perturb=True, slips=draws)
    for _ in range(3):
        w.step((0.5, 0.0), GRIPPER_CLOSE)
    assert w.held == (None if slips else "red")
    assert w.closed
    assert w.blocks["red"] == pytest.approx((0.62, 0.4))
    assert w.events == ([(3, "slipped", "red")] if slips else [])


def test_no_perturbation_unless_asked():
    w = world(gripper=(0.5, 0.4), held="red", perturb=False, slips=np.zeros(MAX_STEPS))
    for _ in range(5):
        w.step((0.0, 0.0), GRIPPER_CLOSE)
    assert w.held == "red" and w.blocks["red"] == (0.5, 0.4) and w.events == []


def test_the_target_moves_once_before_the_grasp():
    w = world(perturb=True, move_at=2)
    w.step((0.0, 0.0), GRIPPER_OPEN)
    assert w.blocks["red"] == (0.5, 0.5)
    w.step((0.0, 0.0), GRIPPER_OPEN)
    assert w.blocks["red"] == (0.15, 0.85) and w.events == [(2, "moved", "red")]
    w = world(gripper=(0.5, 0.5), perturb=True, move_at=2)  # grasped at step 1: it stays in hand
    w.step((0.0, 0.0), GRIPPER_CLOSE)
    w.step((0.0, 0.0), GRIPPER_CLOSE)
    assert w.held == "red" and w.events == []


def _events(seed: int, policy) -> list:
    """The perturbation events of episode ``seed`` under ``policy``, which holds a block at every step."""
    w = new_episode(np.random.default_rng(seed), perturb=True)
    rng = np.random.default_rng(1000 + seed)
    while not w.over:
        w.step(policy(rng), GRIPPER_CLOSE)
        if w.held is None:                                  # grab it again, wherever it fell
            w.held = "red" if "red" in w.blocks and w.target[0] != "red" else next(iter(w.blocks))
            w.blocks[w.held] = w.gripper
    return w.events


def test_perturbation_events_do_not_depend_on_the_actions():
    seen = 0
    for seed in range(8):
        still = _events(seed, lambda rng: (0.0, 0.0))
        wander = _events(seed, lambda rng: rng.uniform(-1, 1, 2))
        assert [e[:2] for e in still] == [e[:2] for e in wander]
        seen += len(still)
    assert seen >= 8                                        # the moves (one per episode) and some slips


# -- the image -----------------------------------------------------------------------------------
def _dark_columns(img: np.ndarray, gx: float, gy: float) -> np.ndarray:
    """Columns (pixels from the gripper) holding the gripper's near-black pixels in the jaws' rows."""
    rows = slice(int(gy * 48) - 2, int(gy * 48) + 3)
    dark = (np.abs(img[rows].astype(int) - np.array(GRIPPER_RGB) * 255).max(axis=-1) <= 2).any(axis=0)
    return np.flatnonzero(dark) + 0.5 - gx * 48


def test_the_gripper_state_is_visible_in_the_pixels():
    spot = (0.5, 0.5)
    open_ = world(gripper=spot)
    closed = world(gripper=spot)
    closed.closed = True
    holding = world(gripper=spot, held="red")
    imgs = {name: render(w) for name, w in (("open", open_), ("closed", closed), ("holding", holding))}
    window = (slice(14, 34), slice(14, 34))                # 10 pixels around the gripper
    for a, b in (("open", "closed"), ("open", "holding"), ("closed", "holding")):
        differ = (imgs[a][window] != imgs[b][window]).any(axis=-1).sum()
        assert differ >= 8, (a, b, differ)
    spread = {name: np.ptp(_dark_columns(img, *spot)) for name, img in imgs.items()}
    assert spread["open"] >= 12 and 8 <= spread["holding"] <= 11 and spread["closed"] <= 3, spread
    red = np.round(np.array(COLOURS["red"]) * 255)
    between = imgs["holding"][22:26, 23:25].reshape(-1, 3)  # the held block shows between the jaws
    assert (np.abs(between - red) <= 1).all()


def test_the_image_shows_where_the_gripper_is():
    a, b = world(gripper=(0.3, 0.3)), world(gripper=(0.3 + MAX_MOVE, 0.3))
    ia, ib = render(a), render(b)
    assert np.ptp(_dark_columns(ia, 0.3, 0.3)) == np.ptp(_dark_columns(ib, 0.38, 0.3))
    assert _dark_columns(ia, 0.3, 0.3).mean() == pytest.approx(_dark_columns(ib, 0.38, 0.3).mean(), abs=0.6)
    assert ia.dtype == np.uint8 and ia.shape == (48, 48, 3)


# -- scenes and seeds ----------------------------------------------------------------------------
def test_scenes_hold_2_to_4_blocks_and_1_or_2_containers_apart():
    counts = set()
    for seed in range(200):
        w = new_episode(np.random.default_rng(seed))
        counts.add((len(w.blocks), len(w.containers)))
        assert w.target[0] in w.blocks and w.target[1] in w.containers
        objs = [(p, 0.06) for p in w.blocks.values()] + [(p, 0.12) for p in w.containers.values()]
        for i, (p, r) in enumerate(objs):
            assert r <= p[0] <= 1 - r and r <= p[1] <= 1 - r
            for q, s in objs[i + 1:]:
                assert max(abs(p[0] - q[0]), abs(p[1] - q[1])) > r + s       # no overlap
    assert counts == {(b, c) for b in (2, 3, 4) for c in (1, 2)}


def test_splits_keep_yellow_with_the_bowl_out_of_training():
    train = {new_episode(np.random.default_rng(s), "train").target for s in range(300)}
    assert ("yellow", "bowl") not in train and len(train) == 9
    assert {new_episode(np.random.default_rng(s), "yellow_bowl").target for s in range(20)} == {("yellow", "bowl")}
    every = [new_episode(np.random.default_rng(s), "all").target for s in range(300)]     # the control's split
    assert len(set(every)) == 10 and 10 <= every.count(("yellow", "bowl")) <= 60


def test_the_same_seed_gives_the_same_bits():
    runs = []
    for _ in range(2):
        env = GripperEnv()
        obs, info = env.reset(seed=11, options={"perturb": True})
        frames, infos = [obs["image"]], [info]
        rng = np.random.default_rng(5)
        for _ in range(20):
            obs, _, term, trunc, info = env.step({"move": rng.uniform(-1, 1, 2).astype(np.float32),
                                                  "gripper": int(rng.integers(0, 2))})
            frames.append(obs["image"])
            infos.append(info)
        runs.append((np.stack(frames).tobytes(), obs["instruction"], infos))
    assert runs[0] == runs[1]
    off = GripperEnv().reset(seed=11, options={"perturb": False})[0]
    assert off["image"].tobytes() == runs[0][0][:48 * 48 * 3]           # perturbations leave the scene alone
    other = GripperEnv().reset(seed=12)[0]
    assert other["image"].tobytes() != off["image"].tobytes()


def test_an_instruction_brings_its_target_into_the_scene():
    for seed in range(30):
        env = GripperEnv()
        obs, info = env.reset(seed=seed, options={"instruction": "put the purple cube into the bowl"})
        assert info["target"] == ("purple", "bowl") and "purple" in info["blocks"] and "bowl" in info["containers"]
        assert obs["instruction"] == "put the purple cube into the bowl"
    obs, info = GripperEnv().reset(seed=0, options={"instruction": "put the crimson block in the tub",
                                                    "target": ("red", "box")})
    assert info["target"] == ("red", "box")


@pytest.mark.parametrize("options, match", [({"instruction": "put the block in the box"}, "colour"),
                                            ({"instruction": "put it", "target": ("pink", "box")}, "pink"),
                                            ({"split": "dev"}, "split"), ({"perturb": "yes"}, "perturb"),
                                            ({"colour": "red"}, "colour"),
                                            ({"instruction": "put the red block in the box\n"}, "instruction")])
def test_bad_options_are_refused(options, match):
    with pytest.raises(ValueError, match=match):
        GripperEnv().reset(seed=0, options=options)
