"""The explorer's payload (docs/EXPLORE_FORMAT.md) for each kind of model npformer has.

    ex = open_explorer("runs/dates")            # or "minilm", or a Hugging Face directory
    payload = ex.payload([{"text": "29 November 2026"}])

An explorer runs the model once per input in eval mode, reads every attention op's q, k, v and
weights from the caches (``capture``), computes rollout and, for each chosen output (a target), the
gradient-weighted relevance with one run of the model's own backward (``relevance``), and the head
statistics. Arrays go into the JSON compactly (``encode_array``): q, k, v float32 (the page's step
view recomputes the weights from them, so they stay exact), maps as 8-bit or float16.

Model kinds and what an input is (the first two here, the others in the module named):
    transformer (dates, copy)   {"text"}: the source; the output is greedy decoding's
    decoder_lm (text)           {"text"}: the prompt; the target is the next character predicted
    vit (digits)                {"index"}: a test image; targets the predicted class (and the label)
                                (explore/images.py)
    vla (tabletop)              {"seed", "instruction"}: a scene and what to do; targets pick and place
                                (explore/images.py)
    action_lm (gripper)         {"seed", "instruction", "perturb"}: an episode (explore/episode.py)
    minilm, bert, roberta, ...  {"text"}: a sentence; targets [CLS] and the mean-pooled embedding
                                (all-MiniLM-L6-v2, or a BERT-family Hugging Face directory: HF_EXPLORERS;
                                explore/encoders.py)
    gpt2                        {"text"}: a prompt (explore/causal.py)
Dimension legend: L layers, H heads, Tq/Tk query/key tokens, D head size, T tokens.
"""
from __future__ import annotations

import base64
import importlib
from pathlib import Path

import numpy as np

from . import capture as cap
from . import knockout as ko
from . import relevance as rel
from . import targets as tg
from .arrays import decode_array as decode_array  # re-exported: tests and clients read arrays with it
from .arrays import encode_array
from .arrays import map_array as _map_array
from .arrays import mask_array as _mask_array
from .kinds import label_kinds

VERSION = 1
MAX_TARGETS = 24                       # an encoder-decoder's output tokens explained, at most
MAX_CHARS = 2000                       # the longest text input accepted
WEIGHTS_MAX = 1 << 20                  # store 8-bit weights only when L*H*Tq*Tk is at most this
COMPRESS_OVER = 1 << 20                # q, k, v of a group over this many bytes together: zlib-shuffle4


# -- statistics ------------------------------------------------------------------------------------
def head_stats(weights: np.ndarray, mask: np.ndarray | None) -> dict:
    """weights (L, H, Tq, Tk) -> per layer and head, averaged over the query rows that may read something:
    entropy (nats), mean attended distance sum_j w_ij |i - j| (token positions), weight on key 0."""
    w = np.asarray(weights, dtype=np.float64)
    tq, tk = w.shape[-2:]
    rows = np.ones(tq, dtype=bool) if mask is None else mask.any(axis=-1)     # (Tq,)
    logw = np.log(np.where(w > 0, w, 1.0))
    entropy = -(w * logw).sum(-1)[..., rows].mean(-1)                          # (L, H)
    dist = np.abs(np.arange(tq)[:, None] - np.arange(tk)[None, :])             # (Tq, Tk)
    distance = (w * dist).sum(-1)[..., rows].mean(-1)                           # (L, H)
    first = w[..., 0][..., rows].mean(-1)                                       # (L, H)
    return {name: np.round(v, 5).tolist() for name, v in
            (("entropy", entropy), ("distance", distance), ("first", first))}


