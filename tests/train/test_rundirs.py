"""Hostile run directories: npformer never writes through a symbolic link planted at a name it writes,
--force and the demo delete only npformer's files, trainer_state.json may name only numpy's bit
generators, and atomic writes keep the mode of the file they replace without touching the umask."""
import json
import os
import stat
import subprocess
import sys

import numpy as np
import pytest
from train_helpers import TINY_MODEL, TINY_SETS, cli, one_line_error, tiny_config, tiny_task

from npformer import files
from npformer.files import WriteError, atomic_write_bytes
from npformer.train.checkpoint import CONFIG, LOCK, METRICS, MODEL, OPTIMIZER, STATE
from npformer.train.probe import PROBE
from npformer.train.rundir import RUN_FILES, remove_run_dir
from npformer.train.runlog import CURVES, EVAL_LOG, LOG
from npformer.train.trainer import BIT_GENERATORS, Trainer

PRECIOUS = b"someone else's file\n"



def train(capsys, out, *extra):
    """``npformer train copy --out OUT --steps 2`` of the tiny model (--resume keeps the run's settings)."""
    sets = [] if "--resume" in extra else TINY_SETS
    return cli(capsys, "train", "copy", "--out", out, "--steps", 2, "--no-progress", "--no-plot", *sets, *extra)


def plant(link, target, content=PRECIOUS):
    """A symbolic link at ``link`` (replacing what is there) to ``target``, a file outside holding ``content``."""
    target.write_bytes(content)
    link.unlink(missing_ok=True)
    link.symlink_to(target)


def tiny_run(path, **kw):
    """A new tiny run in ``path`` (its step-0 checkpoint), its lock given back."""
    t = Trainer.start(tiny_task(), dict(TINY_MODEL), tiny_config(**kw), path)
    t.close()
    return t


# -- symbolic links ---------------------------------------------------------------------------------

def test_a_link_at_any_name_npformer_writes_is_refused_before_anything_is_written(tmp_path, capsys):
    """train.lock, log.csv, the checkpoint, the figures...: one line naming the link, exit 2, and the
    file it points to is untouched (before, train.lock and log.csv were truncated through it)."""
    for name in sorted(RUN_FILES):
        d, outside = tmp_path / f"run-{name}", tmp_path / f"outside-{name}"
        d.mkdir()
        plant(d / name, outside)
        rc, _, err = train(capsys, d)
        assert rc == 2, (name, err)
        one_line_error(err, str(d / name), "symbolic link")
        assert outside.read_bytes() == PRECIOUS, name
        assert [p.name for p in d.iterdir()] == [name] and (d / name).is_symlink()


def test_links_planted_while_training_are_replaced_never_followed(tmp_path):
    """After start's checks: each file written whole is renamed over the link, which it replaces. (The
    links point to copies of the files, which the run may read: reading through a link is no harm.)"""
    d = tmp_path / "run"
    t = Trainer.start(tiny_task(), dict(TINY_MODEL), tiny_config(steps=2, eval_every=1), d)
    rewritten = {name: (d / name).read_bytes() for name in (MODEL, OPTIMIZER, STATE, PROBE)}
    rewritten[METRICS] = b"{}"
    for name, content in rewritten.items():
        plant(d / name, tmp_path / f"outside-{name}", content)
    t.run(progress=False, plot=False)
    plant(d / CURVES, tmp_path / "outside-figure")                        # figures: atomic_savefig (curves.png,
    files.atomic_savefig(Figure(), d / CURVES)                             # act.png, attention.png) without
    assert (d / CURVES).read_bytes() == b"png" and not (d / CURVES).is_symlink()   # matplotlib, for time
    assert (tmp_path / "outside-figure").read_bytes() == PRECIOUS
    for name, content in rewritten.items():
        assert (tmp_path / f"outside-{name}").read_bytes() == content, name
        assert not (d / name).is_symlink() and (d / name).stat().st_size > 0, name
    assert Trainer.resume(d).step == 2


class Figure:
    """Stands in for a matplotlib figure: savefig writes b"png"."""

    def savefig(self, f, format, **kwargs):
        f.write(format.encode())


