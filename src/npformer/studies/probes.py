"""Measurements of a dates model beyond its held-out score: its greedy outputs on given sources,
which inputs are anagrams of another date's input, how spread out each head's attention is, and
how much cross-attention the month digits give the month's name.

Dimension legend: B batch, H heads, T target positions (<bos> + "YYYY-MM-DD"), S source positions.
"""
from __future__ import annotations

import datetime as dt
import functools
import re
from dataclasses import dataclass

import numpy as np

from ..data.dates import FORMATS, MONTHS, format_date
from ..data.vocab import pad_batch
from ..decode import greedy, strip_eos

MONTH_ROWS = slice(5, 7)        # the decoder rows that write the month digits of "YYYY-MM-DD"


def heldout_pairs(task, n: int, seed: int) -> list[tuple[str, str]]:
    """``n`` held-out (source, ISO) pairs: the same draw as ``task.evaluate(n=n, seed=seed)``."""
    return task.sample_pairs(np.random.default_rng(seed), n, heldout=True)


def translate(model, task, sources: list[str], batch_size: int = 250) -> list[str]:
    """Greedy translations of ``sources`` (the model in eval mode)."""
    v = task.tgt_vocab
    out = []
    for i in range(0, len(sources), batch_size):
        src = pad_batch([task.encode_source(s) for s in sources[i:i + batch_size]], v.pad_id)     # (B, S)
        bos = np.full((len(src), 1), v.bos_id, dtype=np.int64)                                    # (B, 1)
        ids = greedy(model, bos, task.max_target_len, src_ids=src, eos_id=v.eos_id)               # (B, N)
        out += [task.decode_target(row) for row in strip_eos(ids, v.eos_id)]
    return out


def shuffle_chars(sources: list[str], rng: np.random.Generator) -> list[str]:
    """Each source with its characters in a random order (the same characters, so the same length)."""
    return ["".join(np.array(list(s))[rng.permutation(len(s))]) for s in sources]


def bag(text: str) -> str:
    """The multiset of characters, as a key: "29.11" and "92.11" give the same one."""
    return "".join(sorted(text))


@dataclass(frozen=True)
class OrderBlind:
    """What reading only the multiset of characters allows, over every date of a task's range in
    every format (each (date, format) equally likely, as the task samples them)."""
    bags: np.ndarray            # (U,) bytes, sorted: every multiset of characters an input can have
    dates: np.ndarray           # (U,) int: how many different dates each multiset spells
    ceiling: float              # held-out exact match of the best order-blind reader (see order_blind)


@functools.lru_cache(maxsize=2)
def _order_blind(first_year: int, last_year: int, heldout: tuple) -> OrderBlind:
    first, last = dt.date(first_year, 1, 1).toordinal(), dt.date(last_year, 12, 31).toordinal()
    days, n_fmt = np.arange(first, last + 1), len(FORMATS)                     # (D,)
    keys = np.array([bag(format_date(dt.date.fromordinal(o), f)).encode() for o in days.tolist()
                     for f in range(n_fmt)])                                   # (D * F,) bytes
    bags, bag_id = np.unique(keys, return_inverse=True)                       # (U,), (D * F,)
    pair = bag_id.astype(np.int64) * len(days) + np.repeat(np.arange(len(days)), n_fmt)   # (multiset, date)
    pairs, pair_of, count = np.unique(pair, return_inverse=True, return_counts=True)     # (P,), (D * F,), (P,)
    pair_bag = pairs // len(days)                                              # (P,)
    top = np.zeros(len(bags), dtype=np.int64)                                  # (U,) the likeliest date's count
    np.maximum.at(top, pair_bag, count)
    ties = np.bincount(pair_bag, weights=(count == top[pair_bag]).astype(np.float64), minlength=len(bags))
    # the reader answers each multiset with its likeliest date (a tie: one of them at random), so an
    # input is answered right with probability [its date is a likeliest one] / ties
    right = (count[pair_of] == top[bag_id]) / ties[bag_id]                    # (D * F,)
    held = np.repeat(np.isin(days, np.asarray(heldout)), n_fmt)               # (D * F,)
    return OrderBlind(bags, np.bincount(pair_bag, minlength=len(bags)), float(right[held].mean()))


