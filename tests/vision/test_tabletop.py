"""The tabletop world: scenes, instructions, the held-out split, and bad instructions."""
import numpy as np
import pytest

from npformer.data import tabletop as tt


def test_scenes_objects_in_distinct_cells_and_drawn_there():
    s = tt.render_scenes(np.random.default_rng(0), 400)
    assert s.images.shape == (400, 32, 32, 3) and s.images.dtype == np.float32
    assert 0.0 <= s.images.min() and s.images.max() <= 1.0
    n_blocks = (s.blocks >= 0).sum(1)
    n_conts = (s.containers >= 0).sum(1)
    assert set(n_blocks) == {2, 3, 4} and set(n_conts) == {1, 2}
    tiles = s.images.reshape(400, 4, 8, 4, 8, 3).transpose(0, 1, 3, 2, 4, 5).reshape(400, 16, 8, 8, 3)
    for i in range(400):
        cells = [c for c in np.concatenate([s.blocks[i], s.containers[i]]) if c >= 0]
        assert len(cells) == len(set(cells)), "every object in its own cell"
        # a cell is drawn on iff an object stands in it; a block's cell holds its colour
        varied = tiles[i].reshape(16, -1, 3).std(axis=1).max(axis=1) > 0.05     # (16,)
        assert set(np.flatnonzero(varied)) == set(cells)
        for j in range(len(tt.COLOUR_NAMES)):
            if s.blocks[i, j] >= 0:
                px = tiles[i, s.blocks[i, j]].reshape(-1, 3)
                nearest = np.abs(px[:, None, :] - np.array([tt.COLOURS[k] for k in tt.COLOUR_NAMES])).sum(-1).argmin(1)
                assert (nearest == j).sum() >= 16, "at least a 4x4 square of the block's colour"


def test_held_out_pairing_never_in_training_and_always_in_its_split():
    rng = np.random.default_rng(1)
    scenes, texts, actions = tt.sample_episodes(rng, 1000, "train")
    pairs = [tt.parse(t) for t in texts]
    assert ("yellow", "bowl") not in pairs
    assert ("yellow", "box") in pairs and ("red", "bowl") in pairs       # each half is seen
    # the action is where the named objects are
    for i, (c, k) in enumerate(pairs[:500]):
        assert actions[i, 0] == scenes.blocks[i, tt.COLOUR_NAMES.index(c)]
        assert actions[i, 1] == scenes.containers[i, tt.CONTAINER_NAMES.index(k)]
    scenes, texts, actions = tt.sample_episodes(np.random.default_rng(2), 300, "yellow_bowl")
    assert all(tt.parse(t) == ("yellow", "bowl") for t in texts)
    assert (scenes.blocks[:, tt.COLOUR_NAMES.index("yellow")] == actions[:, 0]).all()
    assert (scenes.containers[:, tt.CONTAINER_NAMES.index("bowl")] == actions[:, 1]).all()
    _, texts, _ = tt.sample_episodes(np.random.default_rng(3), 1000, "all")
    assert ("yellow", "bowl") in [tt.parse(t) for t in texts]


def test_instructions_parse_and_encode():
    rng = np.random.default_rng(4)
    _, texts, _ = tt.sample_episodes(rng, 2000, "all")
    words = {w for t in texts for w in t.split()}
    assert {"put", "place", "move", "drop", "block", "cube", "in", "into", "inside", "pick", "up"} <= words
    assert "pick up the blue cube and drop it into the bowl" == tt.TEMPLATES[4].format(
        c="blue", b="cube", k="bowl", **{"in": "into"})
    for t in texts:
        ids = tt.encode(t)
        assert ids.shape == (tt.MAX_WORDS,) and (ids[:len(t.split())] > 0).all() and (ids[len(t.split()):] == 0).all()
    assert tt.parse("Put the RED block in the box.") == ("red", "box")
    scene, text, pick, place = tt.sample_episode(np.random.default_rng(5))
    colour, kind = tt.check_instruction(scene, text)
    assert (pick, place) == (scene.blocks[colour], scene.containers[kind])   # the action the words ask for
    again = tt.sample_episode(np.random.default_rng(5))                       # the rng alone decides it
    assert again[1:] == (text, pick, place) and np.array_equal(again[0].image, scene.image)


def test_bad_instructions_are_clear_errors():
    scene = tt.Scene(np.zeros((32, 32, 3), np.float32), {"red": 0, "blue": 5}, {"box": 9})
    assert tt.check_instruction(scene, "put the red block in the box") == ("red", "box")
    with pytest.raises(ValueError, match="unknown word 'teapot'"):
        tt.check_instruction(scene, "put the red teapot in the box")
    with pytest.raises(ValueError, match="no green block in this scene"):
        tt.check_instruction(scene, "put the green block in the box")
    with pytest.raises(ValueError, match="no bowl in this scene"):
        tt.check_instruction(scene, "put the red block in the bowl")
    with pytest.raises(ValueError, match="exactly one block colour"):
        tt.check_instruction(scene, "put the block in the box")
    with pytest.raises(ValueError, match="exactly one block colour"):
        tt.check_instruction(scene, "put the red blue block in the box")
    with pytest.raises(ValueError, match="empty"):
        tt.check_instruction(scene, "  ")
    with pytest.raises(ValueError, match="split must be"):
        tt.sample_episodes(np.random.default_rng(0), 1, "validation")
