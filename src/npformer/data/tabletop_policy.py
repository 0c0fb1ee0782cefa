"""A trained tabletop policy (``npformer train tabletop``) at work: acting on one scene, what its
attention reads over many, and how it does on instructions of your own (a file of them, such as the
shipped paraphrase set in ``paraphrases/``). ``npformer act`` prints and draws the first two;
``npformer attention`` on a tabletop run draws ``act`` for scene 0; ``npformer eval DIR
--instructions FILE [FILE ...]`` runs the third. Each works for both policies, scratch and MiniLM
(``tabletop.reader_for`` says how a model reads its words).

Dimension legend: B instructions, L layers, H heads, T tokens (2 action tokens, the word slots,
the image patches; ``model.layout(n_words)`` names their slices).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..ops import softmax_forward
from ..settings import read_bounded, reading
from .tabletop import (
    COLOUR_NAMES,
    COLOURS,
    CONTAINER_NAMES,
    CONTAINERS,
    EVAL_STREAM,
    GRID,
    Scene,
    check_in_scene,
    check_instruction,
    model_words,
    reader_for,
    render_scenes,
    sample_episode,
    sample_episodes,
    tokenize,
    unknown_id,
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
    with the words (word pieces for a MiniLM policy), the predicted cells and probabilities, the true
    cells, the attention weights (per layer (H, T, T)) and the token layout.

    The scratch policy refuses a word its vocabulary lacks and an instruction that names no colour or
    container of the world. The MiniLM policy reads any text: a colour or container it names with the
    world's words must be in the scene, and gives the true cell; one it names otherwise (a paraphrase:
    "the crimson one goes in the crate") leaves that true cell None."""
    reader = reader_for(model)
    colour: str | None
    container: str | None
    if reader.name == "scratch":
        colour, container = check_instruction(scene, instruction)
    else:
        colour, container = _named(scene, instruction)
    words = model_words(reader, model, [instruction])                 # (1, L) ids or (1, L, S) states
    logits, cache = model.forward(words, scene.image[None].astype(model.dtype))  # (1, 2, N)
    probs, _ = softmax_forward(logits[0].astype(np.float64))        # (2, N)
    pick, place = (int(i) for i in probs.argmax(-1))
    return {"words": reader.tokens(instruction), "pick": pick, "place": place,
            "p_pick": float(probs[0, pick]), "p_place": float(probs[1, place]),
            "true_pick": scene.blocks[colour] if colour else None,
            "true_place": scene.containers[container] if container else None,
            "weights": [w["self"][0] for w in model.attention_weights(cache)],
            "layout": model.layout(words.shape[1])}


def _named(scene: Scene, instruction: str) -> tuple[str | None, str | None]:
    """The colour and the container the instruction names with the world's words, each None unless it
    names exactly one; the scene must hold those it names (ValueError otherwise)."""
    words = tokenize(instruction)
    if not words:
        raise ValueError("the instruction is empty")
    colours, containers = sorted({w for w in words if w in COLOURS}), sorted({w for w in words if w in CONTAINERS})
    colour = colours[0] if len(colours) == 1 else None
    container = containers[0] if len(containers) == 1 else None
    check_in_scene(scene, colour, container)
    return colour, container


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

_NOUNS = ("block", "cube")