# -- one group -------------------------------------------------------------------------------------
def group_json(name: str, g: cap.GroupParts, query_tokens, key_tokens, query_kinds, key_kinds,
               relevance: dict[str, np.ndarray] | None) -> dict:
    n_layers, n_heads, tq, d = g.q.shape
    tk = g.k.shape[2]
    if (len(query_tokens), len(key_tokens)) != (tq, tk):
        raise ValueError(f"{name}: {len(query_tokens)} query and {len(key_tokens)} key labels for "
                         f"(Tq, Tk) = ({tq}, {tk})")
    small = n_layers * n_heads * tq * tk <= WEIGHTS_MAX
    big = (g.q.size + g.k.size + g.v.size) * 4 > COMPRESS_OVER
    return {
        "name": name, "n_layers": n_layers, "n_heads": n_heads, "head_dim": d,
        "query_tokens": list(query_tokens), "key_tokens": list(key_tokens),
        "token_kinds": {"query": list(query_kinds), "key": list(key_kinds)},
        "q": encode_array(g.q, "f32", big), "k": encode_array(g.k, "f32", big), "v": encode_array(g.v, "f32", big),
        "scale": g.scale,
        "mask": None if g.mask is None else _mask_array(g.mask),
        "bias": None,
        "weights": encode_array(g.weights, "u8") if small else None,
        "rollout": encode_array(rel.rollout(g.weights), "u8") if g.self_attention else None,
        "relevance": None if relevance is None else {t: _map_array(r) for t, r in relevance.items()},
        "stats": head_stats(g.weights, g.mask),
    }


def _target(name: str, group: str, query: int | None, detail: str, t: tg.Target | None = None,
            position: str = "", token: str = "") -> dict:
    """One target of the page (docs/EXPLORE_FORMAT.md); ``t``: which output it is, for the selector."""
    out = {"name": name, "group": group, "query": query, "detail": detail}
    if t is not None:
        out.update(position=position, token=token, id=t.id, rank=t.rank, chosen=t.chosen)
    return out


def _chosen(inp: dict, positions, tokens: dict, n_ids: int, what: str) -> tuple[int, int] | None:
    """The input's "target" (POS=TOKEN) as (slot, id), or None: the default targets."""
    spec = inp.get("target")
    return None if spec is None or spec == "" else tg.resolve(spec, positions, tokens, n_ids, what)


def _text_ids(vocab, n_ids: int) -> dict[str, int]:
    return {lab: i for i, lab in enumerate(_char_labels(vocab, range(n_ids)))}


def _as_model(a: np.ndarray, model) -> np.ndarray:
    """Float inputs in the model's dtype now (the knock-outs' noise floor runs it in float64 too); ids as they are."""
    return a.astype(model.dtype) if np.issubdtype(a.dtype, np.floating) else a


def _one_hot(shape, index) -> np.ndarray:
    d = np.zeros(shape, dtype=np.float32)
    d[index] = 1.0
    return d


# -- explorers -------------------------------------------------------------------------------------
class Explorer:
    """Runs one model for the page. Subclasses set ``kind``/``fields`` and write ``explain``."""

    kind = ""
    fields: list[dict] = []            # what one input needs (docs/EXPLORE_FORMAT.md, "Serve")
    max_inputs = 4
    layers: tuple[int, int] | None = None   # --layers A-B: store only these layers' maps (explore/layers.py)

    def __init__(self, title: str, model_info: dict, training: dict | None = None) -> None:
        self.title, self.model_info, self.training = title, model_info, training

    def explain(self, inp: dict) -> dict:
        raise NotImplementedError

    def default_inputs(self) -> list[dict]:
        raise NotImplementedError

    def payload(self, inputs: list[dict]) -> dict:
        if not inputs:
            raise ValueError("no input: give at least one")
        if len(inputs) > self.max_inputs:
            raise ValueError(f"at most {self.max_inputs} inputs at once, got {len(inputs)}")
        notes = ["q, k and v are stored as float32 (the step view recomputes the weights from them), "
                 "zlib-compressed byte planes when large;",
                 "weights as 8-bit (round(w*255)) when small, else computed by the page; rollout as 8-bit, "
                 "relevance as float16.",
                 "Relevance: Chefer, Gur & Wolf 2021, gradients from npformer's own backward; "
                 "rollout: Abnar & Zuidema 2020 with the residual as 0.5 I."]
        out = {"version": VERSION, "title": self.title, "model": {"kind": self.kind, **self.model_info},
               "inputs": [self.explain(i) for i in inputs], "training": self.training, "notes": notes}
        if self.layers is not None:
            from .layers import keep_layers

            out = keep_layers(out, *self.layers)
        return out


def _model_info(c) -> dict:
    d_model, n_heads = int(c.d_model), int(c.n_heads)
    return {"d_model": d_model, "n_heads": n_heads, "head_dim": d_model // n_heads,
            "norm": "pre" if c.norm_first else "post"}


