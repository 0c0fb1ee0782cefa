"""The explorer's payload for the image models (docs/EXPLORE_FORMAT.md): a digits run (ViT) and a tabletop
run (VLA), each input's image beside its attention; ``payload.open_explorer`` opens them (``open_run``).
The gripper policy's episode view (explore/episode.py) draws its frames with ``image_json`` too.

    vit (digits)                {"index"}: a test image; targets the predicted class (and the label)
    vla (tabletop)              {"seed", "instruction"}: a scene and what to do; targets pick and place
"""
from __future__ import annotations

import base64

import numpy as np

from ..train.probe import unit_to_u8
from . import capture as cap
from . import knockout as ko
from . import relevance as rel
from . import targets as tg
from .payload import RunExplorer, _as_model, _check_text, _chosen, _one_hot, _target, group_json


def patch_labels(grid: int) -> list[str]:
    return [f"p({r},{c})" for r in range(grid) for c in range(grid)]


def image_json(image: np.ndarray, patch: int, offset: int) -> dict:
    img = np.asarray(image, dtype=np.float64)
    if img.shape[-1] == 1:
        img = np.repeat(img, 3, axis=-1)                                      # grey -> RGB
    grid = img.shape[0] // patch
    rgb = unit_to_u8(img)                                                    # (H, W, 3), bytes as they are
    return {"rgb": {"dtype": "u8", "shape": list(rgb.shape), "b64": base64.b64encode(rgb.tobytes()).decode("ascii")},
            "patch": int(patch), "grid": [grid, grid], "patch_token_offset": int(offset)}


