"""Launching the workers of ``npformer train --engine torch``: PyTorch's own launcher (``torch.distributed.run``,
the code behind ``torchrun``, on the elastic agent) runs ``python -m npformer.interop.worker`` N times.

One machine: ``--standalone`` (a rendezvous on a free local port). Several: the launcher's static
rendezvous, as ``torchrun --nnodes M --node-rank R --rdzv-endpoint HOST:PORT`` would do it: machine R
starts ranks R*N .. R*N + N-1, machine 0 serves the rendezvous at HOST:PORT and holds rank 0, which
writes the run directory. No restarts: a worker that fails stops the run, and the command says which.

Ctrl-C: the first SIGINT is forwarded once to the workers (torch's launcher sends it and waits, up to its
shutdown timeout of 30 s, before it kills them), and rank 0 saves the step in progress (worker.py);
a later one is not forwarded, so it cannot make rank 0 abort mid-save.

What the launch changes in this process it undoes when it ends, however it ends: the environment
(OMP_NUM_THREADS and TORCH_CPP_LOG_LEVEL for the workers, torch's own variables), the levels of
torch.distributed's loggers, and the handlers of the signals torch's launcher takes over.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path

from ..train.checkpoint import STATE, read_json
from .worker import PEER_LOST, quiet_torch_logs, restore_logs

SAID = (1, 2, 130)                   # rank 0's exit codes after it has said why, in one line
TORCH_SIGNALS = ("SIGTERM", "SIGHUP", "SIGQUIT")    # torch's launcher's, forwarded to the workers; SIGINT is ours


def launch(out, nproc: int, device: str = "cpu", nnodes: int = 1, node_rank: int = 0,
           rdzv_endpoint: str | None = None, progress: bool = True, plot: bool = True) -> int:
    """Run ``nproc`` workers on this machine (of ``nnodes``) on the run prepared in ``out``; returns the
    exit code of ``npformer train``. KeyboardInterrupt when Ctrl-C stopped it (rank 0 saved its step)."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    plan = json.dumps({"out": str(out), "device": device, "progress": progress, "plot": plot})
    argv = ["--nproc-per-node", str(nproc), "--max-restarts", "0", "--monitor-interval", "0.1",
            "--signals-to-handle", ",".join(TORCH_SIGNALS)]
    if nnodes == 1:
        argv += ["--standalone"]
    else:                                          # torchrun's default backend: static, node 0 holds rank 0
        assert rdzv_endpoint is not None           # npformer train requires --rdzv-endpoint with --nnodes > 1
        argv += ["--nnodes", str(nnodes), "--node-rank", str(node_rank), "--rdzv-endpoint", rdzv_endpoint]
    argv += ["-m", "npformer.interop.worker", plan]
    with _Restored() as restored:
        restored.levels = quiet_torch_logs()
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")     # gloo's C++ warnings, in the workers too
        if nproc > 1:                              # torchrun's own default, without its banner about it
            os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, _FirstInterrupt(SignalException))
        try:
            run(parse_args(argv))
        except ChildFailedError as e:
            return _report({rank: f.exitcode for rank, f in e.failures.items()}, Path(out))
        except SignalException as e:
            raise KeyboardInterrupt from e
    return 0


class _FirstInterrupt:
    """The launcher's SIGINT handler: the first stops torch's launcher as its own handler would (it then
    forwards SIGINT to the workers and waits for them); later ones only say that it is waiting."""

    def __init__(self, signal_exception) -> None:
        self.signal_exception, self.count = signal_exception, 0

    def __call__(self, signum, frame) -> None:
        self.count += 1
        if self.count == 1:
            raise self.signal_exception(f"Process {os.getpid()} got signal: SIGINT", sigval=signal.SIGINT)
        if self.count == 2:
            sys.stderr.write("npformer train: waiting for rank 0 to save the step in progress\n")


class _Restored:
    """A context that gives back, on leaving, os.environ, the signal handlers torch's launcher installs
    (and our SIGINT handler), and the logger levels put in ``levels``."""

    def __enter__(self) -> "_Restored":
        self.environ = dict(os.environ)
        self.handlers = {}
        if threading.current_thread() is threading.main_thread():
            for name in ("SIGINT", *TORCH_SIGNALS):
                if hasattr(signal, name):
                    self.handlers[getattr(signal, name)] = signal.getsignal(getattr(signal, name))
        self.levels: dict[str, int] = {}
        return self

    def __exit__(self, *exc) -> None:
        for name in set(os.environ) - set(self.environ):
            del os.environ[name]
        for name, value in self.environ.items():
            if os.environ.get(name) != value:
                os.environ[name] = value
        for sig, handler in self.handlers.items():
            if handler is not None:                # None: installed outside Python, cannot be put back
                signal.signal(sig, handler)
        restore_logs(self.levels)


def _report(codes: dict[int, int], out: Path) -> int:
    """The exit code for workers' exit codes {global rank: code}, and one line naming the worker at fault
    unless rank 0 has already said why."""
    if codes.get(0) in SAID:
        return codes[0]
    # the launcher ends the others with SIGTERM once one has failed, and records them too
    culprits = ({r: c for r, c in codes.items() if c not in (PEER_LOST, -signal.SIGTERM)}
                or {r: c for r, c in codes.items() if c != PEER_LOST} or codes)
    rank = min(culprits)
    code = culprits[rank]
    try:
        why = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
    except ValueError:                                             # not a signal this Python knows
        why = f"was killed by signal {-code}"
    try:
        kept = f"the last good checkpoint (step {read_json(out / STATE)['step']}) is kept in {out}"
    except (OSError, ValueError, KeyError):
        kept = "the last good checkpoint stays where rank 0 writes it"
    sys.stderr.write(f"npformer train: worker rank {rank} {why}; the run stopped, {kept}; --resume continues it\n")
    return 1
