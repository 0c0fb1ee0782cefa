"""``npformer study chunks``: "Predicting chunks of actions smooths control."

Chunk lengths k = 1, 4 and 8 (one policy per k and seed, 3k action tokens per prediction), each played
three ways (``data.gripper_chunks``): the whole chunk, executed blind before the next prediction; the
first action of a new chunk at every step; and ACT's temporal ensembling (prediction i, i = 0 for the
oldest, weighs exp(-m i); the gripper command by weighted vote). With k = 1 the three are one policy
played three times the same way, a check on the measurement. Reported: success, the steps an episode
took, and smoothness, the mean change of the move from one step to the next (lower is smoother).
"""
from __future__ import annotations

from pathlib import Path

from .common import Setting, compare, get
from .episodes import QUIET, EpisodeStudy, play_arm, success_panel, versus
from .figures import new_figure, save, seeds_and_means

CHUNKS = (1, 4, 8)
MODES = ("chunk", "first", "ensemble")


class ChunksStudy(EpisodeStudy):
    name = "chunks"
    claim = "Predicting chunks of actions smooths control."
    steps = {"gripper": 1500}
    describe = ("chunk", "execute")

    def settings(self, task) -> list[Setting]:
        return [Setting(f"k={k}", columns={}, data={"chunk": k}, train=QUIET) for k in CHUNKS]

    def measure(self, trainer, setting: Setting, before: dict) -> list[dict]:
        k, n = trainer.task.settings.chunk, self.episodes(trainer)
        return [{"setting": f"k={k}, {mode}", "chunk": k, "execute": mode, **play_arm(trainer, n, execute=mode)}
                for mode in MODES]

    def sentence(self, table: list[dict]) -> str:
        ks = sorted({t["chunk"] for t in table})
        lo, hi = f"k={ks[0]}, first", f"k={ks[-1]}, first"
        s1, s2 = get(table, "smoothness", lo), get(table, "smoothness", hi)
        word = {"lower": "smoother than", "higher": "less smooth than",
                "level": "as smooth as"}[compare(s1, s2, floor=0.005)]
        ens = f"k={ks[-1]}, ensemble"
        return (f"At chunk length {ks[-1]}, executing the first action of each step's chunk was {word} at "
                f"{ks[0]} (smoothness {s2[0]:.3f} against {s1[0]:.3f}), and its success: "
                f"{versus(table, lo, hi)}; temporal ensembling: {versus(table, hi, ens)}.")

    def draw(self, rows: list[dict], table: list[dict], out: Path) -> list[Path]:
        fig, (a, b, c) = new_figure(3, self.title(rows), width=5.5, height=4.0)
        labels = [t["setting"] for t in table]
        success_panel(a, rows, labels)
        a.set_title("success", fontsize=9)
        seeds_and_means(b, labels, rows, "mean_steps", colour="C2")
        b.set(ylabel="steps per episode", title="steps to finish")
        seeds_and_means(c, labels, rows, "smoothness", colour="C3")
        c.set(ylabel="mean |move_t - move_t-1| (action units)", title="smoothness (lower is smoother)")
        for ax in (a, b, c):
            for lab in ax.get_xticklabels():
                lab.set_rotation(45)
                lab.set_ha("right")
        return [save(fig, out)]
