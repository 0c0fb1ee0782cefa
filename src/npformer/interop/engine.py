"""The torch engine: npformer's training loop with each update computed by PyTorch.

``npformer train TASK --engine torch`` trains ``npformer.to_torch(model)``; all else is npformer's
own ``Trainer`` (train/trainer.py), whose two update methods, ``gradients`` and ``apply_gradients``,
``TorchTrainer`` overrides: the same batches from the same generator, the same schedule, held-out
evaluation with ``task.evaluate`` on the npformer model (the twin's weights copied back, as
``from_torch`` copies them), the same logs, and checkpoints in npformer's format, so ``eval``,
``translate``, ``attention`` and ``--resume`` read the run whichever engine wrote it.

One step, on each of W workers (rank r), with B the configured (global) batch size:

    batch     = task.train_batch(data_rng, B)          every rank draws the same global batch ...
    shard     = rows [r*B//W, (r+1)*B//W) of it         ... and keeps its own rows
    loss_sum  = cross_entropy(twin(shard), reduction="sum", ignore_index=pad, label_smoothing)
    n, total  = all_reduce([count, loss_sum])           the global batch's scored targets and loss
    (loss_sum * W / n).backward()                       DDP averages over W: d(total / n)
    clip_grad_norm_(clip_norm); Adam or AdamW step      the functions clip.py and optim.py mirror

so every rank holds the gradient of the global batch's mean loss: one process on the whole batch
computes the same (tests/interop/test_engine.py compares 2 workers with 1, step by step). Dropout
masks come from torch's generator, seeded from (seed, step, rank), so a resumed run takes the
masks the uninterrupted one would have.

Rank 0 leads: it runs the Trainer's loop, evaluates and writes the run directory, and before each
step broadcasts STEP (at the end, STOP); the other ranks ``follow``. Workers are launched by
``npformer.interop.launch`` and start in ``npformer.interop.worker``. Between ranks travel tensors
only: the configuration and trainer state as UTF-8 JSON bytes (length first), never a pickle.

A global batch with no scored target (every target padding or ignored) has no mean loss: every rank
sees n = 0 after the all-reduce and raises ``NoScoredTargets`` before any gradient is computed.
"""
from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..models.classifier import IGNORE_LABEL
from ..train.checkpoint import read_config
from ..train.trainer import Trainer, TrainingDiverged, _saved_step
from .torch import _key_from_torch, _load_from_torch, to_torch

STOP, STEP = 0, 1                      # the leader's word to the followers before each step


class NoScoredTargets(ValueError):
    """A global batch without one scored target: its mean loss is 0 / 0, so no update can be computed."""


# -- what the loss scores, per model kind: (logits (N, C), targets (N,), ignored target) ----------
def _seq2seq(run, c, src, tgt_in, tgt_out):
    return run(src, tgt_in).flatten(0, 1), tgt_out.flatten(), c.pad_id        # (B*T, V), (B*T,)


def _language_model(run, c, ids_in, ids_out):
    return run(ids_in).flatten(0, 1), ids_out.flatten(), c.pad_id            # (B*T, V), (B*T,)


def _classifier(run, c, ids, labels):
    if c.head == "tagging" and c.pad_id >= 0:                                 # no loss on padding
        labels = labels.masked_fill(ids == c.pad_id, IGNORE_LABEL)           # (B, T)
    logits = run(ids)                                                         # (B, C) or (B, T, C)
    return logits.reshape(-1, logits.shape[-1]), labels.flatten(), IGNORE_LABEL


def _image_classifier(run, c, images, labels):
    return run(images), labels, IGNORE_LABEL                                  # (B, K), (B,)


def _policy(run, c, words, images, actions):
    logits = run(words, images)                                               # (B, 2, N): pick, place
    return logits.reshape(-1, logits.shape[-1]), actions.flatten(), IGNORE_LABEL   # (B*2, N), (B*2,)


