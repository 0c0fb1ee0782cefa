"""The benchmarks' paired timing (benchmarks/_common.py): the order rotates from one round to the
next, the per-order ratios show an order effect, and the verdict follows the quartiles. A fake
clock stands in for the timer: no timings are asserted."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "_common.py"


@pytest.fixture(scope="module")
def common():
    spec = importlib.util.spec_from_file_location("bench_common_under_test", PATH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod          # dataclasses look their module up while the class is made
    spec.loader.exec_module(mod)
    yield mod
    sys.modules.pop(spec.name, None)


class FakeClock:
    """A clock that only the sides move: each call costs what ``cost(name, position in round)`` says."""

    def __init__(self, names, cost):
        self.now, self.calls, self.rests, self.names, self.cost = 0.0, [], [], names, cost

    def timer(self):
        return self.now

    def sleep(self, seconds):
        # the rest before a side moves the clock too, so a rest counted inside a side's time would show
        self.rests.append(seconds)
        self.now += seconds

    def side(self, name):
        def run():
            position = len(self.calls) % len(self.names)         # every round calls each side once
            self.calls.append(name)
            self.now += self.cost(name, position)
            return name
        return run


def test_two_sides_alternate_and_an_order_effect_shows(common):
    # A costs 2 when it runs first in a round and 1 otherwise; B always 1
    clock = FakeClock(("A", "B"), lambda name, pos: 2.0 if (name, pos) == ("A", 0) else 1.0)
    res = common.paired({"A": clock.side("A"), "B": clock.side("B")}, pairs=15, warmup=2,
                        timer=clock.timer, sleep=clock.sleep, settle=0.5)
    assert res.orders == [("A", "B") if r % 2 == 0 else ("B", "A") for r in range(15)]
    assert clock.calls[:4] == ["A", "B", "B", "A"]               # the warm-up alternates too
    assert len(clock.calls) == 2 * 17
    assert clock.rests == [0.5] * (2 * 17)                          # a rest before every side, never timed
    assert res.ratios == [2.0 if r % 2 == 0 else 1.0 for r in range(15)]
    s = res.summary()
    assert s["by_first"] == {"A": (2.0, 8), "B": (1.0, 7)}
    # 8 ratios of 2 and 7 of 1: median 2, but the lower quartile is 1, so not "slower"
    assert (s["q1"], s["median"], s["q3"]) == (1.0, 2.0, 2.0)
    assert s["verdict"] == "level"
    assert s["medians"] == {"A": 2.0, "B": 1.0}
    assert res.out == {"B": "B", "A": "A"}


def test_three_sides_rotate_and_compare_with_the_faster_other(common):
    # ours A = 1; B = 2; C = 0.5, but 3 when it runs first
    cost = {"A": lambda p: 1.0, "B": lambda p: 2.0, "C": lambda p: 3.0 if p == 0 else 0.5}
    clock = FakeClock(("A", "B", "C"), lambda name, pos: cost[name](pos))
    seen = []
    res = common.paired({k: clock.side(k) for k in "ABC"}, pairs=6, warmup=1,
                        timer=clock.timer, sleep=clock.sleep, settle=0.5,
                        each=lambda r, out: seen.append((r, sorted(out))))
    assert res.orders == [("B", "C", "A"), ("C", "A", "B"), ("A", "B", "C")] * 2    # round 0 was the warm-up
    assert seen == [(r, ["A", "B", "C"]) for r in range(6)]
    # C first: the faster other is B (2) -> 0.5; otherwise C (0.5) -> 2
    assert res.ratios == [2.0, 0.5, 2.0] * 2
    assert res.summary()["by_first"] == {"A": (2.0, 2), "B": (2.0, 2), "C": (0.5, 2)}


def test_quartiles_by_hand(common):
    assert common.quartiles([5, 1, 4, 2, 3]) == (2, 3, 4)
    assert common.quartiles([1.0, 2.0, 3.0, 4.0]) == (1.75, 2.5, 3.25)
    assert common.quartiles([7.0]) == (7.0, 7.0, 7.0)


@pytest.mark.parametrize("ratios, expected", [
    ([0.8, 0.85, 0.9, 0.95, 0.99], "faster"),          # upper quartile 0.95 < 1
    ([0.8, 0.85, 0.9, 1.01, 1.2], "level"),            # upper quartile 1.01: not faster, though the median is 0.9
    ([1.01, 1.02, 1.1, 1.2, 1.3], "slower"),           # lower quartile 1.02 > 1
    ([0.7, 1.0, 1.0, 1.0, 1.5], "level"),              # quartiles exactly 1: neither
    ([0.5, 0.99, 1.5, 2.0, 3.0], "level"),             # lower quartile 0.99: not slower, though the median is 1.5
])
def test_verdict_follows_the_quartiles(common, ratios, expected):
    assert common.verdict(ratios) == expected


def test_bad_arguments(common):
    with pytest.raises(ValueError, match="at least two sides"):
        common.paired({"A": lambda: 0}, pairs=3, settle=0)
    with pytest.raises(SystemExit, match="--pairs"):
        common.paired({"A": lambda: 0, "B": lambda: 0}, pairs=0, settle=0)
    with pytest.raises(ValueError, match="ours"):
        common.paired({"A": lambda: 0, "B": lambda: 0}, ours="C", settle=0)


def test_the_report_names_the_order_effect_and_the_verdict(common, capsys):
    clock = FakeClock(("A", "B"), lambda name, pos: 2.0 if (name, pos) == ("A", 0) else 1.0)
    res = common.paired({"A": clock.side("A"), "B": clock.side("B")}, pairs=15, warmup=0,
                        timer=clock.timer, sleep=clock.sleep, settle=0.5)
    s = common.print_paired(res, unit="s")
    out = capsys.readouterr().out
    assert "A first 2.000 (8 pairs); B first 1.000 (7 pairs)" in out
    assert "median 2.000 (IQR 1.000-2.000), 15 pairs" in out
    assert "verdict: A level (IQR 1.000-2.000 holds 1)" in out and "smoke test" not in out
    assert s["verdict"] == "level"
    short = common.paired({"A": clock.side("A"), "B": clock.side("B")}, pairs=3, warmup=0,
                        timer=clock.timer, sleep=clock.sleep, settle=0.5)
    common.print_paired(short)
    assert "only 3 pairs: a smoke test, not a claim" in capsys.readouterr().out


def test_alternate_rotates_the_order_too(common):
    """bench_long_attention's in-process times: each round runs the sides in the order rotated by one, the
    warm-up included, and every timed round gives each side one time."""
    calls = []
    sides = {name: (lambda name=name: calls.append(name) or name) for name in ("tiled", "exact")}
    times, out = common.alternate(sides, repeats=3, warmup=1)
    assert calls == ["tiled", "exact", "exact", "tiled", "tiled", "exact", "exact", "tiled"]
    assert {k: len(v) for k, v in times.items()} == {"tiled": 3, "exact": 3}
    assert out == {"tiled": "tiled", "exact": "exact"}
