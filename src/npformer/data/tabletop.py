"""A generated tabletop world for a tiny vision-language-action policy.

Scene: a 32 x 32 RGB image, a 4 x 4 grid of 8 x 8 cells (cell id = row * 4 + col). It holds
2 to 4 blocks of distinct colours (filled squares) and one or two containers (a box is a
hollow square, a bowl is a ring), every object in its own cell, with small jitter of
position, size and shade.
Instruction: names one block by colour and one container, with variations
("put the red block in the box", "pick up the blue cube and drop it into the bowl", ...).
Action: two discrete tokens, the cell to pick from and the cell to place in.

Held-out split: instructions that pair yellow with the bowl never appear in training
(``split="train"``); ``split="yellow_bowl"`` gives only those.

Reading: the task's ``text_encoder`` setting says how the policy reads an instruction, as word ids
into its own table (``ScratchText``, "scratch", the default) or as the frozen all-MiniLM-L6-v2's
word-piece states (``pretrained_text.PretrainedText``, "minilm"; ``npformer train tabletop
--text-encoder minilm``).

Dimension legend: B scenes, L words or word pieces (padded), S text-state width, H = W = 32 pixels,
C = 3 channels.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ..ops import log_softmax
from ..sim.language import (
    BLOCK_NOUNS,
    COLOURS,
    CONTAINERS,
    HELD_OUT,
    PREPOSITIONS,
    TABLE,
    TEMPLATES,
    make_instruction,
    parse,
    tokenize,
)
from .pretrained_text import PretrainedText
from .tasks import Batch, Task

GRID = 4                                    # cells per side
CELL = 8                                    # pixels per cell side
IMAGE_SIZE = GRID * CELL                    # 32
N_CELLS = GRID * GRID                       # 16
MAX_WORDS = 16                              # longest instruction, padded

PAD = "<pad>"
UNK = "[UNK]"                               # a word the vocabulary lacks (``npformer eval --instructions``)


def training_words() -> set[str]:
    """Every word a training instruction can hold: the world's names, the nouns, the prepositions and the
    templates' words."""
    words = set(COLOURS) | set(CONTAINERS) | set(BLOCK_NOUNS) | set(PREPOSITIONS)
    for t in TEMPLATES:
        words |= {w for w in t.split() if not w.startswith("{")}
    return words


def _vocabulary() -> list[str]:
    return [PAD] + sorted(training_words()) + [UNK]


# word-level; id 0 is padding, the last id [UNK]. [UNK] came last so that runs saved before it existed
# (vocab_size one smaller) keep every other word's id; they read an unknown word as padding instead
# (``ScratchText.inputs``).
VOCAB = _vocabulary()
WORD_TO_ID = {w: i for i, w in enumerate(VOCAB)}
UNK_ID = WORD_TO_ID[UNK]


COLOUR_NAMES = list(COLOURS)                # fixed order: the columns of ``Scenes.blocks``
CONTAINER_NAMES = list(CONTAINERS)          # the columns of ``Scenes.containers``
MAX_BLOCKS, MAX_CONTAINERS = 4, 2
KIND_BLOCK, KIND_BOX, KIND_BOWL = 0, 1, 2


@dataclass
class Scene:
    """One scene: its image and where everything is."""
    image: np.ndarray                       # (H, W, C) float32 in [0, 1]
    blocks: dict                            # colour -> cell id
    containers: dict                        # "box"/"bowl" -> cell id


@dataclass
class Scenes:
    """A batch of scenes: images and, per colour / container kind, its cell or -1 when absent."""
    images: np.ndarray                      # (B, H, W, C) float32
    blocks: np.ndarray                      # (B, 5) int, columns in COLOUR_NAMES order
    containers: np.ndarray                  # (B, 2) int, columns in CONTAINER_NAMES order

    def scene(self, i: int) -> Scene:
        return Scene(self.images[i],
                     {c: int(self.blocks[i, j]) for j, c in enumerate(COLOUR_NAMES) if self.blocks[i, j] >= 0},
                     {k: int(self.containers[i, j]) for j, k in enumerate(CONTAINER_NAMES)
                      if self.containers[i, j] >= 0})


