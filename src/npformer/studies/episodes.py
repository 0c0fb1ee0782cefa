"""What the four gripper studies share (closed-loop, chunks, drift, data): arms scored over fresh episodes.

Each trained run plays ``per_seed(seeds)`` fresh evaluation episodes per arm, ceil(300 / seeds), so an
arm's pooled count over the seeds is at least ``EPISODES`` (300). A run's CSV row holds its own
successes and success; ``pool`` adds the arm's pooled numbers to each of its rows: ``arm_success``
(pooled successes / pooled episodes, which is also the mean over the seeds, since every seed plays as
many) and its Wilson 95% interval ``arm_ci_low``, ``arm_ci_high``. The table gives the seeds' spread
beside them, and the sentences quote ``quote``'s "success [low, high]" for every arm they compare, with
the verdict words of ``common.verdict``.

Episodes are played with one BLAS thread (threadpoolctl when installed): the matrices are 64 wide, and a
second thread, on shared cores, made an evaluation three times slower (measured: 100 episodes 42 s
against 14 s at load 3.8 on 2 cores).
"""
from __future__ import annotations

import contextlib
import math
from pathlib import Path

import numpy as np

from .common import Study, format_table, pct, summarise, verdict
from .figures import new_figure, save

EPISODES = 300                          # fresh episodes per arm, over all seeds together
QUIET = {"final_eval_n": 1, "eval_n": 1}   # the runs' own evaluations, unused by the studies: one episode each
PHRASE = {"ahead": "ahead of", "level": "level with", "behind": "behind"}


def per_seed(seeds: int) -> int:
    """Episodes each seed's run plays per arm: ceil(EPISODES / seeds)."""
    return math.ceil(EPISODES / max(1, seeds))


@contextlib.contextmanager
def one_thread():
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:                                              # optional: BLAS keeps its default
        yield
        return
    with threadpool_limits(limits=1, user_api="blas"):
        yield


def play_arm(trainer, n: int, execute: str | None = None, open_loop: bool = False, perturb: bool = False) -> dict:
    """The run's policy over n fresh test-split episodes (the run's seed's evaluation stream): episodes,
    successes, success, mean_steps, smoothness."""
    from ..data.gripper_chunks import evaluate_chunks

    with one_thread():
        r = evaluate_chunks(trainer.task, trainer.model.eval(), n, trainer.cfg.seed, perturb=perturb, execute=execute,
                            open_loop=open_loop, yellow=False)
    return {"episodes": n, "successes": int(round(r["success"] * n)), "success": r["success"],
            "mean_steps": r["mean_steps"], "smoothness": r["smoothness"]}


