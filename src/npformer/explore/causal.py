"""The explorer for a pretrained causal LM (a GPT-2-family Hugging Face directory, ``pretrained.CausalLM``).

    ex = open_explorer("my-gpt2")               # payload.open_explorer sends model_type gpt2 here (open_dir)
    payload = ex.payload([{"text": "Once upon a time"}])

One input is a prompt. The explorer continues it greedily with the KV cache (``CausalLM.generate``),
then runs one eval-mode forward over the prompt and every generated token but the last (the tokens
the model read) and shows that forward's causal self-attention, as for a trained text run: the query
at position p is the step that wrote token p + 1, and its row is what that step attended to.
The input's ``timeline`` names those steps: step j is the query at position P - 1 + j (P prompt
tokens), reading the prompt and the j tokens generated before it, and wrote token ``steps[j]``.
The cached steps attend to the same keys with the same weights (tests/decode/test_kvcache.py holds
cached decoding equal to the full forward), so the page's timeline view reads the group's rows.

Targets: the logit of each of the first MAX_STEP_TARGETS generated tokens at the step that wrote
it, each with one backward (relevance, Chefer et al.), and each head knocked out in turn on them
(``knockout.knockout_json``: one forward per head over the tokens read, teacher-forced on the model's
own continuation, its logits projected at the explained steps only; within knockout.WORK_BUDGET).
``--target`` is refused here: the targets are the steps the model took.
Dimension legend: P prompt tokens, N generated tokens, T = P + N - 1 positions read, V vocabulary.
"""
from __future__ import annotations

from pathlib import Path
from typing import cast

import numpy as np

from . import capture as cap
from . import knockout as ko
from . import relevance as rel
from . import targets as tg
from .payload import Explorer, _check_text, _one_hot, _target, group_json

NEW_TOKENS = 12                    # tokens generated for the timeline
MAX_PROMPT_TOKENS = 200            # the longest prompt the explorer takes, in tokens
MAX_STEP_TARGETS = 4               # generated tokens explained with relevance (one backward each)


def logits_at(model, read: np.ndarray, k: int, rows: list[int]) -> np.ndarray:
    """The logits of ``k`` copies of ``read`` (1, T) at the positions ``rows`` only, (k, K, V): the forward
    of ``DecoderLM._forward`` (GPT-2 has no padding id, so no key mask) with the output projection applied
    to the K measured rows, not to all T (a knock-out measures K <= MAX_STEP_TARGETS positions, and T x V
    logits per copy are most of a wide vocabulary's memory)."""
    x, _ = model.embed.forward(np.repeat(read, k, 0), None)                    # (k, T, E)
    h, _ = model.blocks.forward(x, mask=None, causal=True, rng=None)          # (k, T, E)
    return model.project_output(h[:, rows])[0]                                # (k, K, V)


def open_dir(path) -> Explorer:
    """The explorer of a GPT-2-family directory (payload.open_explorer's HF_EXPLORERS names this module)."""
    return CausalLMExplorer(path)


class CausalLMExplorer(Explorer):
    """A GPT-2-family directory: a prompt, its greedy continuation, and the attention of each step."""

    kind = "causal_lm"
    fields = [{"name": "text", "label": "prompt", "kind": "text", "default": ""}]
    max_inputs = 2

    def __init__(self, path) -> None:
        from ..pretrained import CausalLM

        self.lm = CausalLM.load(path)
        c = self.lm.config
        info = {"d_model": c.n_embd, "n_heads": c.n_head, "head_dim": c.n_embd // c.n_head, "norm": "pre"}
        super().__init__(f"{Path(path).resolve().name} (GPT-2, {c.n_layer} layers)", info)

    def default_inputs(self) -> list[dict]:
        return [{"text": "The quick brown fox"}]

    def _labels(self, ids: list[int]) -> tuple[list[str], list[str]]:
        labels = self.lm.tokenizer.token_texts(ids)
        kinds = ["special" if i == self.lm.eos_id else "word" for i in ids]
        return labels, kinds

    def explain(self, inp: dict) -> dict:
        text = _check_text(inp.get("text"))
        if inp.get("target") not in (None, ""):
            raise tg.TargetError("--target is for trained runs: a GPT-2 page explains the tokens it generated, "
                                 "each at the step that wrote it")
        lm = self.lm
        prompt = lm.encode(text)
        p = len(prompt)
        if not 1 <= p <= min(MAX_PROMPT_TOKENS, lm.n_positions - 1):
            raise ValueError(f"the prompt is {p} tokens; the explorer takes 1 to "
                             f"{min(MAX_PROMPT_TOKENS, lm.n_positions - 1)}")
        new = cast(list, lm.generate(prompt, min(NEW_TOKENS, lm.n_positions - p + 1)))  # N <= NEW_TOKENS ids
        read = np.asarray([prompt + new[:-1]], dtype=np.int64)                  # (1, T)
        t = read.shape[1]
        logits, cache = lm.model.forward(read)                                  # (1, T, V)
        groups = cap.capture("decoder_lm", cache, {"self": cap.causal(t)})
        labels, kinds = self._labels(read[0].tolist())
        wrote, _ = self._labels(new)
        targets, relevance, names, steps_explained = [], {}, [], []
        for j in range(min(len(new), MAX_STEP_TARGETS)):
            q = p - 1 + j
            name = f"step {j + 1}: {wrote[j]}"
            grads = rel.attention_grads(lm.model, lm.model.backward, _one_hot(logits.shape, (0, q, new[j])), cache)
            relevance[name] = rel.self_relevance(groups["self"].weights,
                                                 rel.stacked(grads, "blocks", lm.config.n_layer))
            targets.append(_target(name, "self", q, f"logit of {wrote[j]!r}, written at step {j + 1} "
                                                    f"(query position {q})"))
            names.append(name)
            steps_explained.append(tg.Target(q, int(new[j]), 0))            # greedy: the step's prediction
        rows = [t.slot for t in steps_explained]                              # the K measured positions
        knock = ko.knockout_json(lm.model, "decoder_lm", groups, lambda k: logits_at(lm.model, read, k, rows),
                                 [tg.Target(j, t.id, 0) for j, t in enumerate(steps_explained)],
                                 {"self": relevance}, names, {"self": rows})
        steps = [{"query": p - 1 + j, "id": int(i), "token": wrote[j]} for j, i in enumerate(new)]
        return {"label": text, "output": lm.tokenizer.decode(new), "image": None,
                "meta": {"prompt tokens": p, "generated tokens": len(new)}, "targets": targets, "knockout": knock,
                "groups": [group_json("self", groups["self"], labels, labels, kinds, kinds, relevance)],
                "timeline": {"group": "self", "prompt_tokens": p, "steps": steps}}