def _action_tokens(run, c, words, images, actions_in, targets, goals=None):
    if goals is None:
        logits = run(words, images, actions_in)                               # (B, A, V_a): each slot's token
        return logits.reshape(-1, logits.shape[-1]), targets.flatten(), IGNORE_LABEL   # (B*A, V_a), (B*A,)
    logits, goal_logits = run(words, images, actions_in, goal=True)           # and the goal head's (B, N)
    return [(logits.reshape(-1, logits.shape[-1]), targets.flatten(), IGNORE_LABEL),
            (goal_logits, goals, IGNORE_LABEL)]                               # each goal one more target


# the model kinds to_torch converts
# model kind -> (model, its config, *batch) -> (logits, targets, ignore index), or a list of them whose
# scored targets share one mean (the gripper policy's goal head beside its action tokens)
SCORED: dict[str, Callable[..., tuple]] = {"transformer": _seq2seq, "decoder_lm": _language_model,
                                           "classifier": _classifier, "vit": _image_classifier, "vla": _policy,
                                           "action_lm": _action_tokens}


def check_engine_kind(task_name: str, kind: str) -> None:
    """ValueError unless the torch engine can train ``kind``."""
    if kind not in SCORED:
        raise ValueError(f"--engine torch trains {', '.join(SCORED)} models (those to_torch converts); "
                         f"task {task_name!r} uses a {kind} model: train it with --engine numpy")


def dropout_seed(seed: int, step: int, rank: int) -> int:
    """The torch generator's seed for ``step`` on ``rank``: a function of the three, so resuming repeats it."""
    return int(np.random.SeedSequence([seed, step, rank]).generate_state(1)[0])


class _LauncherLock:
    """A worker's stand-in for the run directory's lock: the launching ``npformer train`` holds the
    real one (``checkpoint.RunLock``) from before the workers start until they have all ended."""

    def release(self) -> None:
        pass


