"""`npformer study NAME`: each study end to end on a tiny budget (two settings, one seed, a few steps,
a few years of dates; the heads study also on the tabletop policy), its CSV's columns and values, its
figure, its sentence checked against the numbers read back from the CSV, and fed hand-made numbers
both ways; the positions study's columns all from one sample; the model variants, the probes, the
command's one-line errors and the lesson's pointer."""
import contextlib
import csv
import io
import re

import numpy as np
import pytest

from npformer.cli import main
from npformer.data.tasks import get_task
from npformer.studies import STUDIES, get_study
from npformer.studies import positions as positions_module
from npformer.studies.common import Options, Setting, compare, finish, mean_sd, run_study
from npformer.studies.heads import HeadsStudy
from npformer.studies.positions import PositionsStudy
from npformer.studies.probes import (
    bag,
    head_entropies,
    heldout_pairs,
    is_anagram_of_another,
    month_span,
    order_blind,
    shuffle_chars,
)
from npformer.studies.understanding import UnderstandingStudy
from npformer.studies.variants import VariantDates, is_ffn
from npformer.train.trainer import TrainConfig, Trainer

# a few years of dates, tiny evaluations: the whole file stays fast
TINY = {"data": {"first_year": 2000, "last_year": 2003}, "train": {"final_eval_n": 40, "batch_size": 16},
        "model": {"d_ff": 32}}
TINY_SET = ["--set", "data.first_year=2000", "--set", "data.last_year=2003", "--set", "final_eval_n=40",
            "--set", "batch_size=16", "--set", "d_ff=32"]
BASE = ["setting", "seed", "steps"]
COLUMNS = {                     # then, in understanding, one entropy_* column per head; last, "seconds"
    "heads": BASE[:1] + ["n_heads", "head_size"] + BASE[1:] + ["parameters", "exact_match", "token_accuracy",
                                                               "loss"],
    "positions": BASE[:1] + ["positions"] + BASE[1:] + [
        "exact_match", "loss", "shuffled_same", "shuffled_exact_match", "anagram_share", "anagram_exact_match",
        "other_exact_match", "anagram_errors", "order_blind_ceiling", "example"],
    "understanding": BASE[:1] + ["n_encoder_layers", "feed_forward"] + BASE[1:] + [
        "stage", "exact_match", "loss", "month_share", "uniform_share", "parameters", "encoder_entropy",
        "decoder_entropy", "cross_entropy"],
    "heads-tabletop": BASE[:1] + ["n_heads", "head_size"] + BASE[1:] + [
        "parameters", "success", "pick_accuracy", "place_accuracy", "loss", "yellow_bowl_success"],
}
# what each CSV column holds: shares of held-out examples lie in [0, 1]; some are shares of nothing
# (NaN) when their subset is empty; attention entropies, as shares of uniform's, lie in (0, 1]
SHARES = {"exact_match", "token_accuracy", "shuffled_same", "shuffled_exact_match", "anagram_share",
          "order_blind_ceiling", "uniform_share", "success", "pick_accuracy", "place_accuracy",
          "yellow_bowl_success"}
SHARES_OF_SUBSETS = {"anagram_exact_match", "other_exact_match", "anagram_errors", "month_share"}
ENTROPIES = {"encoder_entropy", "decoder_entropy", "cross_entropy"}
LABELS = {"setting", "positions", "feed_forward", "stage", "example", "n_heads", "head_size", "n_encoder_layers",
          "seed", "steps", "parameters", "seconds"}


def _two_settings(cls, keep):
    """The study ``cls`` restricted to the settings whose labels are in ``keep``."""
    class Two(cls):
        def settings(self, task):
            return [s for s in super().settings(task) if s.label in keep]
    return Two()


def _read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# a decimal in a sentence: a percentage, a spread ("± 1.2%"), points of a percentage, or a plain ratio
NUMBER = re.compile(r"(± )?(\d+\.\d+)(%| points)?")


def _near(x: float, unit: str, value: float) -> bool:
    """``x`` as printed (one decimal of a percentage, two of a plain ratio) is ``value`` rounded."""
    return abs(x - 100 * value) <= 0.05 + 1e-9 if unit else abs(x - value) <= 0.005 + 1e-9


