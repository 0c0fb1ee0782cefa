"""Beam search with the GNMT length penalty (Wu et al. 2016, eq. 14), as the paper uses it
(section 6.1: beam size 4, alpha 0.6):

    score(Y) = log P(Y | X) / lp(Y),   lp(Y) = ((5 + |Y|) / 6) ** alpha

|Y| counts the generated tokens, EOS included. Each step extends every live beam by every
token, keeps the K best extensions per source; an extension that ends in EOS (and ranks among
those K) becomes a finished hypothesis, and the next best extensions keep K beams alive.
A source is done once it has K finished hypotheses and no live beam can still beat the worst
of them: a live beam's log-probability only falls, so its best possible score is its current
log-probability divided by the largest length penalty still reachable.

Dimension legend: B sources, K beams, V vocabulary, N generated tokens.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ops import log_softmax
from .greedy import check_decode_args
from .steppers import make_stepper


@dataclass
class Hypothesis:
    tokens: np.ndarray  # (N,) generated ids, ending with eos_id when finished
    score: float        # logprob / length_penalty(N, alpha): what the beams are ranked by
    logprob: float      # sum of the tokens' log-probabilities under the model
    finished: bool      # True when it ended with eos_id (False: stopped at max_new)


def length_penalty(length, alpha: float):
    """GNMT's lp(Y) = ((5 + |Y|) / 6) ** alpha."""
    return ((5.0 + np.asarray(length, dtype=np.float64)) / 6.0) ** alpha


def beam_search(model, prefix, max_new: int, *, src_ids=None, eos_id: int | None = None,
                beam: int = 4, alpha: float = 0.6, cache: bool = True) -> list[list[Hypothesis]]:
    """Beam search from ``prefix`` (B, P) (and ``src_ids`` (B, S) for an encoder-decoder).
    Returns, per source, up to ``beam`` hypotheses sorted by score, best first."""
    if int(beam) != beam or beam < 1:
        raise ValueError(f"beam must be a positive int, got {beam}")
    if not np.isfinite(alpha):
        raise ValueError(f"alpha must be finite, got {alpha}")
    prefix, max_new, n_pos = check_decode_args(model, prefix, max_new, eos_id)
    stepper = make_stepper(model, batch=prefix.shape[0], src_ids=src_ids, cache=cache, max_len=n_pos)
    return beam_search_stepper(stepper, prefix, max_new, eos_id=eos_id, beam=int(beam), alpha=alpha)


def beam_search_stepper(stepper, prefix: np.ndarray, max_new: int, *, eos_id: int | None,
                        beam: int, alpha: float) -> list[list[Hypothesis]]:
    """The search itself, over any stepper (see ``steppers``); ``beam_search`` checks the
    arguments and builds the stepper for a model."""
    n_src, k = prefix.shape[0], beam
    logp = log_softmax(stepper.step(prefix)[:, -1].astype(np.float64))   # (B, V)
    v = logp.shape[-1]
    stepper.reorder(np.repeat(np.arange(n_src), k))                       # B -> B*K rows
    logp = np.repeat(logp, k, axis=0)                                     # (B*K, V)
    scores = np.full((n_src, k), -np.inf)                                 # (B, K) summed log-probs
    scores[:, 0] = 0.0                                                    # one live beam to start
    tokens = np.zeros((n_src, k, 0), dtype=np.int64)                      # (B, K, 0)
    finished: list[list[Hypothesis]] = [[] for _ in range(n_src)]
    done = np.zeros(n_src, dtype=bool)                                    # (B,)
    n_cand = min(2 * k, k * v)      # at most K of the best 2K can be EOS, so K others remain

    for step in range(max_new):
        n = step + 1                                                      # length after this token
        cand = (scores[:, :, None] + logp.reshape(n_src, k, v)).reshape(n_src, k * v)  # (B, K*V)
        top = np.argsort(-cand, axis=-1, kind="stable")[:, :n_cand]      # (B, 2K), best first
        new_scores = np.full((n_src, k), -np.inf)                        # (B, K)
        new_origin = np.zeros((n_src, k), dtype=np.int64)                 # (B, K) beam extended
        new_token = np.full((n_src, k), eos_id if eos_id is not None else 0, dtype=np.int64)  # (B, K)
        for b in range(n_src):
            if done[b]:
                continue
            new_scores[b], new_origin[b], new_token[b], ended = _expand(cand[b], top[b], tokens[b], v, eos_id,
                                                                         n, alpha)
            finished[b] = sorted(finished[b] + ended, key=lambda h: -h.score)[:k]
            done[b] = _is_done(finished[b], new_scores[b], k, n, max_new, alpha)
        scores = new_scores
        tokens = np.concatenate([np.take_along_axis(tokens, new_origin[:, :, None], axis=1),
                                 new_token[:, :, None]], axis=2)          # (B, K, n)
        if done.all() or n == max_new:
            break
        rows = (np.arange(n_src)[:, None] * k + new_origin).reshape(-1)   # (B*K,)
        stepper.reorder(rows)
        logp = log_softmax(stepper.step(new_token.reshape(-1, 1))[:, -1].astype(np.float64))  # (B*K, V)
    return [_final_hypotheses(finished[b], scores[b], tokens[b], k, alpha) for b in range(n_src)]