class TorchTrainer(Trainer):
    """A ``Trainer`` whose updates PyTorch computes. Build it as a Trainer (``start``, ``resume``,
    ``from_config``, or ``join`` in a launched worker), then ``attach(device)`` before ``run()``.
    Without a process group it is one worker; in one, rank 0 runs and the others ``follow``."""

    def __init__(self, out_dir, task, model, config: dict, train) -> None:
        check_engine_kind(task.name, config["model_kind"])
        super().__init__(out_dir, task, model, config, train)
        self.rank, self.world, self.device = 0, 1, "cpu"
        self.twin: Any = None                                # to_torch(model), made by attach
        self.ddp: Any = None                                 # the twin, in DistributedDataParallel with several ranks
        self.torch_optimizer: Any = None                     # torch.optim.Adam or AdamW, made by attach
        self.twin_params: dict = {}                          # npformer key -> the twin's Parameter
        self.interrupted: Callable[[], bool] | None = None   # rank 0's worker: "was there a Ctrl-C before the loop?"

    # -- building ----------------------------------------------------------------------------------
    @classmethod
    def join(cls, out_dir, device: str = "cpu") -> "TorchTrainer":
        """This worker's trainer, in a process group: rank 0 reads the run in ``out_dir`` (prepared by
        the launching process, which holds its lock); the others receive its config and state from
        rank 0, so they need no copy of the directory. Every rank then calls ``attach``."""
        dist = torch.distributed
        if dist.get_rank() == 0:
            data = b""                                               # empty tells the others to give up
            try:
                self = cls.from_config(out_dir, read_config(out_dir))
                self.load()
                assert self.data_rng is not None                     # load made it
                data = json.dumps({"config": self.config, "step": self.step, "adam_step": self.optimizer.t,
                                   "data_rng": self.data_rng.bit_generator.state}).encode("utf-8")
            finally:
                broadcast_bytes(data, device)
        else:
            data = broadcast_bytes(None, device)
            if not data:
                raise SystemExit(0)                                  # the leader reports why
            payload = json.loads(data.decode("utf-8"))
            self = cls.from_config(out_dir, payload["config"])
            self.step, self.optimizer.t = payload["step"], payload["adam_step"]
            self.data_rng = np.random.default_rng()
            self.data_rng.bit_generator.state = payload["data_rng"]
        self.lock = _LauncherLock()  # type: ignore[assignment]  # RunLock's stand-in: release() only
        for a in [*self.model.state_dict().values(), *self.optimizer.m.values(), *self.optimizer.v.values()]:
            t = torch.from_numpy(a).to(device)                       # rank 0's weights and moments, in place
            dist.broadcast(t, src=0)
            a[...] = t.cpu().numpy()
        return self

    def attach(self, device: str = "cpu") -> "TorchTrainer":
        """Build the twin on ``device`` (in DistributedDataParallel when a process group is up) and torch's
        Adam/AdamW from npformer's optimizer, with its hyper-parameters, weight-decay choice and moments.
        torch computes on ``blas_threads`` threads (default: the cores shared among this machine's workers)."""
        dist = torch.distributed
        self.device = device
        if dist.is_available() and dist.is_initialized():
            self.rank, self.world = dist.get_rank(), dist.get_world_size()
        local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        torch.set_num_threads(self.cfg.blas_threads or max(1, (os.cpu_count() or 1) // local))
        self.twin = to_torch(self.model).train().to(device)
        self.twin_params = {_key_from_torch(k): p for k, p in self.twin.named_parameters()}
        self.ddp = self.twin
        if self.world > 1:
            ids = [torch.device(device).index or 0] if device.startswith("cuda") else None
            # the twin's only buffer is the fixed sinusoid table: nothing to send before each step
            self.ddp = torch.nn.parallel.DistributedDataParallel(self.twin, device_ids=ids, forward_sync_buffers=False)
        self.torch_optimizer = self._torch_optimizer()
        return self

    def _torch_optimizer(self):
        """torch.optim.Adam (L2) or AdamW (decoupled) equal to ``self.optimizer``, moments included."""
        opt = self.optimizer
        groups = [{"params": [p for k, p in self.twin_params.items() if opt.decay[k] == d],
                   "weight_decay": opt.weight_decay if d else 0.0} for d in (True, False)]
        cls = torch.optim.AdamW if opt.decoupled else torch.optim.Adam
        out = cls([g for g in groups if g["params"]], lr=opt.lr, betas=(opt.beta1, opt.beta2), eps=opt.eps)
        if opt.t:
            for k, p in self.twin_params.items():
                out.state[p] = {"step": torch.tensor(float(opt.t)),
                                "exp_avg": torch.from_numpy(opt.m[k].copy()).to(self.device),
                                "exp_avg_sq": torch.from_numpy(opt.v[k].copy()).to(self.device)}
        return out

    # -- the update ----------------------------------------------------------------------------------
    def gradients(self, batch) -> tuple[float, float]:
        """Forward and backward of this rank's shard of ``batch``, gradients averaged over the ranks and
        clipped. Returns (the global batch's mean loss, gradient norm before clipping), as the Trainer's."""
        cfg = self.cfg
        torch.manual_seed(dropout_seed(cfg.seed, self.step + 1, self.rank))
        size = len(batch.arrays[0])
        lo, hi = self.rank * size // self.world, (self.rank + 1) * size // self.world
        shard = [torch.from_numpy(np.ascontiguousarray(a[lo:hi])).to(self.device) for a in batch.arrays]
        scored = SCORED[self.config["model_kind"]](self.ddp, self.twin.config, *shard)
        parts = scored if isinstance(scored, list) else [scored]
        loss_sum = sum(torch.nn.functional.cross_entropy(logits, targets, ignore_index=ignore, reduction="sum",
                                                         label_smoothing=cfg.label_smoothing)
                       for logits, targets, ignore in parts)
        count = sum((targets != ignore).sum() for _, targets, ignore in parts)
        totals = torch.stack([loss_sum.detach().double(), count.double()])  # (2,)
        if self.world > 1:
            torch.distributed.all_reduce(totals)
        total, n = totals.tolist()
        if n == 0:                                  # every rank sees it, before backward's collectives
            raise NoScoredTargets(f"step {self.step + 1}: no target of the batch of {size} examples is scored "
                                  "(every one is padding or ignored), so its mean loss is undefined; training "
                                  f"stopped. The last good checkpoint (step {_saved_step(self.out)}) is kept in "
                                  f"{self.out}")
        self.torch_optimizer.zero_grad(set_to_none=True)
        (loss_sum * (self.world / n)).backward()
        clip = cfg.clip_norm if cfg.clip_norm is not None else float("inf")
        norm = torch.nn.utils.clip_grad_norm_(list(self.twin_params.values()), clip)
        return total / n, float(norm)

    def apply_gradients(self, lr: float) -> None:
        for group in self.torch_optimizer.param_groups:
            group["lr"] = lr
        self.torch_optimizer.step()

    # -- back into npformer's model and optimizer, for evaluation and checkpoints --------------------
    def sync(self) -> None:
        """Copy the twin's weights into the npformer model and torch's moments into npformer's optimizer
        (nothing before ``attach``: the npformer side is then the only one)."""
        if self.twin is None:
            return
        _load_from_torch(self.model, self.twin)
        opt = self.optimizer
        for k, p in self.twin_params.items():
            state = self.torch_optimizer.state.get(p)
            if state:
                opt.m[k][...] = state["exp_avg"].detach().cpu().numpy()
                opt.v[k][...] = state["exp_avg_sq"].detach().cpu().numpy()
                opt.t = int(state["step"])

    def evaluate(self, n):
        self.sync()
        return super().evaluate(n)

    def save(self) -> None:
        self.sync()
        super().save()

    # -- leading and following -------------------------------------------------------------------
    def _word(self, word: int) -> int:
        """Rank 0's ``word`` to every rank (no-op for one worker); returns it."""
        if self.world == 1:
            return word
        t = torch.tensor([word], dtype=torch.int64, device=self.device)
        torch.distributed.broadcast(t, src=0)
        return int(t.item())

    def _train_step(self, log):
        if self.interrupted is not None and self.interrupted():
            signal.raise_signal(signal.SIGINT)      # a Ctrl-C from before the loop: the loop's own handler takes
        self._word(STEP)                            # it now, so this step is finished and saved (worker.py)
        return super()._train_step(log)

    def stop_followers(self) -> None:
        """Rank 0, when its run ends however it ends: tell the others to stop."""
        self._word(STOP)

    def follow(self) -> None:
        """Ranks > 0: take the leader's steps, with no log, evaluation or file, until it says STOP."""
        while self._word(STOP) == STEP:
            try:
                Trainer._train_step(self, _NO_LOG)  # type: ignore[arg-type]  # StepLog's row and flush, writing nothing
            except (TrainingDiverged, NoScoredTargets):               # the leader says so and stops the run
                pass


def broadcast_bytes(data: bytes | None, device: str = "cpu") -> bytes:
    """Rank 0's ``data`` to every rank (the others pass None): its length, then its bytes, as tensors on
    ``device`` (nccl sends only those), so nothing between ranks is pickled, as broadcast_object_list does."""
    dist = torch.distributed
    size = torch.tensor([-1 if data is None else len(data)], dtype=torch.int64, device=device)
    dist.broadcast(size, src=0)
    n = int(size.item())
    if not n:
        return b""
    buf = (torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device) if data is not None
           else torch.empty(n, dtype=torch.uint8, device=device))
    dist.broadcast(buf, src=0)
    return buf.cpu().numpy().tobytes()


class _NoLog:
    """The log of a following rank: rank 0 writes log.csv."""

    def row(self, *values) -> None:
        pass

    def flush(self) -> None:
        pass


_NO_LOG = _NoLog()
