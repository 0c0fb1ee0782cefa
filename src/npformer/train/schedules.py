"""Learning-rate schedules. ``step`` counts from 1 (the first update), as the paper's step_num.

noam (paper section 5.3, "Noam" after Noam Shazeer):

    lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)

    It rises linearly for ``warmup`` steps, peaks at scale * (d_model * warmup)^-0.5 when
    step = warmup, then decays as 1 / sqrt(step). The paper uses warmup = 4000, scale = 1.

cosine with warmup:

    lrate = peak * step / warmup                                              step <= warmup
    lrate = min_lr + (peak - min_lr) * (1 + cos(pi * (step - warmup) / (total - warmup))) / 2
                                                                              warmup < step <= total
    lrate = min_lr                                                            step > total
"""
from __future__ import annotations

import math
from typing import Callable


def _check_step(step) -> int:
    if isinstance(step, bool) or int(step) != step or step < 1:
        raise ValueError(f"step counts from 1, got {step!r}")
    return int(step)


def noam_lr(step: int, d_model: int, warmup: int, scale: float = 1.0) -> float:
    """The paper's schedule: scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)."""
    step = _check_step(step)
    if d_model < 1 or warmup < 1:
        raise ValueError(f"d_model and warmup must be >= 1, got d_model={d_model}, warmup={warmup}")
    return scale * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


def cosine_lr(step: int, peak_lr: float, warmup: int, total_steps: int, min_lr: float = 0.0) -> float:
    """Linear warmup to ``peak_lr``, then a half cosine down to ``min_lr`` at ``total_steps``."""
    step = _check_step(step)
    if warmup < 0 or total_steps < 1:
        raise ValueError(f"cosine schedule needs warmup >= 0 and total_steps >= 1, got warmup={warmup}, "
                         f"total_steps={total_steps}")
    if warmup and step <= warmup:                                        # (a run shorter than its warmup only warms up)
        return peak_lr * step / warmup
    if step >= total_steps:
        return min_lr
    progress = (step - warmup) / (total_steps - warmup)                  # in (0, 1)
    return min_lr + (peak_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


def make_schedule(name: str, *, d_model: int, warmup: int, lr: float, lr_scale: float,
                  total_steps: int | None, min_lr: float) -> Callable[[int], float]:
    """A function step -> learning rate for the trainer.

    name: "noam" (uses d_model, warmup, lr_scale), "cosine" (lr is the peak; needs total_steps),
    or "constant" (lr).
    """
    if name == "noam":
        return lambda step: noam_lr(step, d_model, warmup, lr_scale)
    if name == "cosine":
        if total_steps is None:
            raise ValueError("the cosine schedule needs a number of steps (--steps N or --set steps=N)")
        cosine_lr(1, lr, warmup, total_steps, min_lr)                    # check the arguments now
        return lambda step: cosine_lr(step, lr, warmup, total_steps, min_lr)
    if name == "constant":
        return lambda step: lr
    raise ValueError(f"schedule must be 'noam', 'cosine' or 'constant', got {name!r}")