# -- rendering ---------------------------------------------------------------------------------
def _swap_in(order: np.ndarray, value: int, n_used: np.ndarray, rng: np.random.Generator) -> None:
    """Make ``value`` one of the first ``n_used`` entries of each row of the permutations ``order``
    (B, K), in place, by swapping it with a random used position."""
    b = np.arange(len(order))
    now = np.argmax(order == value, axis=1)                       # (B,) where value sits
    target = (rng.random(len(order)) * n_used).astype(np.int64)   # (B,) a used position
    order[b, now] = order[b, target]
    order[b, target] = value


def render_scenes(rng: np.random.Generator, n: int, require: tuple[str, str] | None = None) -> Scenes:
    """``n`` random scenes, drawn all at once. ``require=(colour, container)`` puts both in every scene.

    Object slots 0..3 are blocks (the first 2..4 used), slots 4..5 containers (the first 1..2 used);
    every used slot gets its own cell, so no two objects share a cell.
    """
    colour_order, kind_order, cells, active = _choose_objects(rng, n, require)
    kind = np.concatenate([np.full((n, MAX_BLOCKS), KIND_BLOCK), 1 + kind_order], axis=1)  # (B, 6)
    shade = _shades(rng, colour_order, kind_order)                # (B, 6, 3)
    mask = _object_masks(rng, kind, active)                       # (B, 6, 8, 8)
    table = np.clip(np.asarray(TABLE) * rng.uniform(0.95, 1.05, (n, 1)), 0, 1)  # (B, 3)
    images = _paint(cells, mask, shade, table)                    # (B, H, W, C)

    b = np.arange(n)
    blocks = np.full((n, len(COLOUR_NAMES)), -1, dtype=np.int64)  # (B, 5)
    containers = np.full((n, len(CONTAINER_NAMES)), -1, dtype=np.int64)  # (B, 2)
    for j in range(MAX_BLOCKS):
        on = active[:, j]
        blocks[b[on], colour_order[on, j]] = cells[on, j]
    for j in range(MAX_CONTAINERS):
        on = active[:, MAX_BLOCKS + j]
        containers[b[on], kind_order[on, j]] = cells[on, MAX_BLOCKS + j]
    return Scenes(images, blocks, containers)


def _choose_objects(rng: np.random.Generator, n: int, require: tuple[str, str] | None):
    """What each scene holds and where: colour_order (B, 5) and kind_order (B, 2), random orders whose
    first entries are used; cells (B, 6), a distinct cell per slot; active (B, 6), the used slots."""
    n_blocks = rng.integers(2, MAX_BLOCKS + 1, n)                  # (B,)
    n_conts = rng.integers(1, MAX_CONTAINERS + 1, n)              # (B,)
    colour_order = rng.random((n, len(COLOUR_NAMES))).argsort(1)  # (B, 5) a random order of the colours
    kind_order = rng.random((n, len(CONTAINER_NAMES))).argsort(1)  # (B, 2)
    if require is not None:
        _swap_in(colour_order, COLOUR_NAMES.index(require[0]), n_blocks, rng)
        _swap_in(kind_order, CONTAINER_NAMES.index(require[1]), n_conts, rng)
    cells = rng.random((n, N_CELLS)).argsort(1)[:, :MAX_BLOCKS + MAX_CONTAINERS]  # (B, 6) distinct cells
    active = np.concatenate([np.arange(MAX_BLOCKS) < n_blocks[:, None],
                             np.arange(MAX_CONTAINERS) < n_conts[:, None]], axis=1)  # (B, 6)
    return colour_order, kind_order, cells, active


def _shades(rng: np.random.Generator, colour_order: np.ndarray, kind_order: np.ndarray) -> np.ndarray:
    """Each slot's colour (B, 6, 3) float32: its palette colour with a jittered shade."""
    n, slots = len(colour_order), MAX_BLOCKS + MAX_CONTAINERS
    palette = np.array([COLOURS[c] for c in COLOUR_NAMES] + [CONTAINERS[k] for k in CONTAINER_NAMES])  # (7, 3)
    rgb = palette[np.concatenate([colour_order[:, :MAX_BLOCKS], len(COLOUR_NAMES) + kind_order], axis=1)]  # (B, 6, 3)
    shade = np.clip(rgb * rng.uniform(0.85, 1.12, (n, slots, 1)) + rng.uniform(-0.05, 0.05, (n, slots, 3)), 0, 1)
    return shade.astype(np.float32)


