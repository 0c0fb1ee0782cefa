"""A trained tabletop policy (``npformer train tabletop``) at work: acting on one scene, and what its
attention reads over many. ``npformer act`` prints and draws these; ``npformer attention`` on a
tabletop run draws ``act`` for scene 0.

Dimension legend: B instructions, L layers, H heads, T tokens (2 action tokens, the word slots,
the image patches; ``model.layout(n_words)`` names their slices).
"""
from __future__ import annotations

import numpy as np

from ..ops import softmax_forward
from .tabletop import (
    COLOURS,
    CONTAINERS,
    GRID,
    WORD_TO_ID,
    Scene,
    check_instruction,
    encode,
    sample_batch,
    sample_episode,
    tokenize,
)


def scene_for_seed(seed: int) -> tuple[Scene, str]:
    """The scene ``seed`` names (the same seed always gives the same scene), and an instruction made
    up for it (any pairing it allows, yellow-with-bowl included)."""
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    scene, text, _, _ = sample_episode(np.random.default_rng([seed, 7]), split="all")
    return scene, text


def act(model, scene: Scene, instruction: str) -> dict:
    """Check the instruction against the scene (ValueError on bad input), then predict. Returns a dict
    with the words, the predicted cells and probabilities, the true cells, the attention weights
    (per layer (H, T, T)) and the token layout."""
    colour, container = check_instruction(scene, instruction)
    ids = encode(instruction, model.config.max_words)[None]          # (1, L)
    logits, cache = model.forward(ids, scene.image[None].astype(model.dtype))  # (1, 2, N)
    probs, _ = softmax_forward(logits[0].astype(np.float64))        # (2, N)
    pick, place = (int(i) for i in probs.argmax(-1))
    return {"words": tokenize(instruction), "pick": pick, "place": place,
            "p_pick": float(probs[0, pick]), "p_place": float(probs[1, place]),
            "true_pick": scene.blocks[colour], "true_place": scene.containers[container],
            "weights": [w["self"][0] for w in model.attention_weights(cache)],
            "layout": model.layout(ids.shape[1])}


def describe(scene: Scene) -> str:
    """Where everything is: "red block at cell 5 (row 1, col 1); box at cell 9 (row 2, col 1)"."""
    def where(cell):
        return f"cell {cell} (row {cell // GRID}, col {cell % GRID})"
    parts = [f"{c} block at {where(cell)}" for c, cell in sorted(scene.blocks.items(), key=lambda kv: kv[1])]
    parts += [f"{k} at {where(cell)}" for k, cell in sorted(scene.containers.items(), key=lambda kv: kv[1])]
    return "; ".join(parts)


# -- the attention study: npformer act DIR --study N -----------------------------------------------

# the mean weights the study reports, in this order, each (layers, heads)
STUDY_KEYS = ("block->colour", "block->the_before_colour", "block->all_the", "pick->colour", "pick->all_the",
              "place->container", "place->all_the", "pick->its_block_patch", "place->its_container_patch",
              "pick->all_words", "pick->all_patches", "place->all_words", "place->all_patches",
              "the_before_colour->colour")
_BEATS = "block->colour beats block->the"       # the share of wins, kept with the sums while counting

_THE = WORD_TO_ID["the"]
_NOUNS = {WORD_TO_ID["block"], WORD_TO_ID["cube"]}
_COLOUR_IDS = {WORD_TO_ID[c] for c in COLOURS}
_CONTAINER_IDS = {WORD_TO_ID[k] for k in CONTAINERS}