def _check_values(rows: list[dict], untrained: bool) -> None:
    """Every measured cell read back from the CSV is in its range; ``untrained``: the models have not
    learned the task yet, so none translates a whole date."""
    for r in rows:
        for k, v in r.items():
            if k in LABELS:
                continue
            x = float(v)
            if k in SHARES:
                assert 0 <= x <= 1, (k, x)
            elif k in SHARES_OF_SUBSETS:
                assert np.isnan(x) or 0 <= x <= 1, (k, x)
            elif k in ENTROPIES or k.startswith("entropy_"):
                assert 0 < x <= 1 + 1e-6, (k, x)                 # 1: uniform, up to float32 rounding
            elif k == "loss":
                assert 0 < x < np.inf, (k, x)
            else:
                raise AssertionError(f"no range known for the CSV column {k!r}")
        assert float(r["seconds"]) > 0 and ("parameters" not in r or int(r["parameters"]) > 0)
        if untrained and "exact_match" in r:
            assert float(r["exact_match"]) == 0.0, r


def _check_sentence(sentence: str, rows: list[dict], quoted: list[tuple[float, str]]) -> None:
    """The sentence against the numbers read back from the CSV (one seed: a setting's mean is its row,
    its spread 0): every percentage in it is a share of the CSV or the failure 1 - share, every "points"
    a difference of the positions study's ceiling and exact match, every plain ratio a cell; and each
    (value, unit) of ``quoted`` is printed in it ("%" a percentage, "" a ratio)."""
    cells = [float(v) for r in rows for k, v in r.items() if k not in LABELS]
    cells = [x for x in cells if not np.isnan(x)]
    gaps = [float(r["order_blind_ceiling"]) - float(r["exact_match"]) for r in rows if "order_blind_ceiling" in r]
    printed = []
    for spread, number, unit in NUMBER.findall(sentence):
        x = float(number)
        if spread:
            assert x == 0.0, f"one seed, yet a spread of {number}%: {sentence}"
        elif unit == " points":
            assert any(_near(x, unit, g) for g in gaps), f"{number} points is no gap of the CSV: {sentence}"
        else:
            assert any(_near(x, unit, c) or (unit and _near(x, unit, 1 - c)) for c in cells), \
                f"{number}{unit} is no number of the CSV: {sentence}"
            printed.append((x, unit))
    for value, unit in quoted:
        assert any(u == unit and _near(x, unit, value) for x, u in printed), \
            f"the CSV's {value} is not in the sentence: {sentence}"


def _quoted(name: str, rows: list[dict]) -> list[tuple[float, str]]:
    """The CSV's numbers that the study's sentence must print, whatever its words."""
    def cell(key, **match):
        return float(next(r for r in rows if all(r[k] == v for k, v in match.items()))[key])

    if name.startswith("heads"):                        # the best mean, which every wording names
        metric = "exact_match" if "exact_match" in rows[0] else "success"
        return [(max(float(r[metric]) for r in rows), "%")]
    if name == "positions":
        out = [(cell("exact_match", setting="no positions"), "%"), (cell("shuffled_same", setting="no positions"), "%"),
               (cell("shuffled_same", setting="learned"), "%")]
        return out + [(cell("order_blind_ceiling", setting="no positions"), "%")]
    untrained, trained = {"setting": "2 layers", "stage": "untrained"}, {"setting": "2 layers", "stage": "trained"}
    return [(cell("exact_match", **untrained), "%"), (cell("month_share", **untrained), "%"),
            (cell("uniform_share", **trained), "%"), (cell("exact_match", **trained), "%"),
            (cell("month_share", **trained), "%"), (cell("cross_entropy", **untrained), ""),
            (cell("cross_entropy", **trained), "")]


