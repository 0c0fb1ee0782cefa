"""What a training run is asked to do: ``TrainConfig`` (checked when made, saved as JSON in the run's
config.json), which of its settings ``--resume`` may change, and the error of a run that diverged."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass


class TrainingDiverged(RuntimeError):
    """The loss or the gradient stopped being finite; the message names the step."""


@dataclass
class TrainConfig:
    steps: int | None = 1000             # optimizer updates in all; None = until `minutes` run out
    minutes: float | None = None         # wall-clock budget of this invocation (None = no limit)
    batch_size: int = 64                 # examples per step
    optimizer: str = "adam"              # "adam" (L2 weight decay) or "adamw" (decoupled decay)
    schedule: str = "noam"               # "noam" (paper 5.3), "cosine" (warmup + cosine) or "constant"
    lr: float = 1e-3                     # peak learning rate of "cosine", the rate of "constant"
    lr_scale: float = 1.0                # factor on the "noam" rate d_model^-0.5 * min(s^-0.5, s * w^-1.5)
    warmup: int = 400                    # warmup steps (noam and cosine)
    min_lr: float = 0.0                  # where "cosine" ends
    beta1: float = 0.9                   # Adam's first-moment decay (paper: 0.9)
    beta2: float = 0.98                  # Adam's second-moment decay (paper: 0.98)
    eps: float = 1e-9                    # Adam's epsilon (paper: 1e-9)
    weight_decay: float = 0.0            # decay of the weight matrices (not biases or LayerNorm)
    clip_norm: float | None = 1.0        # clip the global gradient norm to this (None = no clipping)
    label_smoothing: float = 0.1         # paper 5.4: 0.1
    eval_every: int = 250                # evaluate held-out data and save a checkpoint every N steps
    eval_n: int = 500                    # held-out examples per periodic evaluation
    final_eval_n: int | None = None      # held-out examples of the final evaluation (None: the task's default)
    seed: int = 0                        # the one seed every random number derives from
    blas_threads: int | None = None      # BLAS threads during training steps (None: numpy's default)

    def __post_init__(self) -> None:
        if self.steps is None and self.minutes is None:
            raise ValueError("give a budget: steps or minutes (or both)")
        if self.steps is not None and self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        if self.minutes is not None and not self.minutes > 0:
            raise ValueError(f"minutes must be > 0, got {self.minutes}")
        if self.blas_threads is not None and self.blas_threads < 1:
            raise ValueError(f"blas_threads must be >= 1 or None, got {self.blas_threads}")
        if self.final_eval_n is not None and self.final_eval_n < 1:
            raise ValueError(f"final_eval_n must be >= 1 or None, got {self.final_eval_n}")
        for name in ("batch_size", "eval_every", "eval_n"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.optimizer not in ("adam", "adamw"):
            raise ValueError(f"optimizer must be 'adam' or 'adamw', got {self.optimizer!r}")
        if self.schedule not in ("noam", "cosine", "constant"):
            raise ValueError(f"schedule must be 'noam', 'cosine' or 'constant', got {self.schedule!r}")
        if self.warmup < 0 or (self.schedule == "noam" and self.warmup < 1):
            raise ValueError(f"warmup must be >= 1 for noam and >= 0 otherwise, got {self.warmup}")
        if not (self.lr >= 0 and self.lr_scale >= 0 and self.min_lr >= 0 and self.weight_decay >= 0):
            raise ValueError("lr, lr_scale, min_lr and weight_decay must be >= 0, got "
                             f"{self.lr}, {self.lr_scale}, {self.min_lr}, {self.weight_decay}")
        if not (0 <= self.beta1 < 1 and 0 <= self.beta2 < 1 and self.eps > 0):
            raise ValueError(f"need 0 <= beta1, beta2 < 1 and eps > 0, got {self.beta1}, {self.beta2}, {self.eps}")
        if self.clip_norm is not None and not self.clip_norm > 0:
            raise ValueError(f"clip_norm must be > 0 or None, got {self.clip_norm}")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {self.label_smoothing}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# settings that may change when resuming (the rest would make the resumed run a different run)
RESUMABLE = ("steps", "minutes", "eval_every", "eval_n", "final_eval_n", "blas_threads")
