"""Faults lose nothing: a second trainer of a run is refused while the first goes on, a kill -9 leaves
no lock that blocks, and a full disk while a checkpoint is written stops the command with one line
while the last checkpoint stays and resumes."""
import errno
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from train_helpers import TINY_MODEL, losses, tiny_config, tiny_task

from npformer import files
from npformer.cli import main
from npformer.files import WriteError
from npformer.train import checkpoint as ck
from npformer.train.checkpoint import LOCK, RunLock, RunLocked, load_run
from npformer.train.trainer import Trainer

HERE = Path(__file__).parent
TINY_SETS = ["--set", "d_model=16", "--set", "n_heads=2", "--set", "d_ff=32", "--set", "n_encoder_layers=1",
             "--set", "n_decoder_layers=1", "--set", "data.max_len=4", "--set", "n_symbols=4",
             "--set", "eval_n=20", "--set", "final_eval_n=40"]
RUN_FILES = {"config.json", "model.safetensors", "optimizer.safetensors", "trainer_state.json", "metrics.json",
             "log.csv", "eval.csv", "probe_attention.safetensors"}

# A process that starts a tiny run (taking its lock), says so, waits for a line on stdin, then trains it.
HOLDER = textwrap.dedent("""
    import sys
    from npformer.train.trainer import Trainer
    from train_helpers import TINY_MODEL, tiny_config, tiny_task
    t = Trainer.start(tiny_task(), dict(TINY_MODEL), tiny_config(steps=6), sys.argv[1])
    print("holding", flush=True)
    sys.stdin.readline()
    t.run(progress=False, plot=False)
    print("done", flush=True)
""")


def start_holder(run_dir) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(run_dir)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()
    if line.strip() != "holding":
        proc.kill()
        pytest.fail(f"the holder did not start: {proc.communicate()[1]}")
    return proc


def npformer(*argv, **kw) -> subprocess.CompletedProcess:
    """``npformer ARGV`` in a new process."""
    return subprocess.run([sys.executable, "-m", "npformer", *map(str, argv)], capture_output=True, text=True,
                          timeout=120, **kw)


def one_line_error(err: str, *fragments):
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for f in fragments:
        assert f in lines[0], lines[0]


def checkpoint_bytes(run_dir) -> dict:
    return {n: (run_dir / n).read_bytes() for n in (ck.MODEL, ck.OPTIMIZER, ck.STATE)}


# -- one trainer per run ------------------------------------------------------------------------

def test_lock_is_exclusive_names_the_holder_and_goes_away(tmp_path):
    first = RunLock(tmp_path)
    assert (tmp_path / LOCK).read_text().strip() == str(os.getpid())
    with pytest.raises(RunLocked, match=rf"being trained by another process \(pid {os.getpid()}\)"):
        RunLock(tmp_path)                                     # another open file: refused, even in-process
    first.release()
    first.release()                                           # twice is harmless
    assert not (tmp_path / LOCK).exists()
    with RunLock(tmp_path):
        pass
    assert not (tmp_path / LOCK).exists()


def test_second_trainer_of_a_run_in_progress_is_refused(tmp_path, capsys):
    d = tmp_path / "run"
    holder = start_holder(d)
    try:
        proc = npformer("train", "copy", "--out", d, "--steps", 3, "--no-progress")     # a second command
        assert proc.returncode == 2
        one_line_error(proc.stderr, f"npformer train: error: {d} is being trained by another process "
                                    f"(pid {holder.pid})")
        for extra in (["--force"], ["--resume"]):                                     # in-process too
            rc = main(["train", "copy", "--out", str(d), "--steps", "3", "--no-progress", *extra])
            _, err = capsys.readouterr()
            assert rc == 2
            one_line_error(err, "is being trained by another process", f"pid {holder.pid}")
        with pytest.raises(RunLocked):
            Trainer.resume(d)
        with pytest.raises(RunLocked):
            Trainer.start(tiny_task(), dict(TINY_MODEL), tiny_config(), d, force=True)
        assert {"config.json", "model.safetensors", LOCK} <= {p.name for p in d.iterdir()}   # --force deleted nothing
        out, err = holder.communicate("go\n", timeout=120)                            # the first goes on
    finally:
        holder.kill()
    assert holder.returncode == 0, err
    assert out.strip().endswith("done")
    run = load_run(d)
    assert run.step == 6 and run.metrics["final"]
    assert len(losses(d)) == 6
    assert {p.name for p in d.iterdir()} == RUN_FILES                                 # the lock file is gone