def attention_study(model, n: int, seed: int = 0, batch_size: int = 250) -> dict:
    """Over n fresh instructions ("all" pairings, so yellow-with-bowl too), per layer and head,
    the mean attention weight
      block -> colour word, block -> "the" before the colour, block -> every "the" (summed);
      pick  -> colour word, pick -> "the" (summed);  place -> container word, place -> "the" (summed);
      pick -> the patch of the block to pick, place -> the patch of the container; each action token's
      total weight on words and on patches;
    and the share of instructions where block -> colour beats block -> the (the article before it),
    "the" (before the colour) -> colour, and the weight one key would get if attention were uniform.
    "block" means the block noun ("block" or "cube") of the instruction. The words are the tokens the
    policy reads: the instruction's words (scratch), or MiniLM's word pieces, [CLS] and [SEP] included
    (every word of the templates is one piece)."""
    rng = np.random.default_rng([seed, 99])
    reader = reader_for(model)
    sums: dict[str, np.ndarray] | None = None                     # made once the first batch gives the shape
    uniform = 0.0                                                 # the weight of one key if attention were uniform
    done = 0
    while done < n:
        b = min(batch_size, n - done)
        scenes, texts, actions = sample_episodes(rng, b, "all")
        words = model_words(reader, model, texts)                 # (B, L) or (B, L, S)
        _, cache = model.forward(words, scenes.images.astype(model.dtype))
        w = np.stack([x["self"] for x in model.attention_weights(cache)], axis=1)  # (B, layers, H, T, T)
        lay = model.layout(words.shape[1])
        if sums is None:
            sums = {k: np.zeros(w.shape[1:3]) for k in (*STUDY_KEYS, _BEATS)}      # (layers, H) each
        for i in range(b):
            tokens = reader.tokens(texts[i])
            for k, v in _instruction_terms(w[i], _positions(tokens), lay, actions[i]).items():
                sums[k] += v
            uniform += 1.0 / (2 + len(tokens) + lay["patches"].stop - lay["patches"].start)
        done += b
    # every template puts "the" right before the colour, so block->the_before_colour has n terms
    assert sums is not None                                       # n >= 1 (npformer act checks --study)
    wins = sums.pop(_BEATS)
    out = {k: np.round(v / n, 4).tolist() for k, v in sums.items()}
    out["share_block_colour_beats_the"] = np.round(wins / n, 4).tolist()
    return {"n": n, "seed": seed, "indexing": "[layer][head]", "uniform_weight": round(uniform / n, 4), **out}


def _positions(tokens: list[str]) -> dict:
    """Word positions in one instruction's tokens: the block noun, the colour, the container, every
    "the", and the "the" right before the colour (None if the colour has none)."""
    colour = next(j for j, t in enumerate(tokens) if t in COLOURS)
    return {"noun": next(j for j, t in enumerate(tokens) if t in _NOUNS),
            "colour": colour,
            "container": next(j for j, t in enumerate(tokens) if t in CONTAINERS),
            "thes": [j for j, t in enumerate(tokens) if t == "the"],
            "before": colour - 1 if colour > 0 and tokens[colour - 1] == "the" else None}


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


# -- instructions of your own: npformer eval DIR --instructions FILE --------------------------------
PARAPHRASES = Path(__file__).parent / "paraphrases"   # the shipped paraphrase set, one .tsv per part
MAX_INSTRUCTIONS_BYTES = 1 << 20                     # some 20,000 instructions; each is scored on --n scenes


def read_instructions(path) -> list[tuple[int, str, str, str]]:
    """Lines ``instruction<TAB>colour<TAB>container`` -> [(line number, instruction, colour, container)].
    Blank lines and lines starting with "#" are skipped. ValueError, naming the file and the line, for a
    malformed line or a colour or container outside the world; for a file with no instruction. A file
    over MAX_INSTRUCTIONS_BYTES, or not UTF-8, is a ValueError naming it too."""
    path = Path(path)
    data = read_bounded(path, MAX_INSTRUCTIONS_BYTES)
    with reading(path):
        text = data.decode("utf-8")
    out = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 3 or not all(f.strip() for f in fields):
            got = "an empty field" if len(fields) == 3 else f"{len(fields)} tab-separated field(s)"
            raise ValueError(f"{path} line {n}: expected instruction<TAB>colour<TAB>container, got {got}")
        instruction, colour, container = (f.strip() for f in fields)
        if colour not in COLOURS:
            raise ValueError(f"{path} line {n}: colour {colour!r} is not in the world ({', '.join(COLOURS)})")
        if container not in CONTAINERS:
            raise ValueError(f"{path} line {n}: container {container!r} is not in the world "
                             f"({', '.join(CONTAINERS)})")
        out.append((n, instruction, colour, container))
    if not out:
        raise ValueError(f"{path} holds no instructions (one per line: instruction<TAB>colour<TAB>container)")
    return out


