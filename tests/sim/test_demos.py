"""DART demonstrations: the world executes noisy actions, each label is the clean expert's action for the
state the world was in, and the episodes never share a seed with an evaluation."""
import numpy as np
import pytest

from npformer.sim import expert_action, new_episode
from npformer.sim.demos import DEMO_STREAM, record_demos
from npformer.sim.episodes import EVAL_STREAM
from npformer.sim.render import render
from npformer.sim.world import episode_seed


def test_labels_are_the_clean_expert_at_states_the_noisy_actions_reach():
    d = record_demos(6, seed=3, noise=0.4, flip=0.1, perturb=0.5)
    assert d.images.shape == (len(d), 48, 48, 3) and d.images.dtype == np.uint8
    assert d.moves.dtype == np.float32 and d.gripper.dtype == np.int64 and len(d.instructions) == 6
    assert sorted(set(d.episode.tolist())) == list(range(6))
    noisy = 0
    for i in range(6):
        rng = np.random.default_rng(episode_seed(3, DEMO_STREAM, i))    # the episode, replayed by hand
        perturb = bool(rng.random() < 0.5)
        w = new_episode(rng, perturb=perturb)
        assert w.instruction == d.instructions[i]
        for j in np.flatnonzero(d.episode == i):
            assert d.step[j] == w.steps
            assert np.array_equal(render(w), d.images[j])
            clean = expert_action(w.info())
            np.testing.assert_array_equal(d.moves[j], clean["move"])
            assert d.gripper[j] == clean["gripper"]
            noisy += not np.array_equal(d.executed_moves[j], clean["move"])
            w.step(d.executed_moves[j], int(d.executed_gripper[j]))
        assert w.over and d.success[i] == w.success
    assert noisy >= len(d) // 2


def test_without_noise_the_demos_are_the_expert_and_all_succeed():
    d = record_demos(10, seed=0, noise=0.0, flip=0.0)
    assert d.success.all()
    np.testing.assert_array_equal(d.executed_moves, d.moves)
    np.testing.assert_array_equal(d.executed_gripper, d.gripper)
    again = record_demos(10, seed=0, noise=0.0, flip=0.0)
    assert again.images.tobytes() == d.images.tobytes()


def test_demo_seeds_are_disjoint_from_evaluation_seeds():
    demo = {episode_seed(s, DEMO_STREAM, i) for s in range(4) for i in range(1000)}
    evaluation = {episode_seed(s, EVAL_STREAM, i) for s in range(4) for i in range(1000)}
    assert len(demo) == len(evaluation) == 4000 and not demo & evaluation


@pytest.mark.parametrize("kwargs, word", [({"n_episodes": 0}, "n_episodes"), ({"noise": -1}, "noise"),
                                          ({"flip": 2}, "flip"), ({"split": "dev"}, "split"),
                                          ({"expert": "oracle"}, "expert must be one of settle, straight")])
def test_bad_settings_are_refused(kwargs, word):
    with pytest.raises(ValueError, match=word):
        record_demos(**{"n_episodes": 2, "seed": 0, **kwargs})


def test_max_steps_records_exactly_that_many_labels_the_same_ones():
    full = record_demos(4, 3, noise=0.3)
    cut = record_demos(4, 3, noise=0.3, max_steps=len(full) - 5)
    assert len(cut) == len(full) - 5
    assert np.array_equal(cut.images, full.images[:len(cut)]) and np.array_equal(cut.moves, full.moves[:len(cut)])
    assert cut.instructions == full.instructions[:cut.episode.max() + 1]
    with pytest.raises(ValueError, match="fewer than the"):
        record_demos(2, 3, max_steps=10_000)
    with pytest.raises(ValueError, match="max_steps"):
        record_demos(2, 3, max_steps=0)


def test_the_gripper_task_records_labels_and_refuses_them_with_chunks():
    from npformer.data.gripper import GripperTask

    task = GripperTask.create({"demos": 5, "labels": 37, "demo_seed": 1})
    assert len(task.demos()) == 37 == task.first_rows
    with pytest.raises(ValueError, match="chunk"):
        GripperTask.create({"labels": 40, "chunk": 4})
    with pytest.raises(ValueError, match="at least dagger"):
        GripperTask.create({"labels": 2, "dagger": 3})


def test_watch_sees_the_state_of_each_recorded_step():
    seen = []
    d = record_demos(3, 4, max_steps=30, watch=seen.append)
    assert len(seen) == len(d) == 30
    assert [i["step"] for i in seen] == d.step.tolist()
    assert all(i["instruction"] == t for i, t in zip(seen, d.texts(np.arange(len(d))), strict=True))


def test_recolour_redraws_only_the_named_block_past_its_grasp_never_yellow():
    from npformer.sim.language import COLOURS

    plain = record_demos(12, 7, perturb=0.0)
    info: list[dict] = []
    some = record_demos(12, 7, perturb=0.0, recolour=0.5, watch=info.append)
    every = record_demos(12, 7, perturb=0.0, recolour=1.0)
    for d in (some, every):                  # the same world, labels and noise: only images change
        for name in ("moves", "gripper", "goals", "carrying", "executed_moves", "executed_gripper", "step"):
            assert np.array_equal(getattr(d, name), getattr(plain, name)), name
    differ = (every.images != plain.images).any(axis=(1, 2, 3))                     # (M,)
    assert np.array_equal(differ, plain.carrying) and plain.carrying.sum() > 20
    part = (some.images != plain.images).any(axis=(1, 2, 3))
    assert 0.25 < part[plain.carrying].mean() < 0.75 and not part[~plain.carrying].any()
    yellow = np.round(np.asarray(COLOURS["yellow"]) * 255)
    for j in np.flatnonzero(differ):
        colour = info[j]["target"][0]
        new = every.images[j][(every.images[j] != plain.images[j]).any(axis=-1)].astype(float)   # (k, 3)
        assert len(new) and np.abs(new - yellow).max(axis=1).min() > 40     # none of it near yellow
        old = np.round(np.asarray(COLOURS[colour]) * 255)
        assert np.abs(new - old).max(axis=1).min() > 40                     # nor the block's own colour
    with pytest.raises(ValueError, match="recolour"):
        record_demos(2, 0, recolour=1.5)
