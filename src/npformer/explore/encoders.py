"""The explorer's payload for a pretrained BERT-family encoder (docs/EXPLORE_FORMAT.md): all-MiniLM-L6-v2
or a Hugging Face directory whose model_type is bert, roberta or distilbert; ``payload.open_explorer``
opens them (``open_dir``).

    minilm, bert, roberta, ...  {"text"}: a sentence; targets [CLS] and the mean-pooled embedding
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from . import capture as cap
from . import knockout as ko
from . import relevance as rel
from .payload import Explorer, _check_text, _target, group_json
from .words import truncation, word_fields


class MiniLMExplorer(Explorer):
    """all-MiniLM-L6-v2 (``npformer.pretrained``), or the BERT-family directory ``model_dir`` (a
    sentence-transformers or a plain Hugging Face one; kind: its model_type): one or two sentences, word
    pieces; targets the first piece ([CLS]) and the mean-pooled embedding (before any L2 norm)."""

    kind = "minilm"
    fields = [{"name": "text", "label": "sentence", "kind": "text", "default": ""}]
    max_inputs = 2

    def __init__(self, model_dir=None) -> None:
        from ..pretrained import SentenceEncoder

        self.encoder = SentenceEncoder.load(model_dir)
        c = self.encoder.model.config
        self.kind = c.model_type if model_dir else "minilm"
        info = {"d_model": c.hidden_size, "n_heads": c.num_attention_heads,
                "head_dim": c.hidden_size // c.num_attention_heads, "norm": "post"}
        name = Path(self.encoder.path).name if model_dir else "all-MiniLM-L6-v2"  # type: ignore[arg-type]  # load set path
        super().__init__(name, info)

    def default_inputs(self) -> list[dict]:
        return [{"text": "A man is playing a guitar."}, {"text": "Someone plays an instrument."}]

    def embed(self, text: str):
        """(ids (T,), word pieces, hidden states (1, T, E), cache)."""
        tok = self.encoder.tokenizer
        ids = tok.encode([text])[0]                                           # (T,)
        h, cache = self.encoder.model.forward(ids[None])                      # (1, T, E)
        return ids, tok.tokens([text])[0], h, cache

    def payload(self, inputs: list[dict]) -> dict:
        out = super().payload(inputs)
        if len(out["inputs"]) == 2:                                           # the two sentences' similarity
            a, b = (np.array(i["meta"].pop("_embedding")) for i in out["inputs"])
            cos = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
            for i in out["inputs"]:
                i["meta"]["cosine similarity"] = round(cos, 4)
        for i in out["inputs"]:
            i["meta"].pop("_embedding", None)
        return out

    def explain(self, inp: dict) -> dict:
        text = _check_text(inp.get("text"))
        model = self.encoder.model
        ids, pieces, h, cache = self.embed(text)
        t = len(ids)
        groups = cap.capture("bert", cache, {"self": None})
        cls, mean = h[0, 0].astype(np.float64), h[0].mean(axis=0).astype(np.float64)  # (E,)
        d_cls = np.zeros_like(h)
        d_cls[0, 0] = cls / np.linalg.norm(cls)                               # d |h_cls| / d h
        d_mean = np.broadcast_to((mean / np.linalg.norm(mean) / t).astype(h.dtype), h.shape).copy()  # d |mean| / d h
        relevance, targets = {}, []
        for name, dh, query, detail in ((pieces[0], d_cls, 0, f"length of the {pieces[0]} output vector"),
                                        ("mean pooled", d_mean, None, "length of the mean-pooled embedding")):
            grads = rel.attention_grads(model.encoder, model.encoder.backward, dh, cache[1])
            relevance[name] = rel.self_relevance(groups["self"].weights,
                                                 rel.stacked(grads, "", model.config.num_hidden_layers))
            targets.append(_target(name, "self", query, detail))

        def vectors(k):                                                       # (k, 2, E): [CLS], mean pooled
            hk = model.forward(np.repeat(ids[None], k, 0))[0]                 # (k, T, E)
            return np.stack([hk[:, 0], hk.mean(axis=1)], axis=1)
        knock = ko.knockout_json(model, "bert", groups, vectors, [], {"self": relevance}, ["[CLS]", "mean pooled"],
                                 {"self": [0, None]}, vectors=True)
        kinds = ["special" if p in ("[CLS]", "[SEP]", "<s>", "</s>") else "word" for p in pieces]
        g = group_json("self", groups["self"], pieces, pieces, kinds, kinds, relevance)
        g.update(word_fields(pieces, pieces))
        tok = self.encoder.tokenizer
        return {"label": text, "output": f"{t} word pieces; embedding of {h.shape[-1]} numbers",
                "meta": {"word pieces": t, "_embedding": mean.tolist()}, "targets": targets, "knockout": knock,
                "groups": [g], "image": None,
                "truncated": truncation(text, tok.spans([text])[0], pieces, tok.max_length)}


def open_dir(path=None) -> MiniLMExplorer:
    """all-MiniLM-L6-v2 (no path) or the BERT-family directory ``path``."""
    return MiniLMExplorer(path)