def _char_labels(vocab, ids) -> list[str]:
    names = {vocab.pad_id: "<pad>", vocab.bos_id: "<bos>", vocab.eos_id: "<eos>", vocab.unk_id: "<unk>"}
    return [names.get(int(i)) or vocab.decode([int(i)], stop_at_eos=False) for i in ids]


def _char_kinds(labels) -> list[str]:
    return ["pad" if t == "<pad>" else "special" if t.startswith("<") and t.endswith(">") and len(t) > 1
            else "word" for t in labels]


def _check_text(text) -> str:
    if not isinstance(text, str) or not text.strip():
        raise ValueError("empty input: give a non-empty text")
    if len(text) > MAX_CHARS:
        raise ValueError(f"input of {len(text)} characters is longer than the explorer's limit of {MAX_CHARS}")
    return text


class RunExplorer(Explorer):
    """A trained run directory."""

    def __init__(self, run) -> None:
        self.run = run
        self.kind = run.config["task"]
        super().__init__(f"{run.config['task']} run ({run.path}), step {run.step}", _model_info(run.model.config),
                         None)
        self.training = self._training()

    def _training(self) -> dict | None:
        from ..settings import reading
        from ..train.probe import PROBE, read_probe

        probe = read_probe(self.run.path)
        if probe is None:
            return None
        with reading(self.run.path / PROBE):                         # inputs the file holds: its errors name it
            q, k = self.probe_labels(probe["inputs"], probe["group"])
        if probe["weights"].shape[-2:] != (len(q), len(k)):
            return None                                              # a probe of another shape: not shown
        return {"steps": probe["steps"].tolist(), "group": probe["group"], "query_tokens": q, "key_tokens": k,
                "token_kinds": {"query": label_kinds(q), "key": label_kinds(k)},
                "weights": {"dtype": "u8", "shape": list(probe["weights"].shape), "scale": 1.0 / 255.0,
                            "b64": base64.b64encode(np.ascontiguousarray(probe["weights"]).tobytes()).decode()}}

    def probe_labels(self, inputs, group) -> tuple[list[str], list[str]]:
        raise NotImplementedError


class Seq2SeqExplorer(RunExplorer):
    """An encoder-decoder run (dates, copy): translate greedily, then look at the forward over the
    source and what the decoder read."""

    fields = [{"name": "text", "label": "source text", "kind": "text", "default": ""}, tg.FIELD]

    def default_inputs(self) -> list[dict]:
        task = self.run.task
        if self.kind == "dates":
            return [{"text": "29 November 2026"}]
        return [{"text": "".join(task.vocab.chars[:max(1, min(5, task.max_source_len))])}]

    def explain(self, inp: dict) -> dict:
        from ..decode import greedy

        task, model = self.run.task, self.run.model
        text = _check_text(inp.get("text"))
        vocab = task.vocab
        src = task.encode_source(text)[None]                                  # (1, S)
        bos = np.full((1, 1), vocab.bos_id, dtype=np.int64)
        max_new = min(task.max_target_len, model.config.max_len)
        out = greedy(model, bos, max_new, src_ids=src, eos_id=vocab.eos_id)[0]  # (N,)
        tgt_in = np.concatenate([[vocab.bos_id], out[:-1]])[None]            # (1, N): what the decoder read
        logits, cache = model.forward(src, tgt_in)                           # (1, N, V)
        n = tgt_in.shape[1]
        groups = cap.capture("transformer", cache, {"encoder self": None, "decoder self": cap.causal(n),
                                                    "decoder cross": None})
        src_lab, read, wrote = _char_labels(vocab, src[0]), _char_labels(vocab, tgt_in[0]), _char_labels(vocab, out)
        relevance: dict[str, dict]
        targets, relevance, names = [], {name: {} for name in groups}, []
        c, n_t, n_ids = model.config, min(n, MAX_TARGETS), logits.shape[-1]
        choices = tg.choose(logits[0, :n_t], out, _chosen(inp, n_t, _text_ids(vocab, n_ids), n_ids, "token"))
        for ch in choices:
            tok = _char_labels(vocab, [ch.id])[0]
            name = f"output {ch.slot}: {tok}{tg.suffix(ch)}"
            grads = rel.attention_grads(model, model.backward, _one_hot(logits.shape, (0, ch.slot, ch.id)), cache)
            r = _seq2seq_relevance(groups, grads, c)
            for g in groups:
                relevance[g][name] = r[g]
            names.append(name)
            targets.append(_target(name, "decoder cross", ch.slot, f"logit of {tok!r} at output position {ch.slot} "
                                   "(0-based)", ch, f"output {ch.slot}", tok))
        slots = [ch.slot for ch in choices]
        knock = ko.knockout_json(model, "transformer", groups,
                                 lambda k: model.forward(np.repeat(src, k, 0), np.repeat(tgt_in, k, 0))[0],
                                 choices, relevance, names, {"encoder self": [None] * len(names),
                                                             "decoder self": slots, "decoder cross": slots},
                                 labels=_char_labels(vocab, range(n_ids)))
        jsons = [group_json("encoder self", groups["encoder self"], src_lab, src_lab, _char_kinds(src_lab),
                            _char_kinds(src_lab), relevance["encoder self"]),
                 group_json("decoder self", groups["decoder self"], read, read, _char_kinds(read), _char_kinds(read),
                            relevance["decoder self"]),
                 group_json("decoder cross", groups["decoder cross"], wrote, src_lab, _char_kinds(wrote),
                            _char_kinds(src_lab), relevance["decoder cross"])]
        return {"label": text, "output": task.decode_target(out), "targets": targets, "groups": jsons,
                "image": None, "meta": {"output tokens": int(n)}, "knockout": knock}

    def probe_labels(self, inputs, group):
        vocab = self.run.task.vocab
        src, tgt_in = inputs
        read = _char_labels(vocab, tgt_in[0])
        wrote = read[1:] + ["<eos>"]                       # teacher forcing: it writes tgt_in shifted, then <eos>
        return wrote, _char_labels(vocab, src[0])


