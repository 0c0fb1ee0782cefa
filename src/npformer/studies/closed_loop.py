"""``npformer study closed-loop``: "Acting in a closed loop recovers from what an open-loop plan cannot."

One chunk policy per seed, trained to predict the whole episode's actions from one frame (chunk = the
step limit, 50 steps, 150 tokens). Each run then plays the same fresh episodes four ways: open loop
(the chunk predicted from the first frame, executed blind) and closed loop (a new chunk at every step,
its first action executed), each without and with the world's perturbations (the target moves once
before the grasp; a held block slips). Both arms use the same weights, so the comparison is about
seeing, not about training.
"""
from __future__ import annotations

from ..sim.world import MAX_STEPS
from .common import Setting
from .episodes import QUIET, EpisodeStudy, play_arm, versus

CHUNK = MAX_STEPS                       # the whole episode's actions in one prediction
ARMS = [("open loop", "open", False), ("closed loop", "closed", False),
        ("open loop, perturbed", "open", True), ("closed loop, perturbed", "closed", True)]


class ClosedLoopStudy(EpisodeStudy):
    name = "closed-loop"
    claim = "Acting in a closed loop recovers from what an open-loop plan cannot."
    steps = {"gripper": 500}
    describe = ("loop", "perturb")

    def settings(self, task) -> list[Setting]:
        return [Setting(f"chunk {CHUNK}", columns={"chunk": CHUNK}, data={"chunk": CHUNK, "execute": "first"},
                        train=QUIET)]

    def measure(self, trainer, setting: Setting, before: dict) -> list[dict]:
        n = self.episodes(trainer)
        return [{"setting": label, "loop": loop, "perturb": perturb,
                 **play_arm(trainer, n, execute="first", open_loop=loop == "open", perturb=perturb)}
                for label, loop, perturb in ARMS]

    def sentence(self, table: list[dict]) -> str:
        return (f"With the same weights, {versus(table, 'open loop', 'closed loop')} without perturbations, and "
                f"{versus(table, 'open loop, perturbed', 'closed loop, perturbed')} with them.")