def _check_run(result, out, name: str, columns: list[str], keep, steps: int, untrained: bool = True) -> None:
    """A finished tiny study: its files, its CSV's columns and values, and its sentence against the CSV."""
    names = sorted(p.name for p in result.files)
    stem = name.split("-")[0]
    assert f"{stem}.csv" in names and f"{stem}.png" in names and f"{stem}.txt" in names
    rows = _read_csv(out / f"{stem}.csv")
    header = list(rows[0])
    assert header[:len(columns)] == columns and header[-1] == "seconds"
    assert all(k.startswith("entropy_") for k in header[len(columns):-1])
    assert (len(header) > len(columns) + 1) == (name == "understanding")
    assert {r["setting"] for r in rows} == set(keep)
    assert all(r["steps"] == str(steps) and r["seed"] == "0" for r in rows)
    assert (out / f"{stem}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    _check_values(rows, untrained)
    _check_sentence(result.sentence, rows, _quoted(name, rows))
    assert result.sentence in (out / f"{stem}.txt").read_text()


@pytest.mark.parametrize("cls, keep", [(HeadsStudy, ("1 head", "16 heads")),
                                       (PositionsStudy, ("learned", "no positions")),
                                       (UnderstandingStudy, ("2 layers", "2 layers, no FFN"))])
def test_each_study_end_to_end_on_a_tiny_budget(tmp_path, cls, keep):
    study = _two_settings(cls, keep)
    result = run_study(study, Options(seeds=1, steps=3, out=tmp_path, sets=TINY, progress=False))
    _check_run(result, tmp_path, study.name, COLUMNS[study.name], keep, steps=3)


def test_the_heads_study_on_the_tabletop_policy_on_a_tiny_budget(tmp_path):
    """``npformer study heads --task tabletop``: its success columns, the never-trained pairing among
    them, and its sentence worded on held-out success. An untrained policy may guess a pick and a place
    right, so success is only checked to be a share."""
    keep = ("1 head", "16 heads")
    sets = {"train": {"final_eval_n": 40, "batch_size": 16}, "model": {"d_ff": 32, "n_layers": 1}}
    result = run_study(_two_settings(HeadsStudy, keep),
                       Options(seeds=1, steps=2, out=tmp_path, task="tabletop", sets=sets, progress=False))
    _check_run(result, tmp_path, "heads-tabletop", COLUMNS["heads-tabletop"], keep, steps=2, untrained=False)
    assert "held-out success" in result.sentence
    assert [r["head_size"] for r in _read_csv(tmp_path / "heads.csv")] == ["64", "4"]   # d_model 64 in 1 and 16
    assert "yellow_bowl_success" in result.report


def test_every_positions_column_comes_from_the_same_translations(tmp_path, monkeypatch):
    """The run's own final evaluation (40 pairs) is larger than the study's probe (20): exact match and
    loss must still be the probe's, as the shuffled and anagram columns are. A stand-in translator gets
    every fourth probe input right, so the probe's exact match is known and not 0, while the briefly
    trained model's own evaluation scores 0."""
    from npformer.studies.common import start_run

    monkeypatch.setattr(positions_module, "PROBE_N", 20)
    setting = Setting("learned", model={"positional": "learned"}, columns={"positions": "learned"})
    trainer = start_run(Options(seeds=1, steps=2, out=tmp_path, sets=TINY, progress=False), setting, 0, tmp_path / "r")
    with contextlib.redirect_stdout(io.StringIO()):
        trainer.run(progress=False, plot=False)
    pairs = heldout_pairs(trainer.task, 20, trainer.cfg.seed)
    truth, right = dict(pairs), {s for s, _ in pairs[::4]}
    monkeypatch.setattr(positions_module, "translate",
                        lambda model, task, sources: [truth[s] if s in right else "0000-00-00" for s in sources])
    row = PositionsStudy().measure(trainer, setting, {})[0]
    assert trainer.metrics["held_out"]["n"] == 40 and trainer.metrics["held_out"]["exact_match"] == 0.0
    assert row["exact_match"] == pytest.approx(np.mean([s in right for s, _ in pairs])) and row["exact_match"] > 0
    share = row["anagram_share"]
    whole = [(share, row["anagram_exact_match"]), (1 - share, row["other_exact_match"])]
    assert row["exact_match"] == pytest.approx(sum(w * em for w, em in whole if w > 0))
    probe_loss = trainer.task.evaluate(trainer.model.eval(), n=20, seed=trainer.cfg.seed)["loss"]
    assert row["loss"] == pytest.approx(probe_loss, rel=1e-12)
    assert abs(probe_loss - trainer.metrics["held_out"]["loss"]) > 1e-6      # the two samples do differ


def test_the_command_runs_a_whole_study_and_prints_table_and_sentence(tmp_path, capsys):
    code = main(["study", "heads", "--seeds", "1", "--steps", "2", "--out", str(tmp_path), "--no-progress",
                 *TINY_SET])
    assert code == 0
    out = capsys.readouterr().out
    assert re.search(r"^16 heads\s+16\s+4\s+1\s", out, flags=re.M)                 # d_model 64 in 16 slices of 4
    assert "wrote " in out and "heads.csv" in out
    assert re.search(r"^took \d+ min \d+ s; load average (\d+\.\d|unknown) at the start, (\d+\.\d|unknown) at the end$",
                     out, flags=re.M)
    rows = _read_csv(tmp_path / "heads.csv")
    assert [int(r["n_heads"]) for r in rows] == [1, 2, 4, 8, 16]
    assert len({r["parameters"] for r in rows}) == 1                              # splitting adds no parameters
    sentence = (tmp_path / "heads.txt").read_text().strip().splitlines()[-1]
    assert sentence in out


# -- the sentences follow from the numbers -----------------------------------------------------------

def _heads_rows(means, sd=0.0):
    rows = []
    for h, m in zip((1, 2, 4, 8, 16), means, strict=True):
        for seed, d in enumerate((-sd, sd)):
            rows.append({"setting": f"{h} heads", "n_heads": h, "head_size": 64 // h, "seed": seed, "steps": 9,
                         "parameters": 100, "exact_match": m + d, "loss": 1 - m, "seconds": 1.0})
    return rows


def test_heads_sentence_both_ways(tmp_path):
    study = HeadsStudy()
    rising = finish(study, _heads_rows([0.5, 0.6, 0.7, 0.8, 0.9], sd=0.01), tmp_path).sentence
    assert rising.startswith("On this budget more heads did score higher every time")
    assert "50.0%" in rising and "90.0%" in rising
    falling = finish(study, _heads_rows([0.5, 0.6, 0.9, 0.8, 0.4], sd=0.01), tmp_path).sentence
    assert falling.startswith("More heads did not always mean a better model")
    assert "from 4 to 16 heads" in falling and "fell from 90.0% ± 1.4% to 40.0% ± 1.4%" in falling
    assert "the best mean was 4 heads (90.0% ± 1.4%)" in falling
    assert "clearly higher in 5 of the 10 pairs of settings (1 to 2, 1 to 4, 1 to 8, ... heads)" in falling
    flat = finish(study, _heads_rows([0.9, 0.91, 0.9, 0.92, 0.9], sd=0.02), tmp_path).sentence
    assert flat.startswith("The number of heads made no clear difference")
    noisy = finish(study, _heads_rows([0.5, 0.6, 0.7, 0.8, 0.81], sd=0.01), tmp_path).sentence
    assert "from 8 to 16 heads" in noisy and "was no better, within the seeds' spreads" in noisy
    assert "clearly higher in 9 of the 10 pairs" in noisy


def _positions_rows(em, same, ana, other, errors, ceiling=0.3):
    rows = []
    for k, label in enumerate(("sinusoidal", "learned", "no positions")):
        for seed in (0, 1):
            rows.append({"setting": label, "positions": label, "seed": seed, "steps": 9, "exact_match": em[k],
                         "loss": 0.2, "shuffled_same": same[k], "shuffled_exact_match": 0.0,
                         "anagram_share": 0.9, "anagram_exact_match": ana[k], "other_exact_match": other[k],
                         "anagram_errors": errors[k], "order_blind_ceiling": ceiling, "example": "'1.1' -> 'x'",
                         "seconds": 1.0})
    return rows


def test_positions_sentence_both_ways(tmp_path):
    study = PositionsStudy()
    blind = finish(study, _positions_rows(em=(1.0, 0.99, 0.2), same=(0.1, 0.12, 1.0), ana=(1, 1, 0.12),
                                          other=(1, 1, 0.9), errors=(0, 0, 0.99)), tmp_path).sentence
    assert "reached 20.0% ± 0.0% held-out exact match, below sinusoidal (100.0% ± 0.0%)" in blind
    assert "unchanged 100.0% of the time" in blind and "cannot tell one order" in blind
    assert "99.0% of its errors fell on inputs whose characters also spell another date's input (90.0%" in blind
    assert "can expect at most 30.0% exact match" in blind
    assert "explains most of its failure (70.0% of its 80.0%); the other 10.0 points" in blind
    even = finish(study, _positions_rows(em=(0.5, 0.5, 0.5), same=(0.3, 0.3, 0.5), ana=(0.5, 0.5, 0.5),
                                         other=(0.5, 0.5, 0.5), errors=(0.9, 0.9, 0.9), ceiling=0.9),
                  tmp_path).sentence
    assert "level with sinusoidal" in even and "mostly blind" in even
    assert "explains part of its failure (10.0% of its 50.0%)" in even
    at_ceiling = finish(study, _positions_rows(em=(1, 1, 0.3), same=(0, 0, 1), ana=(1, 1, 0.2), other=(1, 1, 0.9),
                                               errors=(0, 0, 0.95), ceiling=0.3), tmp_path).sentence
    assert "the model reached that: order-blindness explains all of its failure" in at_ceiling
    untrained = finish(study, _positions_rows(em=(0, 0, 0), same=(1, 1, 1), ana=(0, 0, 0), other=(0, 0, 0),
                                              errors=(0.9, 0.9, 0.9)), tmp_path).sentence
    assert "no model's output depends on the order yet" in untrained


def _understanding_rows(untrained, trained, uniform=0.3):
    """untrained/trained: (exact match, month share) of the recipe; the other settings copy them."""
    rows = []
    for label, layers, ffn in (("2 layers", 2, True), ("1 layer", 1, True), ("4 layers", 4, True),
                               ("2 layers, no FFN", 2, False)):
        for stage, (em, ms) in (("untrained", untrained), ("trained", trained)):
            rows.append({"setting": label, "n_encoder_layers": layers, "feed_forward": ffn, "seed": 0, "steps": 9,
                         "stage": stage, "exact_match": em * (1 if ffn else 0.5), "loss": 1.0, "month_share": ms,
                         "uniform_share": uniform, "parameters": 10, "encoder_entropy": 0.9,
                         "decoder_entropy": 0.9, "cross_entropy": 0.95 if stage == "untrained" else 0.4,
                         "entropy_enc1h1": 0.9, "seconds": 1.0})
    return rows


def test_understanding_sentence_both_ways(tmp_path):
    study = UnderstandingStudy()
    learned = finish(study, _understanding_rows(untrained=(0.0, 0.31), trained=(0.99, 0.9)), tmp_path).sentence
    assert "Untrained, the model translated 0.0%" in learned and "about what uniform attention gives (30.0%)" in learned
    assert "only aligned the month once trained" in learned
    assert "the number of encoder layers made no clear difference" in learned
    assert "without feed-forward networks 49.5% ± 0.0%, below the full block" in learned
    not_learned = finish(study, _understanding_rows(untrained=(0.0, 0.31), trained=(0.0, 0.3)), tmp_path).sentence
    assert "Training did not clearly change what attention reads" in not_learned
    assert "level with the full block" in not_learned
    assert (tmp_path / "understanding.png").is_file()


def test_compare_calls_differences_inside_the_spreads_level():
    assert compare((0.5, 0.0), (0.6, 0.0)) == "higher" and compare((0.6, 0.0), (0.5, 0.0)) == "lower"
    assert compare((0.5, 0.05), (0.59, 0.05)) == "level"                 # 0.09 <= 0.05 + 0.05
    assert compare((0.5, 0.0), (0.504, 0.0)) == "level"                  # under the half-point floor
    assert mean_sd([1.0]) == (1.0, 0.0) and mean_sd([1.0, float("nan")]) == (1.0, 0.0)
    assert all(np.isnan(mean_sd([float("nan")])))
    assert mean_sd([1.0, 3.0]) == pytest.approx((2.0, 2 ** 0.5))


# -- the model variants --------------------------------------------------------------------------------

def _trainer(tmp_path, **variant):
    task = VariantDates(get_task("dates").settings_with(TINY["data"]), **variant)
    cfg = TrainConfig(**{**task.default_train_config(), "steps": 3, "batch_size": 8, "eval_every": 100,
                         "final_eval_n": 10})
    return Trainer.start(task, {"d_ff": 32}, cfg, tmp_path)


def test_without_positions_the_output_ignores_the_order_of_the_input(tmp_path):
    trainer = _trainer(tmp_path, positions=False)
    model, task = trainer.model.eval(), trainer.task
    trainer.close()
    src = task.encode_source("29.11.2001")[None]                             # (1, S)
    perm = np.random.default_rng(0).permutation(src.shape[1])
    tgt = task.vocab.encode("2001-11-29", bos=True)[None]                    # (1, T)
    a, _ = model.forward(src, tgt)
    b, _ = model.forward(src[:, perm], tgt)
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    with_pos = _trainer(tmp_path / "pos", positions=True)
    c, _ = with_pos.model.eval().forward(src, tgt)
    d, _ = with_pos.model.forward(src[:, perm], tgt)
    with_pos.close()
    assert np.abs(c - d).max() > 1e-3


def test_attention_only_blocks_keep_every_ffn_at_zero(tmp_path):
    trainer = _trainer(tmp_path, feed_forward=False)
    ffn = {k: p for k, p in trainer.model.state_dict().items() if is_ffn(k)}
    assert ffn and all(not p.any() for p in ffn.values())
    with contextlib.redirect_stdout(io.StringIO()):
        trainer.run(progress=False, plot=False)
    assert all(not p.any() for k, p in trainer.model.state_dict().items() if is_ffn(k))
    assert any(p.any() for k, p in trainer.model.state_dict().items() if "self_attn" in k)


# -- the probes -------------------------------------------------------------------------------------------

def test_probes_on_known_inputs():
    task = get_task("dates").create(TINY["data"])
    shuffled = shuffle_chars(["29.11.2001", "Nov 3, 2002"], np.random.default_rng(0))
    assert [bag(s) for s in shuffled] == [bag("29.11.2001"), bag("Nov 3, 2002")]
    # "12.03.2001" and "03.12.2001" are two dates in one multiset of characters
    flags = is_anagram_of_another(task, ["12.03.2001", "Wednesday, 27 September 2000"])
    assert flags.tolist() == [True, False]
    assert month_span("the 3rd of March, 2001", "2001-03-03") == (11, 16)
    assert month_span("NOV 3, 2002", "2002-11-03") == (0, 3) and month_span("03.11.2002", "2002-11-03") is None


def test_the_order_blind_ceiling_counts_what_a_reader_of_multisets_can_get_right():
    """Against a plain count: each held-out (date, format) is right with probability 1/ties when its date
    is one of the likeliest dates of its multiset, else 0."""
    import datetime as dt
    from collections import Counter

    from npformer.data.dates import FORMATS, format_date

    task = get_task("dates").create({"first_year": 2001, "last_year": 2001, "heldout_every": 3})
    days = range(dt.date(2001, 1, 1).toordinal(), dt.date(2001, 12, 31).toordinal() + 1)
    counts = Counter((bag(format_date(dt.date.fromordinal(o), f)), o) for o in days for f in range(len(FORMATS)))
    by_bag: dict = {}
    for (b, o), c in counts.items():
        by_bag.setdefault(b, {})[o] = c
    held = set(task.heldout_days.tolist())
    scores = []
    for o in held:
        for f in range(len(FORMATS)):
            dates = by_bag[bag(format_date(dt.date.fromordinal(o), f))]
            top = max(dates.values())
            ties = sum(c == top for c in dates.values())
            scores.append((dates[o] == top) / ties)
    assert order_blind(task).ceiling == pytest.approx(np.mean(scores), abs=1e-12)
    assert 0 < order_blind(task).ceiling < 1


def test_head_entropies_are_shares_of_uniform():
    src = np.array([[5, 6, 7, 0]])                                           # (B, S), pad_id 0 at the end
    tgt = np.array([[1, 5, 6]])                                              # (B, T)
    uniform = np.zeros((1, 2, 4, 4))
    uniform[..., :3] = 1 / 3                                                 # (B, H, S, S) over the 3 real keys
    one_hot = np.zeros((1, 2, 3, 4))
    one_hot[..., 0] = 1.0                                                    # (B, H, T, S)
    causal = np.tril(np.ones((3, 3))) / np.arange(1, 4)[:, None]             # (T, T) uniform over the past
    weights = {"encoder": [{"self": uniform}],
               "decoder": [{"self": np.broadcast_to(causal, (1, 2, 3, 3)), "cross": one_hot}]}
    got = {(h["kind"], h["head"]): h["entropy"] for h in head_entropies(weights, src, tgt, pad_id=0)}
    assert got[("encoder self", 1)] == pytest.approx(1.0) and got[("decoder self", 2)] == pytest.approx(1.0)
    assert got[("cross", 1)] == pytest.approx(0.0)


# -- the command's errors and the lesson's pointer -----------------------------------------------------------

@pytest.mark.parametrize("argv, message", [
    (["study", "nope"], "unknown study 'nope'"),
    (["study", "heads", "--seeds", "0"], "--seeds must be >= 1"),
    (["study", "heads", "--steps", "-1"], "--steps must be >= 1"),
    (["study", "heads", "--jobs", "0"], "--jobs must be >= 1"),
    (["study", "positions", "--task", "tabletop"], "the positions study runs on dates, not 'tabletop'"),
    (["study", "heads", "--set", "n_heads=2"], "the heads study sets n_heads itself"),
    (["study", "heads", "--set", "bogus=1"], "unknown setting 'bogus'"),
])
def test_errors_are_one_line_and_exit_2(tmp_path, capsys, argv, message):
    assert main([*argv, "--out", str(tmp_path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_the_lesson_ends_by_pointing_to_every_study(capsys):
    assert main(["lesson"]) == 0
    tail = capsys.readouterr().out.strip().splitlines()[-len(STUDIES):]
    for line, name in zip(tail, STUDIES, strict=True):
        assert line.split()[:3] == ["npformer", "study", name] and get_study(name).claim in line
