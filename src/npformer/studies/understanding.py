"""``npformer study understanding``: "Attention understands the sentence."

The lesson's correction: attention computes weighted mixes of vectors, and whatever understanding
there is comes from training many such layers. The study measures the same dates model before and
after training:

    exact match             held-out dates translated exactly (teacher-forced argmax = greedy)
    entropy per head        how spread out each head's attention is, as a share of uniform's entropy
    month share             of the cross-attention that the rows writing the month digits give the
                            source, the share on the month's name (the last decoder layer, mean of
                            its heads), against what uniform attention would give

and, on the same step budget, with 1, 2 and 4 encoder layers, and with attention-only blocks (every
feed-forward network held at 0, ``variants.VariantDates(feed_forward=False)``). Besides NAME.png it
draws the recipe model's cross-attention on one date, untrained and trained, with ``viz``.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .common import Setting, Study, compare, format_table, get, pct, probe_size, summarise
from .figures import new_figure, save, seeds_and_means
from .probes import attention_maps, head_entropies, heldout_pairs, month_share
from .variants import trained_parameters

PROBE_N = 500                   # held-out pairs whose attention is measured, per run and stage
EXAMPLE = ("29 November 2026", "2026-11-29")
RECIPE = "2 layers"             # the dates recipe: 2 encoder layers, full blocks
NO_FFN = "2 layers, no FFN"
SHARES = ("exact_match", "month_share", "uniform_share")
KIND_SHORT = {"encoder self": "enc", "decoder self": "dec", "cross": "crs"}


def _arm(label: str, layers: int, feed_forward: bool = True) -> Setting:
    return Setting(label, model={"n_encoder_layers": layers},
                   columns={"n_encoder_layers": layers, "feed_forward": feed_forward},
                   variant={} if feed_forward else {"feed_forward": False})


# the recipe first (its untrained and trained models are the study's main comparison), then depth
# and the attention-only block, all on the same budget
SETTINGS = [_arm(RECIPE, 2), _arm("1 layer", 1), _arm("4 layers", 4), _arm(NO_FFN, 2, feed_forward=False)]


class UnderstandingStudy(Study):
    name = "understanding"
    claim = "Attention understands the sentence."
    steps = {"dates": 400}

    def settings(self, task) -> list[Setting]:
        return SETTINGS

    def before(self, trainer, setting: Setting) -> dict:
        return _probe(trainer, "untrained")

    def measure(self, trainer, setting: Setting, before: dict) -> list[dict]:
        return [before, _probe(trainer, "trained")]

    def table(self, rows: list[dict]) -> list[dict]:
        keys = list(SHARES) + ["loss", "encoder_entropy", "cross_entropy"]
        table = []
        for stage in ("untrained", "trained"):
            for t in summarise([r for r in rows if r["stage"] == stage], keys):
                table.append({"setting": t["setting"], "stage": stage} | t)
        return table

    def report(self, table: list[dict], rows: list[dict]) -> str:
        text = format_table(table, percent=SHARES)
        return (text + "\n\nentropy: of each head's attention rows, as a share of uniform attention's (1 = uniform), "
                "mean over heads; month_share: cross-attention from the month digits onto the month's name; "
                "uniform_share: what uniform attention would put there.")

    def sentence(self, table: list[dict]) -> str:
        return understanding_sentence(table)

    def draw(self, rows: list[dict], table: list[dict], out: Path) -> list[Path]:
        files = [_draw_summary(rows, out)]
        example = [r for r in rows if r["setting"] == RECIPE and r["seed"] == rows[0]["seed"]]
        if all("_example" in r for r in example):
            files.append(_draw_example(example, out.with_name(out.stem + "_attention.png")))
        return files


def _probe(trainer, stage: str) -> dict:
    """Every measurement of the model as it is now (``stage`` names when): one CSV row, plus the
    cross-attention on EXAMPLE under "_example" for the figure (not written to the CSV)."""
    task, model, n = trainer.task, trainer.model, probe_size(trainer, PROBE_N)
    model.eval()
    try:
        held = task.evaluate(model, n=n, seed=trainer.cfg.seed)
        pairs = heldout_pairs(task, n, trainer.cfg.seed)
        weights, src, tgt_in = attention_maps(model, task, pairs)
        heads = head_entropies(weights, src, tgt_in, task.vocab.pad_id)
        example, _, _ = attention_maps(model, task, [EXAMPLE])
    finally:
        model.train()
    share, uniform = month_share(weights, pairs)
    row = {"stage": stage, "exact_match": held["exact_match"], "loss": held["loss"], "month_share": share,
           "uniform_share": uniform, "parameters": trained_parameters(model, task)}
    for kind, short in (("encoder self", "encoder"), ("decoder self", "decoder"), ("cross", "cross")):
        row[f"{short}_entropy"] = float(np.mean([h["entropy"] for h in heads if h["kind"] == kind]))
    row |= {f"entropy_{KIND_SHORT[h['kind']]}{h['layer']}h{h['head']}": h["entropy"] for h in heads}
    row["_example"] = [layer["cross"][0] for layer in example["decoder"]]          # each (H, T, S)
    return row


def understanding_sentence(table: list[dict]) -> str:
    """What the understanding study shows, worded from its table: the recipe model untrained against
    trained (exact match, month share against uniform, entropy), then depth and the FFN."""
    def at(key, setting, stage):
        return get([t for t in table if t["stage"] == stage], key, setting)

    em_u, em_t = at("exact_match", RECIPE, "untrained"), at("exact_match", RECIPE, "trained")
    ms_u, ms_t = at("month_share", RECIPE, "untrained"), at("month_share", RECIPE, "trained")
    uni = at("uniform_share", RECIPE, "trained")[0]
    ent_u, ent_t = at("cross_entropy", RECIPE, "untrained")[0], at("cross_entropy", RECIPE, "trained")[0]
    near = "about what" if abs(ms_u[0] - uni) <= 0.05 else ("more than" if ms_u[0] > uni else "less than")
    first = (f"Untrained, the model translated {pct(em_u[0])} of held-out dates and its month digits gave the "
             f"month's name {pct(ms_u[0])} of their cross-attention, {near} uniform attention gives "
             f"({pct(uni)}); trained, {pct(*em_t)} and {pct(*ms_t)}, with the cross-attention's entropy "
             f"going from {ent_u:.2f} to {ent_t:.2f} of uniform's.")
    learned = compare(ms_u, ms_t, floor=0.05) == "higher" and compare(em_u, em_t) == "higher"
    verdict = (" The same attention code only aligned the month once trained." if learned else
               " Training did not clearly change what attention reads on this budget.")
    return first + verdict + _depth_clause(table)


def _depth_clause(table: list[dict]) -> str:
    """Depth (1, 2, 4 encoder layers) and the attention-only block, trained on the same budget."""
    trained = [t for t in table if t["stage"] == "trained"]
    em = {t["setting"]: get(trained, "exact_match", t["setting"]) for t in trained}
    depth = [k for k in ("1 layer", RECIPE, "4 layers") if k in em]
    steps = [compare(em[a], em[b]) for a, b in zip(depth, depth[1:], strict=False)]
    if all(s == "higher" for s in steps):
        trend = "more encoder layers scored higher at each step"
    elif all(s == "level" for s in steps):
        trend = "the number of encoder layers made no clear difference"
    elif all(s != "lower" for s in steps):
        trend = "more encoder layers never scored lower"
    else:
        trend = "more encoder layers did not always score higher"
    listed = ", ".join(f"{pct(em[k][0])} ({k})" for k in depth)
    text = f" On the same budget {trend}: {listed}"
    if NO_FFN in em and RECIPE in em:
        rel = {"lower": "below", "higher": "above", "level": "level with"}[compare(em[RECIPE], em[NO_FFN])]
        text += f"; without feed-forward networks {pct(*em[NO_FFN])}, {rel} the full block"
    return text + "."


def _draw_summary(rows: list[dict], out: Path) -> Path:
    labels = list(dict.fromkeys(r["setting"] for r in rows))
    fig, (a, b, c) = new_figure(3, f"npformer study understanding: untrained vs trained for {rows[0]['steps']} steps "
                                "(dots: seeds; ticks: mean ± sd)", width=4.6)
    for ax, key, title in ((a, "exact_match", "held-out exact match"),
                           (b, "month_share", "month digits' cross-attention on the month's name")):
        for off, stage, colour in ((-0.2, "untrained", "C7"), (0.2, "trained", "C0")):
            seeds_and_means(ax, labels, [r for r in rows if r["stage"] == stage], key, offset=off, colour=colour,
                            name=stage)
        ax.set(title=title, ylim=(0, 1.05))
        ax.legend(fontsize=7)
    b.axhline(float(np.nanmean([r["uniform_share"] for r in rows])), color="k", ls=":", lw=1)
    b.text(len(labels) - 0.5, float(np.nanmean([r["uniform_share"] for r in rows])), "uniform", fontsize=7,
           ha="right", va="bottom")
    heads = [k for k in rows[0] if k.startswith("entropy_")]
    x = np.arange(len(heads))
    for stage, colour in (("untrained", "C7"), ("trained", "C0")):
        rs = [r for r in rows if r["setting"] == RECIPE and r["stage"] == stage]
        c.plot(x, [np.mean([r[h] for r in rs]) for h in heads], "o-", color=colour, ms=3, label=stage)
    c.set_xticks(x, [h.removeprefix("entropy_") for h in heads], fontsize=6, rotation=90)
    c.set(title=f"entropy per head, {RECIPE} (mean of seeds)", ylabel="share of uniform's", ylim=(0, 1.05))
    c.legend(fontsize=7)
    return save(fig, out)


def _draw_example(example: list[dict], path: Path) -> Path:
    """The recipe model's cross-attention on EXAMPLE, untrained and trained (``viz``'s heatmaps)."""
    from ..viz import save_attention_figure

    src, written = list(EXAMPLE[0]), list(EXAMPLE[1]) + ["<eos>"]
    panels, labels = {}, {}
    for r in example:
        kind = f"cross, {r['stage']}"
        panels[kind] = r["_example"]
        labels[kind] = (written, src)
    return save_attention_figure(panels, labels, path, title=f"{EXAMPLE[0]!r} -> {EXAMPLE[1]!r}: the dates recipe's "
                                 "cross-attention before and after training (rows: the character written; "
                                 "columns: the source)")
