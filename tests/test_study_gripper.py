"""The four gripper studies (closed-loop, chunks, drift, data) end to end on a tiny budget: their CSV, figure
and sentence agree (every number in the sentence is a value of the CSV, and each compared arm's pooled
success and interval is quoted); the shared verdict words on hand-made arms; the arms' pooled numbers."""
import csv
import re

import numpy as np
import pytest

from npformer.studies import closed_loop, data, episodes
from npformer.studies.chunks import ChunksStudy
from npformer.studies.closed_loop import ClosedLoopStudy
from npformer.studies.common import Options, run_study, verdict
from npformer.studies.data import DataStudy
from npformer.studies.drift import DriftStudy

TINY = {"model": {"d_model": 16, "n_heads": 2, "d_ff": 32, "n_layers": 1}, "train": {"batch_size": 8},
        "data": {"demos": 6}}
PERCENT = re.compile(r"(\d+\.\d)%")
DECIMAL = re.compile(r"(?<![\d.])(\d+\.\d{3})(?![\d%])")


def _csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _check(result, out, name):
    rows = _csv(out / f"{name}.csv")
    assert (out / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    cells = [float(v) for r in rows for k, v in r.items() if re.fullmatch(r"-?\d+(\.\d*)?(e-?\d+)?", v or "")]
    sentence = result.sentence
    for x in PERCENT.findall(sentence):
        assert any(abs(float(x) - 100 * c) <= 0.05 + 1e-9 for c in cells), f"{x}% is not in the CSV: {sentence}"
    for x in DECIMAL.findall(sentence):
        assert any(abs(float(x) - c) <= 0.0005 + 1e-9 for c in cells), f"{x} is not in the CSV: {sentence}"
    arms = {r["setting"]: r for r in rows}
    for label, r in arms.items():                 # each quoted arm: its pooled success and interval, from the CSV
        if f"{label} (" in sentence:
            quoted = sentence.split(f"{label} (", 1)[1].split(")", 1)[0]
            want = [f"{100 * float(r[k]):.1f}%" for k in ("arm_success", "arm_ci_low", "arm_ci_high")]
            assert quoted == f"{want[0]} [{want[1]}, {want[2]}]", (label, quoted, want)
    # every run plays per_seed(seeds) fresh episodes an arm (3 under few_episodes), whatever the study's own
    # runs set for their final evaluation (one episode: episodes.QUIET)
    assert {int(r["episodes"]) for r in rows} == {3}, {r["setting"]: r["episodes"] for r in rows}
    for r in rows:                                # the pooled numbers, recomputed from the CSV's own counts
        mine = [x for x in rows if x["setting"] == r["setting"]]
        k, n = sum(int(x["successes"]) for x in mine), sum(int(x["episodes"]) for x in mine)
        assert int(r["arm_episodes"]) == n and float(r["arm_success"]) == pytest.approx(k / n, abs=1e-6)
        assert float(r["arm_ci_low"]) <= k / n <= float(r["arm_ci_high"])
        assert 0 <= float(r["success"]) <= 1 and float(r["smoothness"]) >= 0
    assert sentence in (out / f"{name}.txt").read_text()
    return rows


@pytest.fixture
def few_episodes(monkeypatch):
    monkeypatch.setattr(episodes, "EPISODES", 3)


def test_closed_loop_study_on_a_tiny_budget(tmp_path, few_episodes, monkeypatch):
    monkeypatch.setattr(closed_loop, "CHUNK", 4)                    # 12 action tokens instead of 150
    result = run_study(ClosedLoopStudy(), Options(seeds=1, steps=2, out=tmp_path, task="gripper", sets=TINY,
                                                  progress=False))
    rows = _check(result, tmp_path, "closed-loop")
    assert [r["setting"] for r in rows] == [a[0] for a in closed_loop.ARMS]
    open_loop = [r for r in rows if r["loop"] == "open"]
    # the blind plan ends the episode when it runs out: its 4 steps, then the "done" that ends it
    assert all(float(r["mean_steps"]) <= 4 + 1 for r in open_loop)
    assert "open loop (" in result.sentence and "closed loop, perturbed (" in result.sentence


def test_chunks_study_on_a_tiny_budget(tmp_path, few_episodes, monkeypatch):
    monkeypatch.setattr("npformer.studies.chunks.CHUNKS", (1, 3))
    result = run_study(ChunksStudy(), Options(seeds=1, steps=2, out=tmp_path, task="gripper", sets=TINY,
                                              progress=False))
    rows = _check(result, tmp_path, "chunks")
    assert [(r["chunk"], r["execute"]) for r in rows] == [(k, m) for k in ("1", "3") for m in ("chunk", "first",
                                                                                                "ensemble")]
    k1 = [r for r in rows if r["chunk"] == "1"]                     # k = 1: three names for one way of playing
    assert len({(r["successes"], r["mean_steps"], r["smoothness"]) for r in k1}) == 1


def test_drift_study_on_a_tiny_budget(tmp_path, few_episodes):
    result = run_study(DriftStudy(), Options(seeds=1, steps=3, out=tmp_path, task="gripper", sets=TINY,
                                             progress=False))
    rows = _check(result, tmp_path, "drift")
    labels = {r["method"]: int(r["labels"]) for r in rows}
    # 8 labels an episode of the 6 demonstrations, each arm; DAgger: 3 rounds of 48 // 3
    assert labels == {"clean BC": 48, "DART": 48, "DAgger": 48}


def test_data_study_on_a_tiny_budget(tmp_path, few_episodes, monkeypatch):
    monkeypatch.setattr(data, "DEMOS", (3, 6))
    monkeypatch.setattr(data, "DEFAULT_DEMOS", 6)
    monkeypatch.setattr(data, "BINS", (8, 32))
    sets = {k: v for k, v in TINY.items() if k != "data"}
    result = run_study(DataStudy(), Options(seeds=1, steps=2, out=tmp_path, task="gripper", sets=sets,
                                            progress=False))
    rows = _check(result, tmp_path, "data")
    # the demonstrations' sweep at the task's default bins; the 32-bin arm is the default-data one
    assert [(r["demos"], r["action_bins"]) for r in rows] == [("3", "32"), ("6", "32"), ("6", "8")]


def test_the_data_studys_sweep_of_demonstrations_uses_the_tasks_default_bins():
    from npformer.data.gripper import GripperTask

    assert data.DEFAULT_BINS == GripperTask.Settings().action_bins
    assert data.DEFAULT_DEMOS == GripperTask.Settings().demos


def test_a_users_smaller_final_evaluation_caps_the_episodes_an_arm(tmp_path, few_episodes):
    sets = {**TINY, "train": {**TINY["train"], "final_eval_n": 2}}
    result = run_study(DriftStudy(), Options(seeds=1, steps=1, out=tmp_path, task="gripper", sets=sets,
                                             progress=False))
    assert {r["episodes"] for r in result.rows} == {2}


def test_verdict_words_on_hand_made_arms():
    # (success, spread over seeds, Wilson low, Wilson high)
    a = (0.50, 0.02, 0.44, 0.56)
    assert verdict(a, (0.80, 0.02, 0.75, 0.85)) == "ahead"
    assert verdict(a, (0.20, 0.02, 0.16, 0.25)) == "behind"
    assert verdict(a, (0.54, 0.02, 0.48, 0.60)) == "level"          # the intervals overlap
    assert verdict(a, (0.80, 0.30, 0.75, 0.85)) == "level"          # apart, but within the seeds' spreads
    assert verdict((0.0, 0.0, 0.0, 0.012), (0.0, 0.0, 0.0, 0.012)) == "level"


def test_wilson_pooling_of_hand_made_rows(tmp_path):
    rows = [{"setting": "a", "seed": s, "steps": 1, "episodes": 100, "successes": k, "success": k / 100,
             "mean_steps": 20.0, "smoothness": 0.1, "seconds": 1.0} for s, k in enumerate((40, 60))]
    pooled = ClosedLoopStudy().pool(rows)
    assert pooled[0]["arm_success"] == 0.5 and pooled[0]["arm_episodes"] == 200
    # Wilson, z = 1.96, 100 of 200: 0.5 -/+ 1.96 sqrt(0.25 / 200 + 1.96^2 / 160000) / (1 + 1.96^2 / 200)
    half = 1.96 * np.sqrt(0.25 / 200 + 1.96**2 / 160000) / (1 + 1.96**2 / 200)
    assert pooled[1]["arm_ci_low"] == pytest.approx(0.5 - half)
    assert pooled[1]["arm_ci_high"] == pytest.approx(0.5 + half)


# -- the arms as settings -------------------------------------------------------------------------------

def test_temporal_ensembling_weighs_the_oldest_prediction_most():
    from npformer.data.gripper_chunks import ensemble

    # three chunks of 3 steps made at steps 0, 1, 2; step 2 is covered by all three (indices 2, 1, 0)
    preds = [(s, np.full((3, 2), float(s + 1), dtype=np.float32), np.full(3, g)) for s, g in ((0, 1), (1, 0), (2, 0))]
    move, command = ensemble(preds, 2, m=0.5)
    w = np.exp(-0.5 * np.arange(3))                                 # oldest (made at step 0) first
    assert move == pytest.approx(np.full(2, (w * [1, 2, 3]).sum() / w.sum()), rel=1e-6)
    assert command == 1                                             # votes: close w0 = 1 > open w1 + w2 = 0.97
    move, command = ensemble(preds, 2, m=0.0)                       # m = 0: a plain mean and a plain vote
    assert move == pytest.approx([2.0, 2.0]) and command == 0       # open 2 votes, close 1
    move, command = ensemble(preds, 3, m=0.5)                       # step 3: the chunks of steps 1 and 2 only
    assert move == pytest.approx(np.full(2, (2 + 3 * np.exp(-0.5)) / (1 + np.exp(-0.5))), rel=1e-6)


def test_chunk_targets_pad_past_the_episode_end_with_done_steps():
    from npformer.data.gripper_chunks import chunk_targets
    from npformer.sim.demos import record_demos
    from npformer.sim.tokens import ActionTokenizer

    demos = record_demos(2, seed=5)
    tok = ActionTokenizer(8, [-1, -1], [1, 1])
    last = int(np.flatnonzero(demos.episode == 0)[-1])              # episode 0's final step
    t = chunk_targets(tok, demos, np.array([last - 1, last]), 3)    # (2, 9)
    want = tok.encode(demos.moves[[last - 1, last]], demos.gripper[[last - 1, last]])
    done = tok.encode(np.zeros((1, 2)), np.array([2]))[0]          # move 0 -> bin 4 of 8; done = 8 + 2
    assert t[0, :6].tolist() == want.reshape(-1).tolist() and t[0, 6:].tolist() == done.tolist()
    assert t[1, :3].tolist() == want[1].tolist() and t[1, 3:].tolist() == done.tolist() * 2
    assert done.tolist() == [4, 4, 10]


@pytest.mark.parametrize("sets, message", [({"chunk": 51}, "chunk must be an integer in [1, 50]"),
                                            ({"execute": "all"}, "execute must be one of chunk, first, ensemble"),
                                            ({"dagger": 1}, "dagger must be 0"),
                                            ({"ensemble_m": -1.0}, "ensemble_m must be")])
def test_bad_chunk_and_dagger_settings_are_refused(sets, message):
    from npformer.data.tasks import get_task

    with pytest.raises(ValueError, match=re.escape(message)):
        get_task("gripper").create(sets)


def test_the_first_step_of_a_chunk_decodes_as_the_whole_chunk_begins():
    """execute=first decodes only a chunk's first 3 tokens: they must be the whole chunk's first 3."""
    from npformer.data.gripper_chunks import greedy_prefix
    from npformer.data.tasks import get_task
    from npformer.sim.env import GripperEnv

    task = get_task("gripper").create({"demos": 3, "demo_seed": 1, "chunk": 5, "action_bins": 8})
    cfg = task.model_config({"d_model": 16, "n_heads": 2, "d_ff": 32, "n_layers": 1})
    model = task.build_model(cfg, np.random.default_rng(0)).eval()
    policy = task.policy(model)
    obs = [GripperEnv().reset(seed=s)[0] for s in range(6)]
    images, texts = np.stack([o["image"] for o in obs]), [o["instruction"] for o in obs]
    whole, _ = policy.tokens(images, texts)                         # (6, 15)
    assert whole.shape == (6, 15)
    np.testing.assert_array_equal(greedy_prefix(policy, images, texts, 3), whole[:, :3])


@pytest.mark.parametrize("argv, message", [
    (["study", "chunks", "--set", "chunk=4"], "the chunks study sets chunk itself"),
    (["study", "data", "--set", "demos=10"], "the data study sets demos itself"),
    (["study", "drift", "--task", "dates"], "the drift study runs on gripper, not 'dates'"),
    (["study", "closed-loop", "--set", "execute=sideways"], "execute must be one of chunk, first, ensemble"),
])
def test_study_errors_are_one_line_and_exit_2(tmp_path, capsys, argv, message):
    from npformer.cli import main

    assert main([*argv, "--out", str(tmp_path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def test_runs_in_worker_processes_give_the_rows_of_one_job(tmp_path):
    # two worker processes, each on one BLAS thread: the same numbers as the runs one after another
    sets = {**TINY, "train": {**TINY["train"], "final_eval_n": 2}}     # no patched constant: workers import afresh
    rows = {}
    for jobs in (1, 2):
        result = run_study(DriftStudy(), Options(seeds=2, steps=2, out=tmp_path / str(jobs), task="gripper",
                                                 sets=sets, progress=False, jobs=jobs))
        rows[jobs] = [{k: v for k, v in r.items() if k != "seconds"} for r in result.rows]
    assert len(rows[1]) == 12 and [r["seed"] for r in rows[1][:2]] == [0, 0]
    assert rows[2] == rows[1]


class _DyingStudy(DriftStudy):
    """A drift study whose runs end their process abruptly once trained (as the kernel's OOM killer would)."""

    def measure(self, trainer, setting, before):
        import os
        os._exit(3)


def test_a_worker_that_dies_fails_the_study_with_one_clear_error(tmp_path):
    sets = {**TINY, "train": {**TINY["train"], "final_eval_n": 2}}
    with pytest.raises(ChildProcessError, match="ended abruptly.*--jobs 1"):
        run_study(_DyingStudy(), Options(seeds=1, steps=1, out=tmp_path, task="gripper", sets=sets, progress=False,
                                         jobs=2))