def evaluate_instructions(model, lines: list, n: int = 200, seed: int = 0, source: str = "") -> dict:
    """Success on each of ``lines`` [(line number, instruction, colour, container)] over ``n`` fresh
    scenes holding that colour's block and that container (a line's scenes depend on the seed and
    its place in the list only), scored as ``TabletopTask.evaluate`` scores a scene: pick and place both right.
    The overall success is the mean over lines. Words the model's vocabulary does not know are read as the
    reader reads them (``unknown_ok``): the scratch policy does not see them, MiniLM reads any text. A line
    the reader refuses (too long, empty) is a ValueError naming ``source`` (the file) and its line number."""
    return evaluate_instruction_files(model, [(source, lines)], n=n, seed=seed)


def evaluate_instruction_files(model, files: list, n: int = 200, seed: int = 0) -> dict:
    """``evaluate_instructions`` over several files [(source, lines)] at once: every line of every file is
    checked before any is scored, each file's lines get the scenes they get alone (so a file's rows do not
    depend on the files beside it), and the overall success is the mean over all their lines. Adds
    ``files``, each file's own success and line count; each line names its ``file``."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if not files:
        raise ValueError("no instruction files given")
    reader = reader_for(model)
    words = [_words(reader, model, lines, source) for source, lines in files]   # every line checked first
    rows, per_file = [], []
    for (source, lines), file_words in zip(files, words, strict=True):
        file_rows = [{"file": source, **row} for row in _score_lines(model, reader, lines, file_words, n, seed)]
        per_file.append({"file": source, "n_lines": len(file_rows),
                         "success": float(np.mean([r["success"] for r in file_rows]))})
        rows += file_rows
    unk = unknown_id(model)
    unknown_as = ("word pieces (MiniLM reads any text)" if unk is None else "[UNK]" if unk else
                  "padding (this run was saved before the word table had an [UNK] row: the word is not seen)")
    return {"success": float(np.mean([r["success"] for r in rows])), "n_lines": len(rows), "n": n,
            "text_encoder": reader.name, "unknown_as": unknown_as,
            "unknown_words": sum(len(r["unknown_words"]) for r in rows),
            "lines_with_unknown_words": sum(bool(r["unknown_words"]) for r in rows), "files": per_file,
            "lines": rows}


def _words(reader, model, lines: list, source: str) -> list[np.ndarray]:
    """Each line's words for the model, (1, L) ids or (1, L, S) states; ValueError naming source and line."""
    words = []
    for number, text, _, _ in lines:
        try:
            words.append(model_words(reader, model, [text], unknown_ok=True))
        except ValueError as e:
            raise ValueError(f"{source or 'instructions'} line {number}: {e}") from None
    return words


def _score_lines(model, reader, lines: list, words: list, n: int, seed: int) -> list[dict]:
    """Each line's success over its n scenes, the k-th line's drawn from [seed, EVAL_STREAM, 2, k]."""
    rows = []
    for k, ((number, text, colour, container), w) in enumerate(zip(lines, words, strict=True)):
        rng = np.random.default_rng([seed, EVAL_STREAM, 2, k])
        scenes = render_scenes(rng, n, require=(colour, container))
        truth = np.stack([scenes.blocks[:, COLOUR_NAMES.index(colour)],
                          scenes.containers[:, CONTAINER_NAMES.index(container)]], axis=1)  # (n, 2)
        pred = model.act(np.repeat(w, n, axis=0), scenes.images.astype(model.dtype))       # (n, 2)
        rows.append({"line": number, "instruction": text, "colour": colour, "container": container,
                     "success": float((pred == truth).all(axis=1).mean()), "unknown_words": reader.unknown(text)})
    return rows