def test_a_killed_holder_leaves_no_lock_that_blocks(tmp_path, capsys):
    d = tmp_path / "run"
    holder = start_holder(d)
    holder.kill()                                                                     # SIGKILL: no clean-up
    holder.wait(timeout=60)
    assert holder.returncode == -signal.SIGKILL
    assert (d / LOCK).exists()                                                        # a stale file, not a lock
    rc = main(["train", "copy", "--out", str(d), "--resume", "--steps", "2", "--no-progress", "--no-plot"])
    capsys.readouterr()
    assert rc == 0
    assert load_run(d).step == 2 and not (d / LOCK).exists()


def test_the_lock_is_given_back_however_run_ends(start_tiny, tmp_path):
    t = start_tiny("run", steps=2)
    assert (tmp_path / "run" / LOCK).exists()

    def crash(*a):
        raise RuntimeError("boom")
    t.task.loss = crash
    with pytest.raises(RuntimeError, match="boom"):
        t.run(progress=False, plot=False)
    assert not (tmp_path / "run" / LOCK).exists()
    Trainer.resume(tmp_path / "run").close()                                          # nobody holds it
    assert not (tmp_path / "run" / LOCK).exists()


# -- a full disk --------------------------------------------------------------------------------

def test_write_error_names_the_file_and_the_cause(tmp_path, monkeypatch):
    path = tmp_path / "f.json"
    path.write_bytes(b"old")

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(files.os, "fsync", full)
    with pytest.raises(WriteError) as e:
        files.atomic_write_json(path, {"new": 1})
    assert str(e.value) == f"cannot write {path}: No space left on device"
    assert e.value.errno == errno.ENOSPC
    assert path.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["f.json"]


def limit_file_size(max_bytes: int):
    """preexec_fn: files of the child may not grow past ``max_bytes``, as after `ulimit -f`; a write
    beyond fails with EFBIG (CPython ignores SIGXFSZ at start-up) as it would with ENOSPC on a full disk."""
    import resource

    def set_limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    return set_limit


@pytest.mark.skipif(not hasattr(signal, "SIGXFSZ"), reason="needs POSIX file-size limits")
@pytest.mark.parametrize("fails", [ck.MODEL, ck.OPTIMIZER])
def test_full_disk_while_saving_keeps_the_last_checkpoint(tmp_path, capsys, fails):
    d = tmp_path / "run"
    assert main(["train", "copy", "--out", str(d), "--steps", "4", "--no-progress", "--no-plot", *TINY_SETS]) == 0
    capsys.readouterr()
    good = checkpoint_bytes(d)
    model, optimizer = (len(good[n]) for n in (ck.MODEL, ck.OPTIMIZER))
    # small files fit; the failing file does not (the optimizer fails after the model was staged)
    limit = model // 2 if fails == ck.MODEL else (model + optimizer) // 2
    proc = npformer("train", "copy", "--out", d, "--resume", "--steps", 8, "--no-progress", "--no-plot",
                    preexec_fn=limit_file_size(limit))
    assert proc.returncode == 2, proc.stderr
    one_line_error(proc.stderr, f"npformer train: error: cannot write {d / fails}: File too large")
    assert not list(d.glob(".*.tmp"))                                     # no temporary file left
    assert not (d / LOCK).exists()
    assert checkpoint_bytes(d) == good                                    # the step-4 checkpoint, untouched
    assert load_run(d).step == 4
    rc = main(["train", "copy", "--out", str(d), "--resume", "--steps", "8", "--no-progress", "--no-plot"])
    out, _ = capsys.readouterr()
    assert rc == 0 and "resuming copy" in out and "at step 4" in out
    assert load_run(d).step == 8
    from npformer.train.trainer import read_log
    assert list(read_log(d)["step"]) == list(range(1, 9))                # each step once