def _expand(cand: np.ndarray, top: np.ndarray, tokens: np.ndarray, v: int, eos_id: int | None, n: int,
            alpha: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[Hypothesis]]:
    """One source's step. ``cand`` (K*V,) are the extensions' log-probs, ``top`` (2K,) the best of
    them in order, ``tokens`` (K, n-1) the live beams. Returns the K live beams' (scores, origin
    beam, new token), each (K,), and the hypotheses that ended in EOS among the K best."""
    k = tokens.shape[0]
    scores = np.full(k, -np.inf)                                          # (K,)
    origin = np.zeros(k, dtype=np.int64)                                  # (K,)
    token = np.full(k, eos_id if eos_id is not None else 0, dtype=np.int64)  # (K,)
    ended: list[Hypothesis] = []
    alive = 0
    for rank, flat in enumerate(top):
        s = cand[flat]
        if not np.isfinite(s) or alive == k:
            break
        beam, tok = divmod(int(flat), v)
        if eos_id is not None and tok == eos_id:
            if rank < k:                                                  # it would have been kept
                seq = np.append(tokens[beam], tok)                        # (n,)
                ended.append(Hypothesis(seq, float(s / length_penalty(n, alpha)), float(s), True))
            continue
        scores[alive], origin[alive], token[alive] = s, beam, tok
        alive += 1
    return scores, origin, token, ended


def _final_hypotheses(finished: list[Hypothesis], scores: np.ndarray, tokens: np.ndarray, k: int,
                      alpha: float) -> list[Hypothesis]:
    """One source's result: its finished hypotheses, topped up with its best live beams (``scores``
    (K,), ``tokens`` (K, N)) when fewer than K finished; best first."""
    hyps = list(finished)
    if len(hyps) < k:                                                     # ran out of steps: unfinished ones too
        n = tokens.shape[1]
        for j in np.argsort(-scores, kind="stable"):
            if np.isfinite(scores[j]) and len(hyps) < k:
                hyps.append(Hypothesis(tokens[j].copy(), float(scores[j] / length_penalty(n, alpha)),
                                       float(scores[j]), False))
    return sorted(hyps, key=lambda h: -h.score)[:k]


def _is_done(finished: list[Hypothesis], live_scores: np.ndarray, k: int, n: int, max_new: int,
             alpha: float) -> bool:
    """True when K hypotheses are finished and no live beam (log-probs ``live_scores``, length n)
    can end with a better score than the worst of them."""
    if not np.isfinite(live_scores).any():
        return True
    if len(finished) < k or n == max_new:
        return n == max_new
    best_live = live_scores.max()                                         # <= 0, and can only fall
    lp_reach = length_penalty(np.array([n + 1, max_new]), alpha)           # lp is monotone in length
    bound = (best_live / lp_reach).max()
    return bool(bound <= finished[-1].score)