@pytest.mark.parametrize("name", [LOG, EVAL_LOG])
def test_a_link_planted_at_a_log_stops_the_run_unfollowed(tmp_path, name):
    """The logs are appended to in place: a link there is a WriteError naming it (one line from the
    command line, as any failed write), and the file it points to is untouched."""
    d = tmp_path / "run"
    t = Trainer.start(tiny_task(), dict(TINY_MODEL), tiny_config(steps=2, eval_every=1), d)
    plant(d / name, tmp_path / "outside")
    with pytest.raises(WriteError, match=rf"cannot write {d / name}: it is a symbolic link"):
        t.run(progress=False, plot=False)
    assert (tmp_path / "outside").read_bytes() == PRECIOUS
    assert not (d / LOCK).exists()                                            # the lock was given back


def test_a_link_at_a_temporary_name_is_never_opened(tmp_path, monkeypatch):
    target, planted, fresh = tmp_path / "f.json", tmp_path / ".f.json.planted.tmp", tmp_path / ".f.json.fresh.tmp"
    plant(planted, tmp_path / "outside")
    monkeypatch.setattr(files, "_temporary_names", lambda path: iter([planted, fresh]))
    atomic_write_bytes(target, b"new\n")
    assert target.read_bytes() == b"new\n" and (tmp_path / "outside").read_bytes() == PRECIOUS
    assert planted.is_symlink() and not fresh.exists()


def test_a_run_directory_that_is_a_link_is_refused(tmp_path, capsys):
    """Refused, not resolved: one line naming the link and its target; nothing written there."""
    real, link = tmp_path / "real", tmp_path / "link"
    real.mkdir()
    link.symlink_to(real)
    rc, _, err = train(capsys, link)
    assert rc == 2
    one_line_error(err, f"run directory {link} is a symbolic link (to {real})")
    assert list(real.iterdir()) == []
    tiny_run(real)
    before = {p.name: p.read_bytes() for p in real.iterdir()}
    rc, _, err = train(capsys, link, "--resume")
    assert rc == 2
    one_line_error(err, f"run directory {link} is a symbolic link")
    assert {p.name: p.read_bytes() for p in real.iterdir()} == before


# -- --force and the demo delete only npformer's files ------------------------------------------------

def test_force_deletes_only_npformers_files(tmp_path, capsys):
    d = tmp_path / "run"
    tiny_run(d)
    before = {p.name: p.read_bytes() for p in d.iterdir()}
    for foreign in ("notes.txt", "checkpoints"):
        (d / "notes.txt").write_text("mine") if foreign == "notes.txt" else (d / foreign).mkdir()
        rc, _, err = train(capsys, d, "--force")
        assert rc == 2
        one_line_error(err, f"--force deletes only npformer's files, and {d / foreign} is not one of them")
        assert {p.name: p.read_bytes() for p in d.iterdir() if p.is_file()} == {**before, "notes.txt": b"mine"}
    (d / "notes.txt").unlink()
    (d / "checkpoints").rmdir()
    (d / ".model.safetensors.a1b2c3d4.tmp").write_bytes(b"debris")
    plant(d / "explore.html", tmp_path / "outside")
    rc, _, err = train(capsys, d, "--force")
    assert rc == 0, err
    assert (tmp_path / "outside").read_bytes() == PRECIOUS                 # the link was deleted, not followed
    assert not (d / "explore.html").exists() and not list(d.glob(".*.tmp"))


def test_demo_deletes_only_npformers_run_directories(tmp_path, capsys):
    """A runs/dates that is not npformer's stops the demo before it trains, deleting nothing."""
    runs = tmp_path / "runs"
    (runs / "dates").mkdir(parents=True)
    (runs / "dates" / "mine.txt").write_text("mine")
    skip = [a for s in ("lesson", "translate", "attention", "tabletop", "explore") for a in ("--skip", s)]
    rc, _, err = cli(capsys, "demo", "--runs", runs, "--steps", 1, "--no-progress", *skip)
    assert rc == 2
    one_line_error(err, "the demo replaces only npformer's run directories", str(runs / "dates" / "mine.txt"))
    assert (runs / "dates" / "mine.txt").read_text() == "mine"
    assert {p.name for p in runs.iterdir()} == {"dates"}