def _object_masks(rng: np.random.Generator, kind: np.ndarray, active: np.ndarray) -> np.ndarray:
    """The pixels (B, 6, 8, 8) bool each slot covers in its cell: a filled square (block), a hollow
    square (box) or a ring (bowl), with jittered size and position; nothing for an unused slot."""
    n, slots = kind.shape
    size = np.where(kind == KIND_BLOCK, 4, 6) + rng.integers(0, 2, (n, slots))  # (B, 6): blocks 4-5, boxes 6-7 px
    oy = (rng.random((n, slots)) * (CELL - size + 1)).astype(np.int64)  # (B, 6) top-left inside the cell
    ox = (rng.random((n, slots)) * (CELL - size + 1)).astype(np.int64)
    centre = rng.uniform(3.5, 4.5, (n, slots, 2))                 # (B, 6, 2) bowl centre
    radius = rng.uniform(3.0, 3.6, (n, slots))                    # (B, 6) bowl outer radius

    yy = np.arange(CELL)[:, None]                                 # (8, 1) pixel rows in a cell
    xx = np.arange(CELL)[None, :]                                 # (1, 8)
    oy4, ox4, s4 = oy[..., None, None], ox[..., None, None], size[..., None, None]  # (B, 6, 1, 1)
    square = (yy >= oy4) & (yy < oy4 + s4) & (xx >= ox4) & (xx < ox4 + s4)          # (B, 6, 8, 8)
    hole = (yy > oy4) & (yy < oy4 + s4 - 1) & (xx > ox4) & (xx < ox4 + s4 - 1)     # (B, 6, 8, 8)
    dist = np.hypot(yy + 0.5 - centre[..., 0, None, None], xx + 0.5 - centre[..., 1, None, None])  # (B, 6, 8, 8)
    ring = (dist <= radius[..., None, None]) & (dist >= radius[..., None, None] - 1.4)
    mask = np.where((kind == KIND_BLOCK)[..., None, None], square,
                    np.where((kind == KIND_BOX)[..., None, None], square & ~hole, ring))  # (B, 6, 8, 8)
    return mask & active[..., None, None]


def _paint(cells: np.ndarray, mask: np.ndarray, shade: np.ndarray, table: np.ndarray) -> np.ndarray:
    """The images (B, H, W, C) float32: the table's colour, each slot's pixels painted in its cell."""
    n, slots = cells.shape
    canvas = np.empty((n, N_CELLS, CELL, CELL, 3), dtype=np.float32)  # (B, 16, 8, 8, 3) cell tiles
    canvas[...] = table[:, None, None, None, :]
    b = np.arange(n)
    for j in range(slots):                                        # cells differ, so slots never overlap
        tile = canvas[b, cells[:, j]]                             # (B, 8, 8, 3)
        canvas[b, cells[:, j]] = np.where(mask[:, j, ..., None], shade[:, j, None, None, :], tile)
    images = canvas.reshape(n, GRID, GRID, CELL, CELL, 3).transpose(0, 1, 3, 2, 4, 5)
    return images.reshape(n, IMAGE_SIZE, IMAGE_SIZE, 3)           # (B, H, W, C) float32


def render_scene(rng: np.random.Generator, require: tuple[str, str] | None = None) -> Scene:
    """One random scene (``render_scenes`` with n = 1)."""
    return render_scenes(rng, 1, require).scene(0)


# -- instructions ------------------------------------------------------------------------------
def encode(instruction: str, max_words: int = MAX_WORDS) -> np.ndarray:
    """Word ids (L,) padded with 0. Unknown words or too many words raise ValueError."""
    words = tokenize(instruction)
    if not words:
        raise ValueError("the instruction is empty")
    unknown = [w for w in words if w not in WORD_TO_ID]
    if unknown:
        raise ValueError(f"unknown word {unknown[0]!r} in the instruction; known words: {' '.join(VOCAB[1:UNK_ID])}")
    if len(words) > max_words:
        raise ValueError(f"the instruction has {len(words)} words, at most {max_words} are allowed")
    ids = np.zeros(max_words, dtype=np.int64)                     # (L,)
    ids[:len(words)] = [WORD_TO_ID[w] for w in words]
    return ids


