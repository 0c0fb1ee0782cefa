"""``npformer study drift``: "Imitation drifts once the policy leaves the expert's states; DAgger or
noise-injected demonstrations fix that."

Three ways to spend the same number of labelled (state, action) pairs, each the expert's clean action:

- plain behaviour cloning on clean expert demonstrations (no noise injected: the recording stays on
  the expert's own path);
- DART, the task's default: the recorded episodes run with noise injected into the executed actions;
- DAgger, 3 rounds (``data.gripper_dagger``): round 1 clones clean demonstrations of a third of the
  episodes; at the end of rounds 1 and 2 the policy drives and the expert labels the states it visits,
  as many as round 1 had, and training goes on over the aggregate. Each round is a third of the steps.

The labels are equal: each arm records exactly ``LABELS_PER_EPISODE`` x the task's ``demos`` (state, action)
pairs (the setting ``labels``), out of at most ``demos`` episodes. An expert episode takes at least 8 steps
(the gripper starts 0.25 or more from the named block, which sits 0.22 or more from each container, at
0.08 a step, then "done"), so every arm gets there; a noisy episode is longer than a clean one, so DART
uses fewer episodes for the same labels. DAgger's are 3 x (labels // 3). The CSV's ``labels`` column
gives each run's count.
Each run is scored without and with the world's perturbations, which push it off the expert's path.
"""
from __future__ import annotations

from .common import Setting
from .episodes import QUIET, EpisodeStudy, play_arm, versus

CLEAN = {"noise": 0.0, "flip": 0.0}
ROUNDS = 3
LABELS_PER_EPISODE = 8                  # labels per arm = this x demos (no expert episode is shorter)


class DriftStudy(EpisodeStudy):
    name = "drift"
    claim = "Imitation drifts off the expert's states; DAgger or noise-injected demonstrations fix that."
    steps = {"gripper": 1800}
    describe = ("method", "perturb")

    def settings(self, task) -> list[Setting]:
        steps = self.opts.steps if self.opts else self.steps["gripper"]
        demos = getattr(task.settings, "demos", 1)     # another task is refused after this (check_options)
        same = {"labels": LABELS_PER_EPISODE * demos}
        return [Setting("clean BC", columns={"method": "clean BC"}, data={**CLEAN, **same}, train=QUIET),
                Setting("DART", columns={"method": "DART"}, data=dict(same), train=QUIET),
                Setting(f"DAgger {ROUNDS} rounds", columns={"method": "DAgger"},
                        data={**CLEAN, **same, "dagger": ROUNDS, "round_steps": max(1, steps // ROUNDS)},
                        train=QUIET)]

    def measure(self, trainer, setting: Setting, before: dict) -> list[dict]:
        n, labels = self.episodes(trainer), len(trainer.task.demos())
        return [{"setting": setting.label + (", perturbed" if perturb else ""), "perturb": perturb,
                 "labels": labels, **play_arm(trainer, n, perturb=perturb)} for perturb in (False, True)]

    def sentence(self, table: list[dict]) -> str:
        dagger = f"DAgger {ROUNDS} rounds"
        return (f"At an equal number of labels, {versus(table, 'clean BC', 'DART')} and "
                f"{versus(table, 'clean BC', dagger)} on clean episodes; with perturbations, "
                f"{versus(table, 'clean BC, perturbed', 'DART, perturbed')} and "
                f"{versus(table, 'clean BC, perturbed', dagger + ', perturbed')}.")