def test_remove_run_dir_removes_only_a_run_directory(tmp_path):
    d = tmp_path / "run"
    tiny_run(d)
    plant(d / "act.png", tmp_path / "outside")
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "a-link").symlink_to(d)
    for other in (tmp_path / "a-file", tmp_path / "a-link"):
        with pytest.raises(ValueError, match=f"{other} is (not a directory|a symbolic link)"):
            remove_run_dir(other, "the demo")
    (d / "sub").mkdir()
    with pytest.raises(ValueError, match=f"{d / 'sub'} is not npformer's"):
        remove_run_dir(d, "the demo")
    assert (d / CONFIG).is_file()
    (d / "sub").rmdir()
    remove_run_dir(d, "the demo")
    assert not d.exists() and (tmp_path / "outside").read_bytes() == PRECIOUS


def test_an_episode_animation_and_cached_demonstrations_are_run_files(tmp_path):
    """A run that acts over time writes act.gif and may cache its demonstrations: --force and the demo may
    delete them, and nothing else, as the other files npformer writes."""
    from npformer.train.rundir import clear_run_dir, foreign_entry

    d = tmp_path / "run"
    d.mkdir()
    for name in ("act.gif", "demos.safetensors", ".demos.safetensors.abcd1234.tmp"):
        (d / name).write_bytes(b"x")
    assert foreign_entry(d) is None
    clear_run_dir(d, "--force")
    assert not any(d.iterdir())


# -- trainer_state.json names only numpy's bit generators --------------------------------------------

def as_json(state):
    """A bit generator's state as JSON has it (arrays as lists)."""
    return json.loads(json.dumps(state, default=lambda a: a.tolist()))


def set_rng_state(run_dir, state):
    doc = json.loads((run_dir / STATE).read_text())
    doc["data_rng"] = as_json(state)
    (run_dir / STATE).write_text(json.dumps(doc))


def test_trainer_state_may_name_only_numpys_bit_generators(tmp_path, capsys, monkeypatch):
    """Before, any attribute of numpy.random named there was called."""
    d = tmp_path / "run"
    tiny_run(d)
    called = []
    monkeypatch.setattr(np.random, "Planted", lambda *a: called.append(a) or np.random.PCG64(), raising=False)
    for name in ("Planted", "seed", ["PCG64"], None):
        set_rng_state(d, {"bit_generator": name, "state": {}})
        rc, _, err = train(capsys, d, "--resume")
        assert rc == 2, err
        one_line_error(err, f"{d / STATE}: 'data_rng' names bit generator {name!r}; expected one of numpy's "
                            "PCG64, PCG64DXSM, MT19937, Philox, SFC64")
    assert called == []
    set_rng_state(d, {"bit_generator": "PCG64", "state": "not a state"})
    with pytest.raises(ValueError, match=rf"{d / STATE}: 'data_rng' is not a valid PCG64 state"):
        Trainer.resume(d)
    for name, cls in BIT_GENERATORS.items():                                  # each of numpy's resumes exactly
        state = cls(7).state
        set_rng_state(d, state)
        t = Trainer.resume(d)
        t.close()
        assert as_json(t.data_rng.bit_generator.state) == as_json(state), name


# -- modes and the umask ---------------------------------------------------------------------------

def test_atomic_writes_keep_the_mode_of_the_file_they_replace(tmp_path):
    for mode in (0o600, 0o640, 0o755):
        p = tmp_path / f"f{mode:o}"
        p.write_bytes(b"old")
        p.chmod(mode)
        atomic_write_bytes(p, b"new")
        with files.atomic_writer(p) as f:
            f.write(b"newer")
        assert p.read_bytes() == b"newer" and stat.S_IMODE(p.stat().st_mode) == mode


@pytest.mark.skipif(os.name != "posix", reason="modes and the umask are POSIX's")
def test_a_new_file_gets_the_mode_open_would_give_it(tmp_path):
    """0666 less the umask in force now, not the one at import."""
    old = os.umask(0o027)
    try:
        atomic_write_bytes(tmp_path / "new", b"x")
        with open(tmp_path / "by-open", "w"):
            pass
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o640
    assert stat.S_IMODE((tmp_path / "by-open").stat().st_mode) == 0o640


def test_importing_npformer_leaves_the_umask_alone():
    code = ("import os; calls = []; real = os.umask\n"
            "os.umask = lambda m: calls.append(m) or real(m)\n"
            "import npformer, npformer.files, npformer.train.trainer, npformer.cli.train, npformer.cli.demo\n"
            "print(calls)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