class ViTExplorer(RunExplorer):
    """A digits run (ViT): a test image by index; targets the predicted class and, if other, the label."""

    fields = [{"name": "index", "label": "test image (index)", "kind": "int", "default": 0}, tg.FIELD]

    def default_inputs(self) -> list[dict]:
        return [{"index": 0}]

    def _tokens(self) -> tuple[list[str], list[str], int]:
        c = self.run.model.config
        cls = c.pool == "cls"
        patches = patch_labels(c.image_size // c.patch_size)
        return (["[CLS]"] if cls else []) + patches, (["special"] if cls else []) + ["patch"] * len(patches), int(cls)

    def explain(self, inp: dict) -> dict:
        task, model = self.run.task, self.run.model
        n = len(task.x_test)
        try:
            i = int(inp.get("index"))  # type: ignore[arg-type]  # None raises TypeError, answered below
        except (TypeError, ValueError):
            raise ValueError(f"a digits input is a test-image index 0..{n - 1}, got {inp.get('index')!r}") from None
        if not 0 <= i < n:
            raise ValueError(f"test-image index must be in 0..{n - 1}, got {i}")
        x = task.x_test[i:i + 1].astype(model.dtype)                          # (1, 8, 8, 1)
        logits, cache = model.forward(x)                                      # (1, K)
        pred, label = int(logits[0].argmax()), int(task.y_test[i])
        groups = cap.capture("vit", cache, {"self": None})
        tokens, kinds, offset = self._tokens()
        query = 0 if offset else None
        relevance, targets, names = {}, [], []
        n_cls = logits.shape[-1]
        choices = tg.choose(logits, [pred], _chosen(inp, {"cls": 0}, {}, n_cls, "class"), extra=((0, label),))
        for ch in choices:
            words = (["chosen"] if ch.chosen else []) + ["predicted" if ch.rank == 0 else f"alternative {ch.rank}"]
            name = f"class {ch.id} ({', '.join(words + (['label'] if ch.id == label != pred else []))})"
            grads = rel.attention_grads(model, model.backward, _one_hot(logits.shape, (0, ch.id)), cache)
            relevance[name] = rel.self_relevance(groups["self"].weights,
                                                 rel.stacked(grads, "encoder", model.config.n_layers))
            names.append(name)
            targets.append(_target(name, "self", query, f"logit of class {ch.id}", ch, "cls", str(ch.id)))
        knock = ko.knockout_json(model, "vit", groups,
                                 lambda k: model.forward(np.repeat(x, k, 0).astype(model.dtype))[0][:, None],
                                 choices, {"self": relevance}, names, {"self": [query] * len(names)})
        return {"knockout": knock, "label": f"test image {i}", "output": f"class {pred} (label {label})",
                "meta": {"label": label, "predicted": pred}, "targets": targets,
                "groups": [group_json("self", groups["self"], tokens, tokens, kinds, kinds, relevance)],
                "image": image_json(task.x_test[i], model.config.patch_size, offset)}

    def probe_labels(self, inputs, group):
        tokens = self._tokens()[0]
        return tokens, tokens


class VLAExplorer(RunExplorer):
    """A tabletop run (VLA): a scene by seed and an instruction; targets the pick and place actions."""

    scene_inputs = True                 # the command line's --seed and --instruction (payload.parse_inputs)

    fields = [{"name": "instruction", "label": "instruction", "kind": "text", "default": ""},
              {"name": "seed", "label": "scene seed", "kind": "int", "default": 0}, tg.FIELD]
    max_inputs = 2

    def default_inputs(self) -> list[dict]:
        return [{"seed": 0}]

    def _tokens(self, words: list[str], n_slots: int) -> tuple[list[str], list[str]]:
        c = self.run.model.config
        patches = patch_labels(c.image_size // c.patch_size)
        pads = n_slots - len(words)
        return (["PICK", "PLACE"] + list(words) + ["<pad>"] * pads + patches,
                ["action"] * 2 + ["word"] * len(words) + ["pad"] * pads + ["patch"] * len(patches))

    def explain(self, inp: dict) -> dict:
        from ..data.tabletop import model_words, reader_for
        from ..data.tabletop_policy import act, scene_for_seed

        model = self.run.model
        try:
            seed = int(inp.get("seed", 0))
        except (TypeError, ValueError):
            raise ValueError(f"seed must be an integer >= 0, got {inp.get('seed')!r}") from None
        scene, made_up = scene_for_seed(seed)
        instruction = inp.get("instruction") or made_up
        _check_text(instruction)
        res = act(model, scene, instruction)                  # checks the instruction against the scene
        words = model_words(reader_for(model), model, [instruction])        # (1, L) or (1, L, S)
        logits, cache = model.forward(words, scene.image[None].astype(model.dtype))  # (1, 2, N)
        lay = model.layout(words.shape[1])
        keep = np.ones(lay["patches"].stop, dtype=bool)                      # (T,) padded words are no keys
        keep[lay["words"]] = model.word_mask(words)[0]
        groups = cap.capture("vla", cache, {"self": np.broadcast_to(keep, (len(keep), len(keep)))})
        tokens, kinds = self._tokens(res["words"], words.shape[1])
        relevance, targets, names = {}, [], []
        n_cells = logits.shape[-1]
        choices = tg.choose(logits[0], [res["pick"], res["place"]],
                            _chosen(inp, {"pick": 0, "place": 1}, {}, n_cells, "cell"))
        for ch in choices:
            action = ("pick", "place")[ch.slot]
            name = action if ch.rank == 0 and not ch.chosen else f"{action}: cell {ch.id}{tg.suffix(ch)}"
            grads = rel.attention_grads(model, model.backward, _one_hot(logits.shape, (0, ch.slot, ch.id)), cache)
            relevance[name] = rel.self_relevance(groups["self"].weights,
                                                 rel.stacked(grads, "encoder", model.config.n_layers))
            names.append(name)
            targets.append(_target(name, "self", ch.slot, f"logit of {action} cell {ch.id}", ch, action, str(ch.id)))
        image = scene.image[None].astype(model.dtype)                        # (1, H, W, 3)
        knock = ko.knockout_json(model, "vla", groups,
                                 lambda k: model.forward(_as_model(np.repeat(words, k, 0), model),
                                                         np.repeat(image, k, 0).astype(model.dtype))[0],
                                 choices, {"self": relevance}, names, {"self": [ch.slot for ch in choices]})
        meta = {k: res[k] for k in ("pick", "place", "true_pick", "true_place")}
        meta.update(seed=seed, p_pick=round(res["p_pick"], 4), p_place=round(res["p_place"], 4))
        return {"label": f"scene {seed}: {instruction}",
                "output": f"pick cell {res['pick']}, place cell {res['place']}",
                "meta": meta, "targets": targets, "knockout": knock,
                "groups": [group_json("self", groups["self"], tokens, tokens, kinds, kinds, relevance)],
                "image": image_json(scene.image, model.config.patch_size, lay["patches"].start)}

    def probe_labels(self, inputs, group):
        from ..data.tabletop import VOCAB

        words = inputs[0][0]
        if words.ndim == 1:                                                  # word ids
            names = [VOCAB[int(i)] for i in words if int(i) != 0]
        else:                                                                # MiniLM states: no words kept
            names = [f"w{j}" for j in range(int((words != 0).any(-1).sum()))]
        tokens, _ = self._tokens(names, len(words))
        return tokens, tokens


def open_run(run) -> RunExplorer:
    """The explorer of a digits (vit) or tabletop (vla) run."""
    return {"vit": ViTExplorer, "vla": VLAExplorer}[run.config["model_kind"]](run)