def order_blind(task) -> OrderBlind:
    """The task's ``OrderBlind``. Its ``ceiling`` is the exact match, on the held-out dates, of a
    reader that sees only which characters an input holds and answers each multiset with the date
    most likely to have written it: no order-blind model trained on these dates can expect more.
    The first call for a range writes every date in every format (seconds for 1900-2099)."""
    s = task.settings
    return _order_blind(s.first_year, s.last_year, tuple(task.heldout_days.tolist()))


def is_anagram_of_another(task, sources: list[str]) -> np.ndarray:
    """(N,) bool: the source's characters, in some order, also spell an input of another date in the
    task's range. An order-blind model must give both the same answer."""
    ob = order_blind(task)
    keys = np.array([bag(x).encode() for x in sources], dtype=ob.bags.dtype)  # (N,)
    i = np.minimum(np.searchsorted(ob.bags, keys), len(ob.bags) - 1)          # (N,)
    return (ob.bags[i] == keys) & (ob.dates[i] > 1)


def attention_maps(model, task, pairs: list[tuple[str, str]]):
    """One teacher-forced forward over ``pairs``: (the model's ``attention_weights``, src (B, S) ids,
    tgt_in (B, T) ids)."""
    src, tgt_in, _ = task.encode_pairs(pairs)                       # (B, S), (B, T)
    _, cache = model.forward(src, tgt_in)
    return model.attention_weights(cache), src, tgt_in


def head_entropies(weights: dict, src: np.ndarray, tgt_in: np.ndarray, pad_id: int) -> list[dict]:
    """Per head, the entropy of its attention rows divided by the entropy of uniform attention over
    the same keys (1 = uniform, 0 = all on one key), averaged over the real (non-padding) query rows
    that have two or more keys to choose from. One dict per head: kind, layer, head, entropy."""
    src_ok, tgt_ok = src != pad_id, tgt_in != pad_id                              # (B, S), (B, T)
    causal = np.tril(np.ones((tgt_in.shape[1],) * 2, dtype=bool))                 # (T, T)
    kinds = [("encoder self", layer["self"], src_ok, src_ok[:, None, :])
             for layer in weights["encoder"]]
    kinds += [("decoder self", layer["self"], tgt_ok, tgt_ok[:, None, :] & causal) for layer in weights["decoder"]]
    kinds += [("cross", layer["cross"], tgt_ok, src_ok[:, None, :]) for layer in weights["decoder"]]
    out: list[dict] = []
    layer_of: dict[str, int] = {}
    for kind, w, q_ok, k_ok in kinds:
        layer_of[kind] = layer_of.get(kind, 0) + 1
        n_keys = k_ok.sum(-1)                                                     # (B, Tq)
        rows = q_ok & (n_keys > 1)                                                # (B, Tq)
        p = w.astype(np.float64)                                                  # (B, H, Tq, Tk)
        h = -(p * np.log(np.where(p > 0, p, 1.0))).sum(-1)                        # (B, H, Tq) nats
        norm = h / np.log(np.maximum(n_keys, 2))[:, None, :]                      # (B, H, Tq)
        for head in range(w.shape[1]):
            out.append({"kind": kind, "layer": layer_of[kind], "head": head + 1,
                        "entropy": float(norm[:, head][rows].mean())})
    return out


def month_span(source: str, iso: str) -> tuple[int, int] | None:
    """(start, end) of the month's name or abbreviation in ``source`` (any case), or None when the
    source writes the month as digits."""
    name = MONTHS[int(iso[5:7]) - 1].lower()
    m = re.search(rf"\b{name[:3]}[a-z]*", source.lower())
    return (m.start(), m.end()) if m else None


def month_share(weights: dict, pairs: list[tuple[str, str]]) -> tuple[float, float]:
    """(share, uniform share): of the cross-attention that the rows writing the month digits give the
    source (last decoder layer, mean over heads), the mean share that falls on the month's name, over
    the pairs whose source names the month; and what uniform attention over the source would give."""
    cross = weights["decoder"][-1]["cross"].mean(axis=1)                          # (B, T, S)
    shares, uniform = [], []
    for b, (source, iso) in enumerate(pairs):
        span = month_span(source, iso)
        if span is None:
            continue
        rows = cross[b, MONTH_ROWS]                                               # (2, S)
        shares.append(float(rows[:, span[0]:span[1]].sum() / rows.sum()))
        uniform.append((span[1] - span[0]) / len(source))
    if not shares:
        return float("nan"), float("nan")
    return float(np.mean(shares)), float(np.mean(uniform))
