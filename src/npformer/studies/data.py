"""``npformer study data``: "How much data, how many bins?"

Success against the number of demonstration episodes (100, 300, 1,000, 3,000; at the task's default
action bins, 32) and against the number of action bins per move axis (8, 32, 256; 1,000 demonstrations,
so the 32-bin arm is the 1,000-demonstration one), every run on the same number of optimizer steps. Two
panels of one figure.
"""
from __future__ import annotations

from pathlib import Path

from ..data.gripper import GripperTask
from .common import Setting
from .episodes import QUIET, EpisodeStudy, play_arm, success_panel, versus
from .figures import new_figure, save

DEMOS = (100, 300, 1000, 3000)
BINS = (8, 32, 256)
DEFAULT_DEMOS = GripperTask.Settings.demos         # the task's own: the bins' sweep runs at it
DEFAULT_BINS = GripperTask.Settings.action_bins    # the task's own (32): the demonstrations' sweep runs at it


def label(demos: int, bins: int) -> str:
    return f"{demos:,} demos, {bins} bins"


class DataStudy(EpisodeStudy):
    name = "data"
    claim = "More demonstrations and finer action bins make a better policy."
    steps = {"gripper": 800}
    describe = ("demos", "action_bins")

    def settings(self, task) -> list[Setting]:
        arms = [(d, DEFAULT_BINS) for d in DEMOS] + [(DEFAULT_DEMOS, b) for b in BINS if b != DEFAULT_BINS]
        return [Setting(label(d, b), columns={"demos": d, "action_bins": b}, data={"demos": d, "action_bins": b},
                        train=QUIET) for d, b in arms]

    def measure(self, trainer, setting: Setting, before: dict) -> list[dict]:
        return [play_arm(trainer, self.episodes(trainer))]

    def sentence(self, table: list[dict]) -> str:
        demos = sorted({t["demos"] for t in table if t["action_bins"] == DEFAULT_BINS})
        bins = sorted({t["action_bins"] for t in table if t["demos"] == DEFAULT_DEMOS})
        few, many = label(demos[0], DEFAULT_BINS), label(demos[-1], DEFAULT_BINS)
        coarse, fine = label(DEFAULT_DEMOS, bins[0]), label(DEFAULT_DEMOS, bins[-1])
        out = f"On the same training steps, {versus(table, few, many)}"
        if len(bins) > 1:
            out += f"; {versus(table, fine, coarse)}"
        return out + "."

    def draw(self, rows: list[dict], table: list[dict], out: Path) -> list[Path]:
        fig, (a, b) = new_figure(2, self.title(rows), width=5.0, height=4.0)
        by_demos = sorted((t for t in table if t["action_bins"] == DEFAULT_BINS), key=lambda t: t["demos"])
        by_bins = sorted((t for t in table if t["demos"] == DEFAULT_DEMOS), key=lambda t: t["action_bins"])
        success_panel(a, rows, [t["setting"] for t in by_demos])
        a.set_xticks(range(len(by_demos)), [f"{t['demos']:,}" for t in by_demos])
        a.set(xlabel=f"demonstration episodes ({DEFAULT_BINS} bins)", title="success against data")
        success_panel(b, rows, [t["setting"] for t in by_bins], colour="C1")
        b.set_xticks(range(len(by_bins)), [str(t["action_bins"]) for t in by_bins])
        b.set(xlabel=f"action bins per move axis ({DEFAULT_DEMOS:,} demonstrations)", title="success against bins")
        return [save(fig, out)]