def _seq2seq_relevance(groups: dict, grads: dict, c) -> dict:
    """Chefer et al.'s encoder-decoder rules over a Transformer's three attention groups."""
    if c.n_encoder_layers:
        enc_w, enc_g = groups["encoder self"].weights, rel.stacked(grads, "encoder", c.n_encoder_layers)
    else:
        s = groups["decoder cross"].weights.shape[-1]
        enc_w = enc_g = np.zeros((0, 1, s, s))
    return rel.encoder_decoder_relevance(enc_w, enc_g,
                                         groups["decoder self"].weights,
                                         rel.stacked(grads, "decoder", c.n_decoder_layers),
                                         groups["decoder cross"].weights,
                                         rel.stacked(grads, "decoder", c.n_decoder_layers, "multihead_attn"))


class LMExplorer(RunExplorer):
    """A language-model run (text): causal self-attention over the prompt; the target is the next character."""

    fields = [{"name": "text", "label": "prompt", "kind": "text", "default": ""}, tg.FIELD]

    def default_inputs(self) -> list[dict]:
        return [{"text": "".join(self.run.task.vocab.chars[:8])}]

    def explain(self, inp: dict) -> dict:
        task, model = self.run.task, self.run.model
        text = _check_text(inp.get("text"))
        ids = task.encode_source(text)                                        # (T,)
        if len(ids) > model.config.max_len:
            raise ValueError(f"input has {len(ids)} characters, more than the model's context of "
                             f"{model.config.max_len}")
        logits, cache = model.forward(ids[None])                              # (1, T, V)
        t = len(ids)
        groups = cap.capture("decoder_lm", cache, {"self": cap.causal(t)})
        nxt, n_ids = int(logits[0, -1].argmax()), logits.shape[-1]
        lab = _char_labels(task.vocab, ids)
        nxt_lab = _char_labels(task.vocab, [nxt])[0]
        chosen = _chosen(inp, t, _text_ids(task.vocab, n_ids), n_ids, "token")
        choices = tg.choose(logits[0], logits[0].argmax(-1), chosen, slots=[t - 1])
        targets, relevance, names = [], {}, []
        for ch in choices:
            tok = _char_labels(task.vocab, [ch.id])[0]
            where = "next" if ch.slot == t - 1 else f"after position {ch.slot}"
            name = f"{where}: {tok}{tg.suffix(ch)}"
            grads = rel.attention_grads(model, model.backward, _one_hot(logits.shape, (0, ch.slot, ch.id)), cache)
            relevance[name] = rel.self_relevance(groups["self"].weights,
                                                 rel.stacked(grads, "blocks", model.config.n_layers))
            names.append(name)
            targets.append(_target(name, "self", ch.slot, f"logit of the character {tok!r} after position {ch.slot}",
                                   ch, f"position {ch.slot}", tok))
        knock = ko.knockout_json(model, "decoder_lm", groups, lambda k: model.forward(np.repeat(ids[None], k, 0))[0],
                                 choices, {"self": relevance}, names, {"self": [ch.slot for ch in choices]},
                                 labels=_char_labels(task.vocab, range(n_ids)))
        kinds = _char_kinds(lab)
        return {"label": text, "output": nxt_lab, "meta": {"tokens": t}, "targets": targets, "knockout": knock,
                "groups": [group_json("self", groups["self"], lab, lab, kinds, kinds, relevance)], "image": None}

    def probe_labels(self, inputs, group):
        lab = _char_labels(self.run.task.vocab, inputs[0][0])
        return lab, lab