class EpisodeStudy(Study):
    """A study whose arms are scored by success over episodes; subclasses give settings, measure, sentence."""

    tasks = ("gripper",)
    keys: tuple[str, ...] = ("success", "mean_steps", "smoothness")     # summarised over seeds
    describe: tuple[str, ...] = ()                                    # the columns that describe an arm

    def episodes(self, trainer) -> int:
        """Episodes per arm for this seed's run: ``per_seed``, or fewer when the user made the runs' final
        evaluation smaller (``--set final_eval_n=N``, as the docs' examples do). Only the user's own setting
        counts: ``QUIET``'s one-episode final evaluation, which every arm's run trains with, does not."""
        n = per_seed(self.opts.seeds if self.opts else 3)
        asked = (self.opts.sets.get("train", {}) if self.opts else {}).get("final_eval_n")
        return min(n, int(asked)) if asked else n

    def pool(self, rows: list[dict]) -> list[dict]:
        from ..sim.episodes import wilson

        out = []
        for r in rows:
            mine = [x for x in rows if x["setting"] == r["setting"]]
            k, n = sum(int(x["successes"]) for x in mine), sum(int(x["episodes"]) for x in mine)
            lo, hi = wilson(k, n)
            out.append({**r, "arm_episodes": n, "arm_success": k / n, "arm_ci_low": lo, "arm_ci_high": hi,
                        "arm_mean_steps": float(np.mean([x["mean_steps"] for x in mine])),
                        "arm_smoothness": float(np.mean([x["smoothness"] for x in mine]))})
        return out

    def table(self, rows: list[dict]) -> list[dict]:
        table = summarise(rows, [*self.keys, "seconds"])
        for t in table:
            first = next(r for r in rows if r["setting"] == t["setting"])
            t.update({k: first[k] for k in (*self.describe, "arm_episodes", "arm_ci_low", "arm_ci_high")})
        return [{k: t[k] for k in ("setting", *self.describe, "n", "arm_episodes")} | t for t in table]

    def report(self, table: list[dict], rows: list[dict]) -> str:
        return (format_table(table, percent=("success", "arm_ci_low", "arm_ci_high"),
                             decimals={"seconds": 1, "mean_steps": 1, "smoothness": 3})
                + "\n\nsuccess: mean ± sd over the seeds (each seed's run plays as many episodes); arm_ci_low, "
                  "arm_ci_high: the Wilson 95% interval of the arm's pooled episodes (arm_episodes); mean_steps: "
                  "the episodes' mean length; smoothness: the mean change of the move between consecutive steps "
                  "(action units).")

    def draw(self, rows: list[dict], table: list[dict], out: Path) -> list[Path]:
        fig, (ax,) = new_figure(1, self.title(rows), width=max(8.0, 1.4 * len(table)), height=4.2)
        success_panel(ax, rows, [t["setting"] for t in table])
        return [save(fig, out)]

    def title(self, rows: list[dict]) -> str:
        return (f"npformer study {self.name}: success over {rows[0]['arm_episodes']} fresh episodes per arm, "
                f"{rows[0]['steps']} steps per run\n(dots: seeds; bars: Wilson 95% interval, pooled episodes)")


def success_panel(ax, rows: list[dict], labels: list[str] | None = None, x=None,
                  colour: str = "C0") -> None:
    """Each arm's pooled success with its Wilson interval, and each seed's success as a dot."""
    labels = labels or list(dict.fromkeys(r["setting"] for r in rows))
    xs = list(range(len(labels))) if x is None else list(x)
    for xi, label in zip(xs, labels, strict=True):
        r0 = next(r for r in rows if r["setting"] == label)
        p, lo, hi = r0["arm_success"], r0["arm_ci_low"], r0["arm_ci_high"]
        ax.errorbar(xi, p, yerr=[[p - lo], [hi - p]], color=colour, capsize=4, marker="_", ms=16, mew=2)
        seeds = np.array([r["success"] for r in rows if r["setting"] == label])          # (seeds,)
        ax.plot(np.full(seeds.size, xi), seeds, "o", color=colour, ms=3.5, alpha=0.6)
    if x is None:
        ax.set_xticks(xs, labels, fontsize=8)
        ax.set_xlim(-0.7, len(labels) - 0.3)
        for lab in ax.get_xticklabels():
            lab.set_rotation(20 if max(len(s) for s in labels) > 8 else 0)
    ax.set_ylim(-0.03, 1.03)
    ax.set_ylabel("success")
    ax.grid(axis="y", alpha=0.3)


def arm(table: list[dict], label: str) -> tuple[float, float, float, float]:
    """(success, sd over seeds, Wilson low, Wilson high) of the arm ``label``."""
    t = next(t for t in table if t["setting"] == label)
    return t["success"], t["success_sd"], t["arm_ci_low"], t["arm_ci_high"]


def quote(table: list[dict], label: str) -> str:
    """ "12.3% [8.1%, 17.0%]": the arm's success and its Wilson 95% interval."""
    p, _, lo, hi = arm(table, label)
    return f"{pct(p)} [{pct(lo)}, {pct(hi)}]"


def versus(table: list[dict], a: str, b: str) -> str:
    """ "b (x [lo, hi]) was ahead of a (y [lo, hi])", the verdict from ``common.verdict``."""
    return f"{b} ({quote(table, b)}) was {PHRASE[verdict(arm(table, a), arm(table, b))]} {a} ({quote(table, a)})"
