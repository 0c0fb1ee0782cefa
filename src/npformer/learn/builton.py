"""An exercise built on earlier ones (multi-head attention on attention), wrong only because one of the
learner's own helpers is: ``BuiltOn`` says so when the numbers show it."""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..nn import merge_heads, split_heads
from ..ops import attention_forward, layernorm_forward
from .checks import Case, close, judge
from .references import _ffn, _mha
from .wire import ChannelBroken


def _mha_on(helpers, x, params, n_heads, mask=None):
    """The correct multi-head attention, calling ``helpers`` (exercise name -> function) for its steps."""
    q, k, v = (helpers["split_heads"](x @ params[f"w_{n}"] + params[f"b_{n}"], n_heads) for n in "qkv")
    out, _ = helpers["attention"](q, k, v, mask)                      # (B, H, T, D)
    return helpers["merge_heads"](out) @ params["w_o"] + params["b_o"]  # (B, T, E)


def _block_on(helpers, x, params, n_heads, mask=None):
    """The correct post-LN encoder block, calling ``helpers`` for its steps."""
    ln = helpers["layer_norm"]
    h = ln(x + helpers["multi_head_attention"](x, params["attn"], n_heads, mask), **params["ln_1"])
    return ln(h + helpers["feed_forward"](h, params["ffn"]), **params["ln_2"])   # (B, T, E)


_CORRECT_HELPERS = {      # the exercises' contracts, from npformer's ops
    "split_heads": split_heads,
    "merge_heads": merge_heads,
    "attention": lambda q, k, v, mask=None: attention_forward(q, k, v, mask=mask)[:2],   # (out, weights)
    "layer_norm": lambda x, gamma, beta, eps=1e-5: layernorm_forward(x, gamma, beta, eps)[0],
    "feed_forward": _ffn,
    "multi_head_attention": _mha,
}


@dataclass(frozen=True)
class BuiltOn:
    """For an exercise whose code calls earlier exercises (``uses``): when the learner's output is what the
    correct ``build(helpers, *args)`` gives with the learner's own failing helpers in place of the correct
    ones, say that the fault is in those helpers. The learner's helpers are the functions of those names
    next to theirs (the workbook's module, or the notebook's namespace). ``explain`` runs in the parent and
    asks ``trials`` to run the helpers and the composition; ``compose`` is what the child runs for it."""
    what: str
    uses: tuple[str, ...]
    build: Callable

    def explain(self, trials, table, exercise: str, index: int, case: Case, got: dict) -> tuple[str, int] | None:
        """``table``: the exercises by name (``exercises.EXERCISES``)."""
        failing = [n for n in self.uses if _fails_its_check(trials, table, exercise, n)]
        if not failing:
            return None
        try:
            built = trials.compose(exercise, index, failing)
        except ChannelBroken:
            raise
        except Exception:                   # their helper cannot even run here: nothing to claim
            return None
        (name,) = got
        if not (built.is_array and built.exact and built.data is not None and built.data.dtype.kind == "f"
                and built.shape == got[name].shape and close(got[name], built.data.astype(np.float64), case.dtype)):
            return None
        names = " and ".join(failing)
        which = "which fails its own check" if len(failing) == 1 else "which fail their own checks"
        return (f"This matches a correct {self.what} built on your {names}, {which}: fix {names} first",
                table[failing[0]].section)

    def compose(self, fn, theirs, case: Case) -> np.ndarray:
        mine = getattr(fn, "__globals__", None) or {}
        helpers = {n: mine[n] if n in theirs else _CORRECT_HELPERS[n] for n in self.uses}
        with np.errstate(all="ignore"):
            return self.build(helpers, *copy.deepcopy(case.args))


def _fails_its_check(trials, table, exercise: str, helper: str) -> bool:
    """Whether the learner's ``helper`` (next to their ``exercise``) fails that exercise's own check (an
    exception counts as not failing: it is no wrong number to explain)."""
    spec = table[helper]
    try:
        return judge(spec.spec, spec.cases(), trials.run(exercise, helper)).status == "fail"
    except ChannelBroken:
        raise
    except Exception:
        return False