# -- opening a source ------------------------------------------------------------------------------
EXPLORERS = {"transformer": Seq2SeqExplorer, "decoder_lm": LMExplorer}
# a run's model kind -> the module whose open_run(run) explores it (imported when needed: it imports this
# module): the image models (explore/images.py), and a policy that acts over time, shown as its episode
# (explore/episode.py)
RUN_MODULES = {"vit": "npformer.explore.images", "vla": "npformer.explore.images",
               "action_lm": "npformer.explore.episode"}
# a Hugging Face directory's config.json model_type -> the module whose open_dir(path) explores one
# (imported when needed: each imports this module)
HF_EXPLORERS = {"bert": "npformer.explore.encoders", "roberta": "npformer.explore.encoders",
                "distilbert": "npformer.explore.encoders", "gpt2": "npformer.explore.causal"}


def open_explorer(source) -> Explorer:
    """"minilm" (all-MiniLM-L6-v2), a Hugging Face directory (config.json names a model_type of
    HF_EXPLORERS) or a run directory written by ``npformer train`` (its config.json has no model_type)."""
    from ..pretrained.hf import model_type
    from ..train.checkpoint import load_run

    if str(source) == "minilm":
        return importlib.import_module(HF_EXPLORERS["bert"]).open_dir()
    if (hf := model_type(source)) is not None:
        if hf not in HF_EXPLORERS:
            raise ValueError(f"{Path(source) / 'config.json'}: model_type {hf!r} is not supported: the explorer "
                             f"opens {', '.join(HF_EXPLORERS)} directories")
        return importlib.import_module(HF_EXPLORERS[hf]).open_dir(source)
    run = load_run(source)
    kind = run.config["model_kind"]
    if kind in RUN_MODULES:
        return importlib.import_module(RUN_MODULES[kind]).open_run(run)
    if kind not in EXPLORERS:
        raise ValueError(f"no explorer for the {run.config['task']!r} task ({kind} model); "
                         f"known model kinds: {', '.join([*EXPLORERS, *RUN_MODULES])}")
    return EXPLORERS[kind](run)


def parse_inputs(ex: Explorer, inputs: list[str], seed: int | None = None,
                 instruction: str | None = None, perturb: bool = False) -> list[dict]:
    """The command line's INPUT... (and --seed/--instruction for tabletop and gripper, --perturb for
    gripper) as input dicts; the explorer's default input when none is given."""
    if ex.kind == "action_lm":
        if inputs:
            raise ValueError("a gripper run takes --seed S, --instruction TEXT and --perturb, not positional inputs")
        return [{"seed": 0 if seed is None else seed, "instruction": instruction, "perturb": int(perturb)}]
    if perturb:
        raise ValueError("--perturb is for a gripper run (an episode with the world's perturbations)")
    if getattr(ex, "scene_inputs", False):                       # a tabletop run (explore/images.py)
        if inputs:
            raise ValueError("a tabletop run takes --seed S and --instruction TEXT, not positional inputs")
        return [{"seed": 0 if seed is None else seed, "instruction": instruction}]
    if seed is not None or instruction is not None:
        raise ValueError("--seed and --instruction are for a tabletop run (and a gripper run)")
    if not inputs:
        return ex.default_inputs()
    name = ex.fields[0]["name"]
    return [{name: s} for s in inputs]
