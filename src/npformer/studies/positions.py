"""``npformer study positions``: "Attention knows the word order."

The dates task trained three ways: with the paper's sinusoidal positions, with a learned position
table, and with no positions at all (``variants.VariantDates(positions=False)``). Without positions
the encoder's self-attention is permutation-equivariant and the cross-attention sums over the
source, so the model's output depends only on which characters the input holds, not on their order:
it cannot tell "12.03.2026" from "03.12.2026".

Each trained model then translates held-out inputs twice, as written and with their characters
shuffled, and the study counts how often the output stays the same. Every column of a run's row
describes these same inputs: exact match is the share of them translated right as written, and the
loss is the teacher-forced loss on the same pairs, not the run's own final evaluation (another,
larger sample).

How much of the no-position model's failure order-blindness explains follows from the data: an
input whose characters also spell another date's input (``probes.is_anagram_of_another``) must get
one answer for both, and a reader that sees only which characters an input holds can expect at most
``probes.order_blind``'s ceiling. The failure it must have (1 - ceiling) against the model's
(1 - exact match) is the share explained; the rest is the model's own.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .common import SHARE_FLOOR, Setting, Study, compare, format_table, get, pct, probe_size, summarise
from .figures import new_figure, save, seeds_and_means
from .probes import heldout_pairs, is_anagram_of_another, order_blind, shuffle_chars, translate

PROBE_N = 1000                  # held-out inputs translated as written and shuffled, per run
SINUSOIDAL, LEARNED, NONE = "sinusoidal", "learned", "no positions"
SHARES = ["exact_match", "shuffled_same", "shuffled_exact_match", "anagram_share", "anagram_exact_match",
          "other_exact_match", "anagram_errors", "order_blind_ceiling"]


class PositionsStudy(Study):
    name = "positions"
    claim = "Attention knows the word order."
    steps = {"dates": 1000}

    def settings(self, task) -> list[Setting]:
        return [Setting(SINUSOIDAL, model={"positional": "sinusoidal"}, columns={"positions": "sinusoidal"}),
                Setting(LEARNED, model={"positional": "learned"}, columns={"positions": "learned"}),
                Setting(NONE, model={"positional": "sinusoidal"}, columns={"positions": "none"},
                        variant={"positions": False})]

    def measure(self, trainer, setting: Setting, before: dict) -> list[dict]:
        task, model = trainer.task, trainer.model.eval()
        pairs = heldout_pairs(task, probe_size(trainer, PROBE_N), trainer.cfg.seed)
        sources = [s for s, _ in pairs]
        shuffled = shuffle_chars(sources, np.random.default_rng(trainer.cfg.seed))
        outs, outs_shuffled = translate(model, task, sources), translate(model, task, shuffled)
        truth = np.array([t for _, t in pairs], dtype=object)
        right = np.array(outs) == truth                                          # (N,)
        anagram = is_anagram_of_another(task, sources)                            # (N,)
        # the loss on the same pairs (``heldout_pairs`` draws what ``evaluate`` draws), not the trainer's
        # own final evaluation, so that every column of a row describes one sample
        loss = task.evaluate(model, n=len(pairs), seed=trainer.cfg.seed)["loss"]
        i = next((j for j, s in enumerate(sources) if len(s) <= 12), 0)          # a short one to show
        return [{"exact_match": _mean(right), "loss": loss,
                 "shuffled_same": float(np.mean(np.array(outs) == np.array(outs_shuffled))),
                 "shuffled_exact_match": float(np.mean(np.array(outs_shuffled) == truth)),
                 "anagram_share": float(anagram.mean()),
                 "anagram_exact_match": _mean(right[anagram]), "other_exact_match": _mean(right[~anagram]),
                 "anagram_errors": _mean(anagram[~right]), "order_blind_ceiling": order_blind(task).ceiling,
                 "example": f"{sources[i]!r} -> {outs[i]!r}; shuffled {shuffled[i]!r} -> {outs_shuffled[i]!r}; "
                            f"truth {str(truth[i])!r}"}]

    def table(self, rows: list[dict]) -> list[dict]:
        return summarise(rows, SHARES + ["loss"])

    def report(self, table: list[dict], rows: list[dict]) -> str:
        lines = [format_table(table, percent=tuple(SHARES)), "",
                 "shuffled_same: outputs unchanged when the input's characters are shuffled; anagram_share: the "
                 "inputs whose characters also spell another date's input, anagram_exact_match on them, "
                 "other_exact_match on the rest; anagram_errors: the share of the errors that fell on them (- for "
                 "no errors). "
                 "order_blind_ceiling: the"
                 " exact match of a reader that sees only which characters an input holds and answers each"
                 " multiset with its likeliest date.", "",
                 "seed 0's outputs, as written and shuffled:"]
        lines += [f"  {r['setting']:<13} {r['example']}" for r in rows if r["seed"] == 0]
        return "\n".join(lines)

    def sentence(self, table: list[dict]) -> str:
        return positions_sentence(table)

    def draw(self, rows: list[dict], table: list[dict], out: Path) -> list[Path]:
        labels = [t["setting"] for t in table]
        fig, (a, b) = new_figure(2, f"npformer study positions: {rows[0]['steps']} steps each "
                                 "(dots: seeds; ticks: mean ± sd)", width=5.2)
        for off, key, colour, name in ((-0.3, "exact_match", "C0", "all held-out inputs"),
                                       (0.0, "anagram_exact_match", "C3", "anagrams of another date's input"),
                                       (0.3, "other_exact_match", "C2", "the other inputs")):
            seeds_and_means(a, labels, [r for r in rows if not np.isnan(r[key])], key, offset=off, colour=colour,
                            name=name)
        ceiling = float(np.mean([r["order_blind_ceiling"] for r in rows]))
        a.axhline(ceiling, color="k", ls=":", lw=1)
        a.text(len(labels) - 0.45, ceiling, "order-blind ceiling (all inputs)", fontsize=7, ha="right",
               va="bottom")
        a.set(ylabel="held-out exact match", title="exact match", ylim=(0, 1.05))
        a.legend(fontsize=7, loc="lower left")
        seeds_and_means(b, labels, rows, "shuffled_same", colour="C1")
        b.set(ylabel="share of outputs unchanged", title="input characters shuffled: same output?", ylim=(0, 1.05))
        return [save(fig, out)]


def _mean(a: np.ndarray) -> float:
    return float(a.mean()) if a.size else float("nan")


def positions_sentence(table: list[dict]) -> str:
    """What the positions study shows, worded from its table: how the no-position model scores
    against the ones with positions, whether shuffling its input changes its output, and how much of
    its failure any order-blind reader would share."""
    with_pos = [k for k in (SINUSOIDAL, LEARNED) if any(t["setting"] == k for t in table)]
    none = get(table, "exact_match", NONE)
    best = max(get(table, "exact_match", k) for k in with_pos)
    rel = {"lower": "below", "higher": "above", "level": "level with"}[compare(best, none)]
    scores = " and ".join(f"{k} ({pct(*get(table, 'exact_match', k))})" for k in with_pos)
    first = f"Without positions the model reached {pct(*none)} held-out exact match, {rel} {scores} positions."
    same = {k: get(table, "shuffled_same", k)[0] for k in [NONE, *with_pos]}
    positional = max(same[k] for k in with_pos)
    if same[NONE] >= 0.99 and positional >= 0.94:
        blind = "but so did the models with positions: on this budget no model's output depends on the order yet"
    elif same[NONE] >= 0.99:
        blind = "so it cannot tell one order of the characters from another, while the models with positions can"
    elif same[NONE] < positional + 0.05:
        blind = "so order still reached it"
    else:
        blind = "so it was mostly blind to their order"
    others = ", ".join(f"{k} {pct(same[k])}" for k in with_pos)
    second = (f" Shuffling its input's characters left its output unchanged {pct(same[NONE])} of the time "
              f"({others}), {blind}.")
    return first + second + _failure_clause(table)


def _failure_clause(table: list[dict]) -> str:
    """How much of the no-position model's failure order-blindness explains: the failure any
    order-blind reader must have (1 - ceiling) against the model's own (1 - exact match)."""
    em = get(table, "exact_match", NONE)[0]
    errors, share = get(table, "anagram_errors", NONE)[0], get(table, "anagram_share", NONE)[0]
    ceiling = get(table, "order_blind_ceiling", NONE)[0]
    if em >= 1.0:
        return " It made no errors to explain."
    where = (f" {pct(errors)} of its errors fell on inputs whose characters also spell another date's input "
             f"({pct(share)} of inputs). A reader that sees only which characters an input holds can expect at "
             f"most {pct(ceiling)} exact match here")
    if em >= ceiling - SHARE_FLOOR:
        return where + ", and the model reached that: order-blindness explains all of its failure."
    explained = (1.0 - ceiling) / (1.0 - em)
    size = "nearly all" if explained >= 0.9 else "most" if explained >= 0.5 else "part"
    return (where + f", so order-blindness explains {size} of its failure ({pct(1.0 - ceiling)} of its "
            f"{pct(1.0 - em)}); the other {100 * (ceiling - em):.1f} points are the model's own.")
