"""Training saves a fixed probe input's attention at step 0 and each evaluation; the explorer reads it into
the payload's "training"; a run without the file has none."""
import numpy as np
from explore_runs import explore_runs  # noqa: F401 (a fixture)

from npformer.explore.payload import decode_array, open_explorer
from npformer.train.checkpoint import load_run
from npformer.train.probe import PROBE, probe_weights, read_probe, record_probe


def test_probe_rows_are_the_models_attention_at_each_step(explore_runs, tmp_path):  # noqa: F811
    for kind, group in (("dates", "decoder cross"), ("text", "self"), ("digits", "self"), ("tabletop", "self")):
        probe = read_probe(explore_runs[kind])
        assert probe["group"] == group and probe["steps"].tolist() == [0, 2, 4]
        assert probe["weights"].dtype == np.uint8
        run = load_run(explore_runs[kind])                              # the final weights: step 4
        _, w = probe_weights(run.task, run.model, probe["inputs"])
        np.testing.assert_allclose(probe["weights"][-1] / 255.0, w, atol=0.5 / 255 + 1e-6, err_msg=kind)
        assert not np.array_equal(probe["weights"][0], probe["weights"][-1]), kind   # training changed it


def test_payload_carries_the_probe_and_a_run_without_it_has_none(explore_runs, tmp_path):  # noqa: F811
    payload = open_explorer(explore_runs["dates"]).payload([{"text": "1 May 2001"}])
    t = payload["training"]
    w = decode_array(t["weights"])
    assert t["group"] == "decoder cross" and t["steps"] == [0, 2, 4]
    assert w.shape[0] == 3 and w.shape[-2:] == (len(t["query_tokens"]), len(t["key_tokens"]))
    import shutil
    bare = tmp_path / "bare"
    shutil.copytree(explore_runs["digits"], bare)
    (bare / PROBE).unlink()
    assert open_explorer(bare).payload([{"index": 1}])["training"] is None


def test_recording_again_replaces_later_rows(explore_runs, tmp_path):  # noqa: F811
    """A resumed run records its steps again: rows at or after the step are dropped, the inputs kept."""
    import shutil
    d = tmp_path / "resumed"
    shutil.copytree(explore_runs["digits"], d)
    run = load_run(d)
    before = read_probe(d)
    record_probe(d, run.task, run.model, 2)
    after = read_probe(d)
    assert after["steps"].tolist() == [0, 2]
    np.testing.assert_array_equal(after["weights"][0], before["weights"][0])
    for a, b in zip(after["inputs"], before["inputs"], strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_policy_that_acts_in_tokens_records_its_probe(tmp_path):
    """ActionLM's batch is (words, images, actions_in, targets): the probe runs the first three, and its maps
    hold every token: words, patches and action tokens (T = L + N + A), action rows reading the prefix."""
    from types import SimpleNamespace

    from npformer.data.tasks import Batch
    from npformer.models.action_lm import ActionLM, ActionLMConfig

    cfg = ActionLMConfig(vocab_size=9, max_words=4, image_size=8, patch_size=4, action_vocab=5, action_len=3,
                         d_model=8, n_heads=2, d_ff=12, n_layers=2)
    model = ActionLM(cfg, rng=0)

    def train_batch(rng, n):
        words = np.array([[3, 4, 0, 0]] * n)                            # (B, L), padded
        targets = rng.integers(0, 5, (n, 3))
        actions_in = np.concatenate([np.full((n, 1), cfg.bos_id), targets[:, :2]], axis=1)
        return Batch((words, rng.random((n, 8, 8, 3)), actions_in, targets), n_tokens=n * 9)

    task = SimpleNamespace(model_kind="action_lm", train_batch=train_batch)
    record_probe(tmp_path, task, model, 0)
    probe = read_probe(tmp_path)
    assert probe["model_kind"] == "action_lm" and probe["group"] == "self"
    assert [a.shape for a in probe["inputs"]] == [(1, 4), (1, 8, 8, 3), (1, 3)]
    assert probe["inputs"][1].dtype == np.float32
    t = 4 + 4 + 3
    assert probe["weights"].shape == (1, 2, 2, t, t)
    w = probe["weights"][0].astype(np.float64) / 255.0                  # (L, H, T, T)
    assert np.all(w[:, :, :8, 8:] == 0) and np.all(w[:, :, :, 2:4] == 0)   # no action, no padding read
    np.testing.assert_allclose(w.sum(-1), 1.0, atol=t * 0.5 / 255)


def test_explore_on_a_probe_file_missing_an_entry_is_one_line(explore_runs, tmp_path, capsys):  # noqa: F811
    """The run's probe file with input.0 taken out: `npformer explore` answers one line naming the file, exit 2
    (before, a KeyError traceback)."""
    import shutil

    from explore_runs import one_line_error

    from npformer.cli import main
    from npformer.train.checkpoint import read_safetensors, safetensors_bytes
    d = tmp_path / "run"
    shutil.copytree(explore_runs["dates"], d)
    tensors, meta = read_safetensors(d / PROBE)
    tensors = {k: v for k, v in tensors.items() if k != "input.0"}
    (d / PROBE).write_bytes(safetensors_bytes(tensors, meta))
    code = main(["explore", str(d), "1 May 2001", "--out", str(tmp_path / "page.html")])
    out, err = capsys.readouterr()
    assert code == 2 and "Traceback" not in err
    one_line_error(err, str(d / PROBE), "input.0")
    assert not (tmp_path / "page.html").exists()
