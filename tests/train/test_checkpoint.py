"""Crash safety: atomic files, a save cut short at any point, shape checks on loading."""
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from npformer import files
from npformer.files import atomic_write_bytes
from npformer.train import checkpoint as ck
from npformer.train.checkpoint import load_run, read_safetensors
from npformer.train.trainer import Trainer

FILES = ("model.safetensors", "optimizer.safetensors", "trainer_state.json")


def _snapshot(d):
    return {name: (d / name).read_bytes() for name in FILES}


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path, monkeypatch):
    path = tmp_path / "f.json"
    atomic_write_bytes(path, b"old")

    def broken_fsync(fd):
        raise OSError("disk full")
    monkeypatch.setattr(files.os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_bytes(path, b"new" * 1000)
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]          # no temporary left behind


def test_failed_save_leaves_the_last_checkpoint(start_tiny, tmp_path, monkeypatch):
    t = start_tiny("run", steps=4)
    t.run(progress=False, plot=False)
    d = tmp_path / "run"
    good = _snapshot(d)
    real_stage = ck._stage
    calls = {"n": 0}

    def stage_then_crash(path, data):
        calls["n"] += 1
        if calls["n"] == 3:                                             # the trainer state: the last file staged
            raise OSError("simulated crash while writing")
        return real_stage(path, data)
    monkeypatch.setattr(ck, "_stage", stage_then_crash)
    t.step += 1                                                          # pretend we trained further
    with pytest.raises(OSError, match="simulated crash"):
        t.save()
    assert _snapshot(d) == good
    assert not list(d.glob(".*.tmp"))


def test_killed_process_mid_save_leaves_the_last_checkpoint(start_tiny, tmp_path):
    """A real crash: a child process dies (os._exit) halfway through writing the optimizer file."""
    t = start_tiny("run", steps=4)
    t.run(progress=False, plot=False)
    d = tmp_path / "run"
    good = _snapshot(d)
    child = textwrap.dedent(f"""
        import os
        from npformer.train import checkpoint as ck
        from npformer.train.trainer import Trainer
        t = Trainer.resume({str(d)!r})
        real = ck._stage
        def dying_stage(path, data):
            if path.name == "optimizer.safetensors":
                with open(path.parent / ("." + path.name + ".crash.tmp"), "wb") as f:
                    f.write(data[: len(data) // 2])                    # a torn write, then death
                    f.flush()
                os._exit(9)
            return real(path, data)
        ck._stage = dying_stage
        t.step += 1
        t.save()
    """)
    proc = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 9, proc.stderr
    assert list(d.glob(".*.tmp"))                                        # debris of the crash
    assert _snapshot(d) == good                                          # the checkpoint is untouched
    r = Trainer.resume(d)                                                # and loads; the debris is cleared
    assert r.step == 4 and not list(d.glob(".*.tmp"))


def test_crash_between_renames_is_detected(start_tiny, tmp_path, monkeypatch):
    t = start_tiny("run", steps=4)
    t.run(progress=False, plot=False)
    real_replace = ck.os.replace
    calls = {"n": 0}

    def replace_once(src, dst):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("simulated crash between renames")
        return real_replace(src, dst)
    monkeypatch.setattr(ck.os, "replace", replace_once)
    t.step += 1
    with pytest.raises(OSError):
        t.save()
    monkeypatch.setattr(ck.os, "replace", real_replace)
    with pytest.raises(ValueError, match="disagree on the step"):
        Trainer.resume(tmp_path / "run")


def test_loading_checks_shapes_against_config(start_tiny, tmp_path):
    start_tiny("run", steps=1).run(progress=False, plot=False)
    d = tmp_path / "run"
    config = json.loads((d / "config.json").read_text())
    config["model"]["d_ff"] = 48
    (d / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"does not match config.json: .*ffn.linear1.weight has shape \(32, 16\), "
                                         r"the config gives \(48, 16\)"):
        load_run(d)


def test_load_run_checks_task_and_kind(start_tiny, tmp_path):
    start_tiny("run", steps=1).run(progress=False, plot=False)
    run = load_run(tmp_path / "run", task="copy", model_kind="transformer")
    assert run.step == 1 and not run.model.training
    with pytest.raises(ValueError, match="holds a 'copy' run, not a 'dates' run"):
        load_run(tmp_path / "run", task="dates")
    with pytest.raises(ValueError, match="needs a decoder_lm model"):
        load_run(tmp_path / "run", model_kind="decoder_lm")
    with pytest.raises(FileNotFoundError, match="not an npformer run directory"):
        load_run(tmp_path)


def test_weights_round_trip_exactly(start_tiny, tmp_path):
    t = start_tiny("run", steps=2)
    t.run(progress=False, plot=False)
    tensors, meta = read_safetensors(tmp_path / "run" / "model.safetensors")
    assert meta["step"] == "2"
    loaded = load_run(tmp_path / "run").model.state_dict()
    for k, v in t.model.state_dict().items():
        np.testing.assert_array_equal(loaded[k], v)