def check_instruction(scene: Scene, instruction: str) -> tuple[str, str]:
    """Validate an instruction against a scene before acting on it; returns (colour, container)."""
    encode(instruction)
    colour, container = parse(instruction)
    check_in_scene(scene, colour, container)
    return colour, container


def check_in_scene(scene: Scene, colour: str | None, container: str | None) -> None:
    """ValueError unless the scene holds the block of ``colour`` and the ``container`` (None: not checked)."""
    if colour is not None and colour not in scene.blocks:
        raise ValueError(f"there is no {colour} block in this scene (blocks: {', '.join(sorted(scene.blocks))})")
    if container is not None and container not in scene.containers:
        raise ValueError(f"there is no {container} in this scene (containers: {', '.join(sorted(scene.containers))})")


# -- episodes ----------------------------------------------------------------------------------
SPLITS = ("train", "test", "yellow_bowl", "all")


def sample_episodes(rng: np.random.Generator, n: int, split: str = "train"):
    """``n`` episodes: (Scenes, instructions list[str], actions (B, 2) int64 [pick cell, place cell]).

    split: "train"/"test" never pair yellow with the bowl; "yellow_bowl" always does (every scene
    has both); "all" samples every pairing a scene allows.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    scenes = render_scenes(rng, n, require=HELD_OUT if split == "yellow_bowl" else None)
    u = rng.random((n, 4))                                        # (B, 4): pairing, template, noun, preposition
    texts, actions = [], np.empty((n, 2), dtype=np.int64)         # (B, 2)
    for i in range(n):
        if split == "yellow_bowl":
            pairs = [HELD_OUT]
        else:
            pairs = [(c, k) for j, c in enumerate(COLOUR_NAMES) if scenes.blocks[i, j] >= 0
                     for m, k in enumerate(CONTAINER_NAMES) if scenes.containers[i, m] >= 0
                     and (split == "all" or (c, k) != HELD_OUT)]
        colour, container = pairs[int(u[i, 0] * len(pairs))]
        texts.append(make_instruction(colour, container, u[i, 1:]))
        actions[i] = (scenes.blocks[i, COLOUR_NAMES.index(colour)],
                      scenes.containers[i, CONTAINER_NAMES.index(container)])
    return scenes, texts, actions


def sample_episode(rng: np.random.Generator, split: str = "train"):
    """One (Scene, instruction, pick cell, place cell)."""
    scenes, texts, actions = sample_episodes(rng, 1, split)
    return scenes.scene(0), texts[0], int(actions[0, 0]), int(actions[0, 1])


def sample_batch(rng: np.random.Generator, n: int, split: str = "train", max_words: int = MAX_WORDS):
    """Returns (word_ids (B, L) int64, images (B, H, W, C) float32, actions (B, 2) int64 [pick, place],
    texts list[str])."""
    scenes, texts, actions = sample_episodes(rng, n, split)
    ids = np.stack([encode(t, max_words) for t in texts])         # (B, L)
    return ids, scenes.images, actions, texts


# -- how the policy reads an instruction ---------------------------------------------------------
TEXT_ENCODERS = ("scratch", "minilm")       # TabletopTask.Settings.text_encoder
MINILM_MAX_PIECES = 32                      # word pieces per instruction, [CLS] and [SEP] included


class ScratchText:
    """The policy's own words: ids (B, MAX_WORDS) into its word table (``VOCAB``), learned from the
    templates alone; a word they never use has no row of its own, only the shared [UNK] row.
    ``PretrainedText`` is the other reader."""

    name = "scratch"
    text_dim = 0                            # the model looks word ids up (VLAConfig.text_dim)
    max_words = MAX_WORDS

    def tokens(self, text: str) -> list[str]:
        """The words the policy reads, in order."""
        return tokenize(text)

    def unknown(self, text: str) -> list[str]:
        """The words its vocabulary does not hold."""
        return [w for w in tokenize(text) if w not in WORD_TO_ID]

    def inputs(self, texts: list[str], unknown_ok: bool = False, unk_id: int = UNK_ID) -> np.ndarray:
        """Word ids (B, MAX_WORDS) int64, 0-padded. An unknown word raises ValueError or, with ``unknown_ok``,
        becomes ``unk_id``: [UNK] (the default), or the padding id 0 for a run saved before the table had an
        [UNK] row (``unknown_id``), where the policy does not see the word at all."""
        if not unknown_ok:
            return np.stack([encode(t) for t in texts])           # (B, L)
        if unk_id not in (0, UNK_ID):
            raise ValueError(f"unk_id must be {UNK_ID} ([UNK]) or 0 (padding), got {unk_id}")
        out = np.zeros((len(texts), MAX_WORDS), dtype=np.int64)  # (B, L)
        for i, text in enumerate(texts):
            words = tokenize(text)
            if not words:
                raise ValueError("the instruction is empty")
            if len(words) > MAX_WORDS:
                raise ValueError(f"the instruction has {len(words)} words, at most {MAX_WORDS} are allowed")
            out[i, :len(words)] = [WORD_TO_ID.get(w, unk_id) for w in words]
        return out


@functools.cache
def text_reader(name: str):
    """The reader named ``name`` (one of TEXT_ENCODERS), one per process: MiniLM loads once, and the
    states it computed are shared by every task and command that reads instructions."""
    if name == "scratch":
        return ScratchText()
    if name == "minilm":
        return PretrainedText(max_words=MINILM_MAX_PIECES)
    raise ValueError(f"text_encoder must be one of {', '.join(TEXT_ENCODERS)}, got {name!r}")


def reader_for(model):
    """The reader a VLA model's words come from; its config's text_dim says which (0: its own table)."""
    reader = text_reader("minilm" if model.config.text_dim else "scratch")
    if reader.text_dim != model.config.text_dim:
        raise ValueError(f"the model reads {model.config.text_dim}-wide text states; all-MiniLM-L6-v2 gives "
                         f"{reader.text_dim}")
    return reader


def unknown_id(model) -> int | None:
    """The id a scratch policy reads an unknown word as: ``UNK_ID``, or 0 (padding: the word is not seen)
    for a run saved before the word table had an [UNK] row (its vocab_size is ``UNK_ID``). None for a
    policy that reads text states (it has no word table)."""
    c = model.config
    if c.text_dim:
        return None
    if c.vocab_size == len(VOCAB):
        return UNK_ID
    if c.vocab_size == UNK_ID:
        return 0
    raise ValueError(f"the model's word table has {c.vocab_size} rows; the tabletop vocabulary has {len(VOCAB)} "
                     f"words ([UNK] included) or {UNK_ID} (runs saved before [UNK])")


def model_words(reader, model, texts: list[str], unknown_ok: bool = False) -> np.ndarray:
    """``reader.inputs(texts)`` ready for ``model``: ids as they are (with ``unknown_ok``, an unknown word is
    ``unknown_id(model)``), text states in the model's dtype."""
    if reader.text_dim:
        words = reader.inputs(texts, unknown_ok=unknown_ok)       # (B, L, S)
        return words.astype(model.dtype, copy=False)
    return reader.inputs(texts, unknown_ok=unknown_ok, unk_id=unknown_id(model))  # (B, L)


