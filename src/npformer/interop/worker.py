"""One worker of ``npformer train --engine torch --nproc N``: ``python -m npformer.interop.worker PLAN``.

PyTorch's launcher starts it (``npformer.interop.launch``) with RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR and MASTER_PORT in its environment. PLAN is JSON: {"out": the run directory, which the
launching ``npformer train`` has prepared and holds the lock of, "device": "cpu" or "cuda",
"progress": bool, "plot": bool}. The process group is gloo on the CPU and nccl on CUDA; rank 0 runs
the training loop and writes, the others follow it (``engine.TorchTrainer``).

Exit codes, which the launcher reads: 0 done; 1 training diverged and 2 an error, each said in one
line by rank 0; 130 interrupted (rank 0 saved the step in progress); PEER_LOST when a collective
failed because another worker went away (nothing printed: the launcher names the worker that did).

Ctrl-C: the launcher forwards one SIGINT to each of its workers. The others ignore it from their first
line on. Rank 0 holds it from its first line too: inside the Trainer's loop the loop's own handler
finishes the step in progress and saves it; one that came earlier (while torch loads, while joining)
is handed to that handler at the first step, so that step is the one saved.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import sys

PEER_LOST = 3


def main(argv: list[str] | None = None) -> int:
    plan = json.loads((sys.argv[1:] if argv is None else argv)[0])
    # Ctrl-C, before torch takes seconds to load: rank 0 finishes the step, saves, then stops the others
    early = _EarlyInterrupt() if os.environ.get("RANK", "0") == "0" else None
    signal.signal(signal.SIGINT, signal.SIG_IGN if early is None else early)
    import torch
    import torch.distributed as dist

    quiet_torch_logs()
    device = plan["device"]
    if device == "cuda":
        local = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local)
        device = f"cuda:{local}"
    dist.init_process_group("nccl" if device.startswith("cuda") else "gloo")
    rank = dist.get_rank()
    code = None
    try:
        try:
            code = _work(plan, device, rank, early)
        except SystemExit as e:                    # a follower told that the leader could not read the run
            code = e.code if isinstance(e.code, int) else 0
        dist.barrier()                             # nobody tears down while another is mid-collective
    except RuntimeError as e:
        if not peer_lost(e):
            raise
        code = PEER_LOST if code is None else code  # a code already decided stands (rank 0 has said why)
    finally:
        dist.destroy_process_group()
    # Leave without the interpreter's teardown: gloo's threads can still hold tensors then, and freeing
    # them during finalization aborts the process (SIGABRT, "terminate called without an active
    # exception"), which would turn a finished run into a failed one. Everything is written by now.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


# gloo's and NCCL's errors when the other end of a collective has gone: torch raises most as DistError,
# gloo's transport errors as plain RuntimeErrors that name their source file
_GONE = ("Connection closed", "Connection reset", "Broken pipe", "gloo/transport", "NCCL communicator")


def peer_lost(e: BaseException) -> bool:
    """Did a collective fail because another worker went away?"""
    import torch.distributed as dist

    return isinstance(e, dist.DistError) or any(s in str(e) for s in _GONE)


class _EarlyInterrupt:
    """Rank 0's SIGINT handler outside the Trainer's loop: notes the Ctrl-C, for the loop to take."""

    def __init__(self) -> None:
        self.pending = False

    def __call__(self, signum, frame) -> None:
        self.pending = True

    def take(self) -> bool:
        pending, self.pending = self.pending, False
        return pending


def _work(plan: dict, device: str, rank: int, early: _EarlyInterrupt | None = None) -> int:
    """Join the run, then lead it (rank 0) or follow."""
    from .engine import TorchTrainer

    try:
        trainer = TorchTrainer.join(plan["out"], device).attach(device)
    except (ValueError, OSError) as e:            # rank 0 could not read the run; the others were told
        sys.stderr.write(f"npformer train: error: {str(e).strip().splitlines()[0] if str(e).strip() else e!r}\n")
        return 2
    if rank:
        trainer.follow()
        return 0
    trainer.second_interrupt_aborts = False       # the launcher forwards one SIGINT and answers the rest
    if early is not None:
        trainer.interrupted = early.take
    return _lead(trainer, plan)


def _lead(trainer, plan: dict) -> int:
    """Rank 0: the Trainer's loop; the others are told to stop when it ends (unless a collective failed:
    then there is nobody to tell)."""
    from ..train.trainer import TrainingDiverged
    from .engine import NoScoredTargets

    try:
        trainer.run(progress=plan["progress"], plot=plan["plot"])
        code = 0
    except TrainingDiverged as e:
        sys.stderr.write(f"npformer train: {e}\n")
        code = 1
    except KeyboardInterrupt:                      # the step in progress is saved (Trainer.run)
        code = 130
    except (OSError, NoScoredTargets) as e:        # a write that failed (disk full): WriteError names the file
        sys.stderr.write(f"npformer train: error: {e}\n")
        code = 2
    trainer.stop_followers()
    return code


def quiet_torch_logs() -> dict[str, int]:
    """torch.distributed's loggers (those imported so far) write their warnings and errors to stderr;
    npformer's command says in one line what happened instead. NPFORMER_DEBUG=1 keeps them.
    Returns the levels they had, {name: level}, for ``restore_logs``."""
    if os.environ.get("NPFORMER_DEBUG"):
        return {}
    names = [n for n in logging.root.manager.loggerDict if n.startswith("torch.distributed.")]
    before = {}
    for name in ["torch.distributed", *names]:
        logger = logging.getLogger(name)
        before[name] = logger.level
        logger.setLevel(logging.CRITICAL)
    return before


def restore_logs(levels: dict[str, int]) -> None:
    """Give loggers back the levels ``quiet_torch_logs`` returned."""
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


if __name__ == "__main__":
    raise SystemExit(main())