def attention_study(model, n: int, seed: int = 0, batch_size: int = 250) -> dict:
    """Over n fresh instructions ("all" pairings, so yellow-with-bowl too), per layer and head,
    the mean attention weight
      block -> colour word, block -> "the" before the colour, block -> every "the" (summed);
      pick  -> colour word, pick -> "the" (summed);  place -> container word, place -> "the" (summed);
      pick -> the patch of the block to pick, place -> the patch of the container; each action token's
      total weight on words and on patches;
    and the share of instructions where block -> colour beats block -> the (the article before it),
    "the" (before the colour) -> colour, and the weight one key would get if attention were uniform.
    "block" means the block noun ("block" or "cube") of the instruction."""
    rng = np.random.default_rng([seed, 99])
    sums = None
    uniform = 0.0                                                 # the weight of one key if attention were uniform
    done = 0
    while done < n:
        b = min(batch_size, n - done)
        ids, images, actions, _ = sample_batch(rng, b, "all", model.config.max_words)
        _, cache = model.forward(ids, images.astype(model.dtype))
        w = np.stack([x["self"] for x in model.attention_weights(cache)], axis=1)  # (B, layers, H, T, T)
        lay = model.layout(ids.shape[1])
        if sums is None:
            sums = {k: np.zeros(w.shape[1:3]) for k in (*STUDY_KEYS, _BEATS)}      # (layers, H) each
        for i in range(b):
            for k, v in _instruction_terms(w[i], _positions(ids[i]), lay, actions[i]).items():
                sums[k] += v
            uniform += 1.0 / (2 + int((ids[i] != 0).sum()) + lay["patches"].stop - lay["patches"].start)
        done += b
    # every template puts "the" right before the colour, so block->the_before_colour has n terms
    wins = sums.pop(_BEATS)
    out = {k: np.round(v / n, 4).tolist() for k, v in sums.items()}
    out["share_block_colour_beats_the"] = np.round(wins / n, 4).tolist()
    return {"n": n, "seed": seed, "indexing": "[layer][head]", "uniform_weight": round(uniform / n, 4), **out}


def _positions(row: np.ndarray) -> dict:
    """Word positions in one instruction's ids (L,): the block noun, the colour, the container, every
    "the", and the "the" right before the colour (None if the colour has none)."""
    colour = next(j for j, t in enumerate(row) if t in _COLOUR_IDS)
    return {"noun": next(j for j, t in enumerate(row) if t in _NOUNS),
            "colour": colour,
            "container": next(j for j, t in enumerate(row) if t in _CONTAINER_IDS),
            "thes": [j for j, t in enumerate(row) if t == _THE],
            "before": colour - 1 if colour > 0 and row[colour - 1] == _THE else None}


def _instruction_terms(wi: np.ndarray, pos: dict, lay: dict, action: np.ndarray) -> dict:
    """One instruction's share of each study sum, (layers, H) each: wi (layers, H, T, T) its attention,
    pos its word positions (``_positions``), lay the token layout, action (2,) its pick and place cells."""
    w0, p0 = lay["words"].start, lay["patches"].start
    colour, thes = w0 + pos["colour"], [w0 + j for j in pos["thes"]]
    q_noun = wi[:, :, w0 + pos["noun"]]                           # (layers, H, T)
    terms = {"block->colour": q_noun[..., colour],
             "block->all_the": q_noun[..., thes].sum(-1),
             "pick->colour": wi[:, :, 0, colour],
             "pick->all_the": wi[:, :, 0, thes].sum(-1),
             "place->container": wi[:, :, 1, w0 + pos["container"]],
             "place->all_the": wi[:, :, 1, thes].sum(-1),
             "pick->its_block_patch": wi[:, :, 0, p0 + action[0]],
             "place->its_container_patch": wi[:, :, 1, p0 + action[1]]}
    if pos["before"] is not None:
        before = w0 + pos["before"]
        terms["block->the_before_colour"] = q_noun[..., before]
        terms[_BEATS] = q_noun[..., colour] > q_noun[..., before]
        terms["the_before_colour->colour"] = wi[:, :, before, colour]
    for a, name in ((0, "pick"), (1, "place")):
        terms[f"{name}->all_words"] = wi[:, :, a, lay["words"]].sum(-1)
        terms[f"{name}->all_patches"] = wi[:, :, a, lay["patches"]].sum(-1)
    return terms