def real_words(words: np.ndarray) -> int:
    """How many words (or word pieces) a batch really holds: non-zero ids, or text states not all zero."""
    return int(((words != 0).any(axis=-1) if words.ndim == 3 else words != 0).sum())


# -- the task: npformer train tabletop ----------------------------------------------------------

EVAL_STREAM = 1_000_003                     # held-out scenes come from their own seed sequence


class TabletopTask(Task):
    name = "tabletop"
    model_kind = "vla"
    primary_metric = "success"
    higher_is_better = True
    description = "a vision-language-action policy: put the named block in the named container"

    @dataclass
    class Settings:
        eval_size: int = 2000           # held-out scenes per split when evaluating with no --n
        text_encoder: str = "scratch"   # how instructions are read: "scratch" (the policy's own word table)
                                        # or "minilm" (frozen all-MiniLM-L6-v2 word-piece states, projected)

        def __post_init__(self) -> None:
            if self.eval_size < 1:
                raise ValueError(f"eval_size must be >= 1, got {self.eval_size}")
            if self.text_encoder not in TEXT_ENCODERS:
                raise ValueError(f"text_encoder must be one of {', '.join(TEXT_ENCODERS)}, got {self.text_encoder!r}")

    settings: Settings

    @property
    def reader(self):
        """What turns instructions into the model's words: ``ScratchText`` or ``PretrainedText``."""
        return text_reader(self.settings.text_encoder)

    def default_model_config(self) -> dict:
        cfg = {"vocab_size": len(VOCAB), "max_words": MAX_WORDS, "image_size": IMAGE_SIZE, "patch_size": CELL,
               "in_channels": 3, "d_model": 64, "n_heads": 4, "d_ff": 128, "n_layers": 3, "dropout": 0.0}
        if self.settings.text_encoder != "scratch":
            # text_dropout: trained on two container words only, the policy otherwise keys on whatever few
            # directions tell "box" from "bowl" apart and misreads "dish" or "tub"; with 30% of the projected
            # features dropped it must read the broad directions they share (chosen on the paraphrase set's
            # dev part only: 0.3 over 0 and 0.5)
            cfg.update(text_dim=self.reader.text_dim, max_words=self.reader.max_words, text_dropout=0.3)
        return cfg

    def build_model(self, config, rng: np.random.Generator):
        model = super().build_model(config, rng)
        if model.config.text_dim != self.reader.text_dim:
            raise ValueError(f"text_encoder {self.settings.text_encoder!r} gives the model "
                             f"{'word ids' if not self.reader.text_dim else f'{self.reader.text_dim}-wide states'}"
                             f", but the model config has text_dim {model.config.text_dim}")
        if not model.config.text_dim and model.config.vocab_size == len(VOCAB):
            # no training instruction holds an unknown word, so the [UNK] row never gets a gradient: start it
            # at zero and it stays there (AdamW moves and decays nothing without one), an unknown word then
            # being a token with its position and its type but no content of its own
            model.word_embed.tok.params["weight"][UNK_ID] = 0
        return model

    def default_train_config(self) -> dict:
        cfg = {"steps": 800, "batch_size": 64, "schedule": "cosine", "lr": 2e-3, "warmup": 50,
               "optimizer": "adamw", "weight_decay": 0.01, "label_smoothing": 0.0, "eval_every": 250,
               "eval_n": 500}
        if self.settings.text_encoder != "scratch":
            # the policy's matrices are 64 wide: a second BLAS thread buys nothing on a quiet machine (the
            # weights come out the same) and costs up to 5x when other jobs share the cores
            cfg["blas_threads"] = 1
        return cfg

    def train_batch(self, rng: np.random.Generator, batch_size: int) -> Batch:
        scenes, texts, actions = sample_episodes(rng, batch_size, "train")
        words = self.reader.inputs(texts)                             # (B, L) ids or (B, L, S) states
        n_tokens = real_words(words) + batch_size * (N_CELLS + 2)     # words + patches + action tokens
        return Batch((words, scenes.images, actions), n_tokens=n_tokens)

    def evaluate(self, model, n: int | None = None, seed: int = 0, batch_size: int = 500) -> dict:
        """On ``n`` fresh held-out scenes per split, drawn with ``seed`` from a stream training never uses:
        success (pick and place both right), pick/place accuracy and loss on the "test" split (every
        pairing but yellow-with-bowl), and success on the held-out "yellow_bowl" pairing."""
        n = self.settings.eval_size if n is None else int(n)
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        out = {}
        for split, prefix in (("test", ""), ("yellow_bowl", "yellow_bowl_")):
            rng = np.random.default_rng([seed, EVAL_STREAM, 0 if split == "test" else 1])
            ok = pick = place = 0
            nll = 0.0
            for i in range(0, n, batch_size):
                scenes, texts, actions = sample_episodes(rng, min(batch_size, n - i), split)
                words = model_words(self.reader, model, texts)                    # (B, L) or (B, L, S)
                logits, _ = model.forward(words, scenes.images.astype(model.dtype))  # (B, 2, N)
                pred = logits.argmax(-1)                                          # (B, 2)
                logp = log_softmax(logits.astype(np.float64))                    # (B, 2, N)
                nll -= float(np.take_along_axis(logp, actions[..., None], -1).sum())
                ok += int((pred == actions).all(axis=1).sum())
                pick += int((pred[:, 0] == actions[:, 0]).sum())
                place += int((pred[:, 1] == actions[:, 1]).sum())
            out[prefix + "success"] = ok / n
            if split == "test":
                out.update(pick_accuracy=pick / n, place_accuracy=place / n, loss=nll / (2 * n))
        out["n"] = n
        return out
