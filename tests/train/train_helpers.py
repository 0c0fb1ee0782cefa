"""Helpers shared by the training tests (imported by name: pytest puts this folder on sys.path).

Tiny runs: a copy task and model small enough that a step takes
milliseconds, with dropout on so that resuming must restore the dropout generator too."""
import numpy as np

from npformer.cli import main
from npformer.data.copy import CopyTask
from npformer.train.trainer import TrainConfig

TINY_MODEL = {"d_model": 16, "n_heads": 2, "d_ff": 32, "n_encoder_layers": 1, "n_decoder_layers": 1,
              "dropout": 0.1}


def tiny_task():
    return CopyTask(CopyTask.Settings(n_symbols=4, min_len=1, max_len=4))


def tiny_config(**kw):
    base = dict(steps=12, batch_size=8, warmup=5, eval_every=4, eval_n=20, final_eval_n=40,
                label_smoothing=0.1, seed=3)
    return TrainConfig(**{**base, **kw})


def losses(run_dir):
    from npformer.train.trainer import read_log
    return read_log(run_dir)["loss"]


def weights(run_dir):
    from npformer.train.checkpoint import read_safetensors
    return read_safetensors(run_dir / "model.safetensors")[0]


def assert_same_weights(a: dict, b: dict):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


# the tiny model and data of TINY_MODEL / tiny_task as command-line --set options
TINY_SETS = ["--set", "d_model=16", "--set", "n_heads=2", "--set", "d_ff=32", "--set", "n_encoder_layers=1",
             "--set", "n_decoder_layers=1", "--set", "data.max_len=4", "--set", "n_symbols=4",
             "--set", "eval_n=20", "--set", "final_eval_n=40"]


def cli(capsys, *argv):
    """npformer's command line in-process: (exit code, stdout, stderr)."""
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def one_line_error(err, *fragments):
    """stderr is one line, no traceback, holding every fragment."""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for f in fragments:
        assert f in lines[0], lines[0]
